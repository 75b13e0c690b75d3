//! Snapshots: CreateSnapshot, DeleteSnapshot, ListSnapshots and
//! GetSnapshot, each a copy of the volume's data kept by name.

use berth_proto::csi::v1 as csi;
use tonic::{Response, Status};

use super::{Controller, page, require};
use crate::answers;
use crate::journal::Entry;
use crate::snapshots::SnapshotRecord;

impl Controller {
    pub(super) async fn create_snapshot_now(
        &self,
        req: csi::CreateSnapshotRequest,
    ) -> Result<Response<csi::CreateSnapshotResponse>, Status> {
        self.faults.inject("CreateSnapshot").await?;
        self.offered("CREATE_DELETE_SNAPSHOT")?;
        require("name", &req.name)?;
        require("source_volume_id", &req.source_volume_id)?;
        self.check_secrets(&req.secrets)?;
        let vol = self
            .volumes
            .get(&req.source_volume_id)?
            .ok_or_else(|| Status::not_found(format!("volume {} does not exist", req.source_volume_id)))?;
        let (snap, created) = self.snapshots.create_made(
            &req.name,
            &vol.id,
            vol.capacity_bytes,
            &self.volumes.data_path(&vol.id),
            None,
        )?;
        tracing::info!(name = %snap.name, id = %snap.id, volume = %vol.id, "snapshot created");
        self.journal.note(Entry {
            call: "CreateSnapshot",
            volume: &vol.id,
            name: &snap.name,
            snapshot: &snap.id,
            created: Some(created),
            ..Default::default()
        });
        self.faults.reply("CreateSnapshot").await;
        Ok(Response::new(csi::CreateSnapshotResponse {
            snapshot: Some(answers::snapshot(&self.config, &snap)),
        }))
    }

    pub(super) async fn delete_snapshot_now(
        &self,
        req: csi::DeleteSnapshotRequest,
    ) -> Result<Response<csi::DeleteSnapshotResponse>, Status> {
        self.faults.inject("DeleteSnapshot").await?;
        self.offered("CREATE_DELETE_SNAPSHOT")?;
        require("snapshot_id", &req.snapshot_id)?;
        self.check_secrets(&req.secrets)?;
        self.snapshots.delete(&req.snapshot_id)?;
        self.journal.note(Entry {
            call: "DeleteSnapshot",
            snapshot: &req.snapshot_id,
            ..Default::default()
        });
        Ok(Response::new(csi::DeleteSnapshotResponse {}))
    }

    pub(super) async fn list_snapshots_now(
        &self,
        req: csi::ListSnapshotsRequest,
    ) -> Result<Response<csi::ListSnapshotsResponse>, Status> {
        self.faults.inject("ListSnapshots").await?;
        self.offered("LIST_SNAPSHOTS")?;
        let all: Vec<SnapshotRecord> = self
            .snapshots
            .list()
            .into_iter()
            .filter(|s| req.snapshot_id.is_empty() || s.id == req.snapshot_id)
            .filter(|s| req.source_volume_id.is_empty() || s.source_volume_id == req.source_volume_id)
            .collect();
        let (page, next_token) = page(all, &req.starting_token, req.max_entries)?;
        Ok(Response::new(csi::ListSnapshotsResponse {
            entries: page
                .iter()
                .map(|s| csi::list_snapshots_response::Entry {
                    snapshot: Some(answers::snapshot(&self.config, s)),
                })
                .collect(),
            next_token,
        }))
    }

    pub(super) async fn get_snapshot_now(
        &self,
        req: csi::GetSnapshotRequest,
    ) -> Result<Response<csi::GetSnapshotResponse>, Status> {
        self.faults.inject("GetSnapshot").await?;
        self.offered("GET_SNAPSHOT")?;
        require("snapshot_id", &req.snapshot_id)?;
        self.check_secrets(&req.secrets)?;
        let s = self
            .snapshots
            .get(&req.snapshot_id)
            .ok_or_else(|| Status::not_found(format!("snapshot {} does not exist", req.snapshot_id)))?;
        Ok(Response::new(csi::GetSnapshotResponse {
            snapshot: Some(answers::snapshot(&self.config, &s)),
        }))
    }
}
