//! The GroupController service: group snapshots, each a snapshot of every
//! member volume taken together. A group's id comes from its name, and its
//! members are ordinary snapshots marked with it, so a retried
//! CreateVolumeGroupSnapshot finds what an earlier call took.

use std::collections::BTreeSet;

use berth_proto::csi::v1 as csi;
use csi::group_controller_service_capability::rpc::Type as GroupCap;
use tonic::{Request, Response, Status};

use super::{Controller, require};
use crate::answers;
use crate::snapshots::SnapshotRecord;
use crate::volumes::hash_hex;

/// What turns group snapshots on and off (`--disable`).
pub const CAPABILITY: &str = "CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT";

fn group_id(name: &str) -> String {
    format!("gs-{}", &hash_hex(name)[..32])
}

impl Controller {
    fn group_answer(&self, id: &str, members: &[SnapshotRecord]) -> csi::VolumeGroupSnapshot {
        let snapshots: Vec<csi::Snapshot> = members
            .iter()
            .map(|s| answers::snapshot(&self.config, s))
            .collect();
        csi::VolumeGroupSnapshot {
            group_snapshot_id: id.to_string(),
            ready_to_use: snapshots.iter().all(|s| s.ready_to_use),
            creation_time: snapshots
                .iter()
                .filter_map(|s| s.creation_time)
                .min_by_key(|t| (t.seconds, t.nanos)),
            snapshots,
        }
    }

    /// The group's members, checked against the snapshot ids the caller
    /// names (the spec has a plugin refuse a list that is not the group's).
    fn members(&self, id: &str, named: &[String]) -> Result<Vec<SnapshotRecord>, Status> {
        let members = self.snapshots.group(id);
        let have: BTreeSet<&str> = members.iter().map(|s| s.id.as_str()).collect();
        let want: BTreeSet<&str> = named.iter().map(String::as_str).collect();
        if !members.is_empty() && !want.is_empty() && have != want {
            return Err(Status::failed_precondition(format!(
                "snapshot_ids {want:?} are not the members of group snapshot {id}"
            )));
        }
        Ok(members)
    }
}

#[tonic::async_trait]
impl csi::group_controller_server::GroupController for Controller {
    async fn group_controller_get_capabilities(
        &self,
        _: Request<csi::GroupControllerGetCapabilitiesRequest>,
    ) -> Result<Response<csi::GroupControllerGetCapabilitiesResponse>, Status> {
        self.faults.inject("GroupControllerGetCapabilities").await?;
        let capabilities = match self.config.offers(CAPABILITY) {
            true => vec![csi::GroupControllerServiceCapability {
                r#type: Some(csi::group_controller_service_capability::Type::Rpc(
                    csi::group_controller_service_capability::Rpc {
                        r#type: GroupCap::CreateDeleteGetVolumeGroupSnapshot as i32,
                    },
                )),
            }],
            false => vec![],
        };
        Ok(Response::new(csi::GroupControllerGetCapabilitiesResponse {
            capabilities,
        }))
    }

    async fn create_volume_group_snapshot(
        &self,
        request: Request<csi::CreateVolumeGroupSnapshotRequest>,
    ) -> Result<Response<csi::CreateVolumeGroupSnapshotResponse>, Status> {
        self.faults.inject("CreateVolumeGroupSnapshot").await?;
        self.offered(CAPABILITY)?;
        let req = request.into_inner();
        require("name", &req.name)?;
        if req.source_volume_ids.is_empty() {
            return Err(Status::invalid_argument("source_volume_ids is required"));
        }
        self.check_secrets(&req.secrets)?;
        let id = group_id(&req.name);
        let sources: BTreeSet<&str> = req.source_volume_ids.iter().map(String::as_str).collect();
        let taken = self.snapshots.group(&id);
        let taken_of: BTreeSet<&str> = taken.iter().map(|s| s.source_volume_id.as_str()).collect();
        if !taken.is_empty() && !taken_of.is_subset(&sources) {
            return Err(Status::already_exists(format!(
                "group snapshot {:?} exists, of other volumes",
                req.name
            )));
        }
        // Each member in turn; one taken before a crash is found again by name.
        let mut members = Vec::new();
        for source in &sources {
            let vol = self
                .volumes
                .get(source)?
                .ok_or_else(|| Status::not_found(format!("volume {source} does not exist")))?;
            members.push(self.snapshots.create(
                &format!("{}/{source}", req.name),
                &vol.id,
                vol.capacity_bytes,
                &self.volumes.data_path(&vol.id),
                Some(&id),
            )?);
        }
        tracing::info!(name = %req.name, id = %id, members = members.len(), "group snapshot created");
        self.faults.reply("CreateVolumeGroupSnapshot").await;
        Ok(Response::new(csi::CreateVolumeGroupSnapshotResponse {
            group_snapshot: Some(self.group_answer(&id, &members)),
        }))
    }

    async fn delete_volume_group_snapshot(
        &self,
        request: Request<csi::DeleteVolumeGroupSnapshotRequest>,
    ) -> Result<Response<csi::DeleteVolumeGroupSnapshotResponse>, Status> {
        self.faults.inject("DeleteVolumeGroupSnapshot").await?;
        self.offered(CAPABILITY)?;
        let req = request.into_inner();
        require("group_snapshot_id", &req.group_snapshot_id)?;
        self.check_secrets(&req.secrets)?;
        // A group already gone is deleted.
        for s in self.members(&req.group_snapshot_id, &req.snapshot_ids)? {
            self.snapshots.delete(&s.id)?;
        }
        Ok(Response::new(csi::DeleteVolumeGroupSnapshotResponse {}))
    }

    async fn get_volume_group_snapshot(
        &self,
        request: Request<csi::GetVolumeGroupSnapshotRequest>,
    ) -> Result<Response<csi::GetVolumeGroupSnapshotResponse>, Status> {
        self.faults.inject("GetVolumeGroupSnapshot").await?;
        self.offered(CAPABILITY)?;
        let req = request.into_inner();
        require("group_snapshot_id", &req.group_snapshot_id)?;
        self.check_secrets(&req.secrets)?;
        let members = self.members(&req.group_snapshot_id, &req.snapshot_ids)?;
        if members.is_empty() {
            return Err(Status::not_found(format!(
                "group snapshot {} does not exist",
                req.group_snapshot_id
            )));
        }
        Ok(Response::new(csi::GetVolumeGroupSnapshotResponse {
            group_snapshot: Some(self.group_answer(&req.group_snapshot_id, &members)),
        }))
    }
}
