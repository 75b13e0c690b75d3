//! The snapshot and group snapshot calls of the API, each within the
//! call's namespace.

use berth_proto::berth::v1 as api;
use tonic::{Request, Response, Status};

use super::codes::status;
use super::scope::namespace;
use super::{BerthApi, convert};

pub(super) async fn create_snapshot(
    server: &BerthApi,
    req: Request<api::CreateSnapshotRequest>,
) -> Result<Response<api::Snapshot>, Status> {
    let ns = namespace(&req).map_err(status)?;
    let req = req.into_inner();
    let s = server
        .manager
        .snapshots_in(ns)
        .create_snapshot(&req.name, &req.volume)
        .await
        .map_err(status)?;
    Ok(Response::new(convert::views::snapshot_to_api(&s)))
}

pub(super) async fn delete_snapshot(
    server: &BerthApi,
    req: Request<api::DeleteSnapshotRequest>,
) -> Result<Response<api::Snapshot>, Status> {
    let ns = namespace(&req).map_err(status)?;
    let s = server
        .manager
        .snapshots_in(ns)
        .delete_snapshot(&req.into_inner().name)
        .await
        .map_err(status)?;
    Ok(Response::new(convert::views::snapshot_to_api(&s)))
}

pub(super) async fn get_snapshot(
    server: &BerthApi,
    req: Request<api::GetSnapshotRequest>,
) -> Result<Response<api::Snapshot>, Status> {
    let ns = namespace(&req).map_err(status)?;
    let s = server
        .manager
        .snapshots_in(ns)
        .get_snapshot(&req.into_inner().name)
        .map_err(status)?;
    Ok(Response::new(convert::views::snapshot_to_api(&s)))
}

pub(super) async fn list_snapshots(
    server: &BerthApi,
    req: Request<api::ListSnapshotsRequest>,
) -> Result<Response<api::ListSnapshotsResponse>, Status> {
    let ns = namespace(&req).map_err(status)?;
    let volume = req.into_inner().volume;
    let all = server
        .manager
        .snapshots_in(ns)
        .list_snapshots((!volume.is_empty()).then_some(volume.as_str()))
        .map_err(status)?;
    Ok(Response::new(api::ListSnapshotsResponse {
        snapshots: all.iter().map(convert::views::snapshot_to_api).collect(),
    }))
}

pub(super) async fn create_group_snapshot(
    server: &BerthApi,
    req: Request<api::CreateGroupSnapshotRequest>,
) -> Result<Response<api::GroupSnapshot>, Status> {
    let ns = namespace(&req).map_err(status)?;
    let req = req.into_inner();
    let g = server
        .manager
        .snapshots_in(ns)
        .create_group_snapshot(&req.name, &req.volumes)
        .await
        .map_err(status)?;
    Ok(Response::new(convert::views::group_to_api(&g)))
}

pub(super) async fn delete_group_snapshot(
    server: &BerthApi,
    req: Request<api::DeleteGroupSnapshotRequest>,
) -> Result<Response<api::GroupSnapshot>, Status> {
    let ns = namespace(&req).map_err(status)?;
    let g = server
        .manager
        .snapshots_in(ns)
        .delete_group_snapshot(&req.into_inner().name)
        .await
        .map_err(status)?;
    Ok(Response::new(convert::views::group_to_api(&g)))
}

pub(super) async fn get_group_snapshot(
    server: &BerthApi,
    req: Request<api::GetGroupSnapshotRequest>,
) -> Result<Response<api::GroupSnapshot>, Status> {
    let ns = namespace(&req).map_err(status)?;
    let g = server
        .manager
        .snapshots_in(ns)
        .get_group_snapshot(&req.into_inner().name)
        .map_err(status)?;
    Ok(Response::new(convert::views::group_to_api(&g)))
}

pub(super) async fn list_group_snapshots(
    server: &BerthApi,
    req: Request<api::ListGroupSnapshotsRequest>,
) -> Result<Response<api::ListGroupSnapshotsResponse>, Status> {
    let ns = namespace(&req).map_err(status)?;
    let groups = server.manager.snapshots_in(ns).list_group_snapshots();
    Ok(Response::new(api::ListGroupSnapshotsResponse {
        groups: groups.iter().map(convert::views::group_to_api).collect(),
    }))
}
