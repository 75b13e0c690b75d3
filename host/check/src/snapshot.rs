//! Snapshot cases: CreateSnapshot and its idempotency, ListSnapshots, restoring
//! and cloning into new volumes, and DeleteSnapshot.

use tonic::Code;

use crate::Why;
use crate::expect::{answers, refuses_missing, succeeds};
use crate::{Rule, Run, after_first, forget};
use berth_csi::{CsiClient, proto};
use proto::controller_service_capability::rpc::Type as ControllerCap;
use proto::volume_content_source::{SnapshotSource, Type as Source, VolumeSource};

const SNAPSHOT: Rule = ("CreateSnapshot", "takes a snapshot of the volume");
const SNAPSHOT_AGAIN: Rule = (
    "CreateSnapshot twice",
    "returns the same snapshot the second time",
);
const SNAPSHOT_MISSING: Rule = (
    "CreateSnapshot missing a field",
    "answers INVALID_ARGUMENT without name or source_volume_id",
);
const LIST: Rule = (
    "ListSnapshots",
    "lists the snapshot by its id and by its source volume",
);
const GET: Rule = ("GetSnapshot", "answers the snapshot by its id");
const GET_UNKNOWN: Rule = ("GetSnapshot, unknown snapshot", "answers NOT_FOUND");
const RESTORE: Rule = (
    "CreateVolume from a snapshot",
    "makes a volume, which deletes again",
);
const CLONE: Rule = (
    "CreateVolume from a volume",
    "makes a volume, which deletes again",
);
const DELETE: Rule = ("DeleteSnapshot", "deletes the snapshot");
const DELETE_AGAIN: Rule = ("DeleteSnapshot twice", "succeeds the second time too");
const DELETE_UNKNOWN: Rule = ("DeleteSnapshot, unknown snapshot", "succeeds (nothing to delete)");
const DELETE_MISSING: Rule = ("DeleteSnapshot without snapshot_id", "answers INVALID_ARGUMENT");

impl Run<'_> {
    fn snapshotter(&self) -> Result<(CsiClient, String), Why> {
        Ok((
            self.controller_with(ControllerCap::CreateDeleteSnapshot)?,
            self.volume_id()?,
        ))
    }

    fn snapshot_request(&self, source_volume_id: String) -> proto::CreateSnapshotRequest {
        proto::CreateSnapshotRequest {
            source_volume_id,
            name: format!("{}-snapshot", self.base),
            secrets: self.secrets(),
            parameters: Default::default(),
        }
    }

    pub(super) async fn snapshot_cases(&mut self) {
        let mut snapshot = None;
        if let Some((ctl, volume_id)) = self.needs(SNAPSHOT, self.snapshotter()) {
            let r = succeeds(
                ctl.create_snapshot(self.snapshot_request(volume_id.clone()))
                    .await,
            )
            .and_then(|resp| {
                let s = resp
                    .snapshot
                    .ok_or("CreateSnapshot answered OK without a snapshot")?;
                if s.snapshot_id.is_empty() {
                    return Err(Why::from(
                        "CreateSnapshot answered a snapshot without a snapshot_id",
                    ));
                }
                self.made.snapshots.push(s.snapshot_id.clone());
                if s.source_volume_id != volume_id {
                    return Err(Why::from(format!(
                        "the snapshot's source_volume_id is {:?}, not {volume_id}",
                        s.source_volume_id
                    )));
                }
                Ok(s)
            });
            self.record(SNAPSHOT, r.as_ref().map(drop).map_err(Clone::clone));
            snapshot = r.ok();
        }
        let taken = self.snapshotter().and_then(|(ctl, volume_id)| {
            let s = snapshot
                .clone()
                .ok_or("needs the snapshot CreateSnapshot was to take")?;
            Ok((ctl, volume_id, s))
        });
        if let Some((ctl, volume_id, first)) = self.needs(SNAPSHOT_AGAIN, taken.clone()) {
            let r = succeeds(ctl.create_snapshot(self.snapshot_request(volume_id)).await).and_then(|resp| {
                match resp.snapshot.map(|s| s.snapshot_id) {
                    Some(id) if id == first.snapshot_id => Ok(()),
                    Some(id) => {
                        self.made.snapshots.push(id.clone());
                        Err(Why::from(format!(
                            "the first call took {}, the second {id}",
                            first.snapshot_id
                        )))
                    }
                    None => Err(Why::from("CreateSnapshot answered OK without a snapshot")),
                }
            });
            self.record(SNAPSHOT_AGAIN, r);
        }
        if let Some((ctl, volume_id)) = self.needs(SNAPSHOT_MISSING, self.snapshotter()) {
            let r = refuses_missing(
                "CreateSnapshot",
                &self.snapshot_request(volume_id),
                &[
                    ("name", |r| r.name.clear()),
                    ("source_volume_id", |r| r.source_volume_id.clear()),
                ],
                |req| ctl.create_snapshot(req),
            )
            .await;
            self.record(SNAPSHOT_MISSING, r);
        }
        let lister = self
            .controller_with(ControllerCap::ListSnapshots)
            .and_then(|c| taken.clone().map(|(_, v, s)| (c, v, s)));
        if let Some((ctl, volume_id, s)) = self.needs(LIST, lister) {
            let r = list_finds(&ctl, &s.snapshot_id, &volume_id).await;
            self.record(LIST, r);
        }
        let getter = self
            .controller_with(ControllerCap::GetSnapshot)
            .and_then(|c| taken.clone().map(|(_, v, s)| (c, v, s)));
        if let Some((ctl, volume_id, s)) = self.needs(GET, getter) {
            let req = proto::GetSnapshotRequest {
                snapshot_id: s.snapshot_id.clone(),
                secrets: self.secrets(),
            };
            let r = succeeds(ctl.get_snapshot(req).await).and_then(|resp| match resp.snapshot {
                Some(got) if got.snapshot_id == s.snapshot_id && got.source_volume_id == volume_id => Ok(()),
                Some(got) => Err(Why::from(format!(
                    "asked for {} (of {volume_id}), GetSnapshot answered {} of {:?}",
                    s.snapshot_id, got.snapshot_id, got.source_volume_id
                ))),
                None => Err(Why::from("GetSnapshot answered OK without a snapshot")),
            });
            self.record(GET, r);
        }
        if let Some(ctl) = self.needs(GET_UNKNOWN, self.controller_with(ControllerCap::GetSnapshot)) {
            let req = proto::GetSnapshotRequest {
                snapshot_id: format!("{}-no-such-snapshot", self.base),
                secrets: self.secrets(),
            };
            let r = answers("GetSnapshot", ctl.get_snapshot(req).await, Code::NotFound);
            self.record(GET_UNKNOWN, r);
        }
        self.new_volume_cases(snapshot.as_ref()).await;
        self.delete_snapshot_cases(snapshot.map(|s| s.snapshot_id)).await;
    }

    /// Restores the snapshot and clones the volume; each new volume is deleted at once.
    async fn new_volume_cases(&mut self, snapshot: Option<&proto::Snapshot>) {
        let restorable = self.snapshotter().and_then(|(ctl, _)| match snapshot {
            Some(s) if s.ready_to_use => Ok((
                ctl,
                Source::Snapshot(SnapshotSource {
                    snapshot_id: s.snapshot_id.clone(),
                }),
                s.size_bytes,
            )),
            Some(_) => Err(Why::from("the snapshot is not ready to use yet".to_string())),
            None => Err(Why::from(
                "needs the snapshot CreateSnapshot was to take".to_string(),
            )),
        });
        if let Some((ctl, source, size)) = self.needs(RESTORE, restorable) {
            let r = self.create_from(&ctl, "restored", source, size).await;
            self.record(RESTORE, r);
        }
        let cloneable = self.controller_with(ControllerCap::CloneVolume).and_then(|ctl| {
            Ok((
                ctl,
                Source::Volume(VolumeSource {
                    volume_id: self.volume_id()?,
                }),
            ))
        });
        if let Some((ctl, source)) = self.needs(CLONE, cloneable) {
            let r = self.create_from(&ctl, "clone", source, 0).await;
            self.record(CLONE, r);
        }
    }

    /// A new volume from `source`, asking for at least the source's size as
    /// it is now (the expansion cases may have grown it): a driver may
    /// rightly refuse a volume smaller than its source.
    async fn create_from(
        &mut self,
        ctl: &CsiClient,
        suffix: &str,
        source: Source,
        source_bytes: i64,
    ) -> Result<(), Why> {
        let now = self.volume.as_ref().map_or(0, |v| v.capacity_bytes);
        let size = self
            .opts
            .size_bytes
            .max(now)
            .max(self.grown_to.unwrap_or(0))
            .max(source_bytes);
        let mut req = self.create_request(format!("{}-{suffix}", self.base), size);
        req.volume_content_source = Some(proto::VolumeContentSource { r#type: Some(source) });
        let resp = succeeds(ctl.create_volume(req).await)?;
        let v = resp.volume.ok_or("CreateVolume answered OK without a volume")?;
        self.made.volumes.push(v.volume_id.clone());
        if v.content_source.is_none() {
            return Err(Why::from(format!(
                "volume {} does not say what it was made from (content_source is empty)",
                v.volume_id
            )));
        }
        let req = proto::DeleteVolumeRequest {
            volume_id: v.volume_id.clone(),
            secrets: self.secrets(),
        };
        succeeds(ctl.delete_volume(req).await)?;
        forget(&mut self.made.volumes, &v.volume_id);
        Ok(())
    }

    async fn delete_snapshot_cases(&mut self, snapshot_id: Option<String>) {
        let deleter = self.controller_with(ControllerCap::CreateDeleteSnapshot);
        let request = |snapshot_id: String, secrets| proto::DeleteSnapshotRequest { snapshot_id, secrets };
        let taken = deleter.clone().and_then(|c| {
            let id = snapshot_id.ok_or("needs the snapshot CreateSnapshot was to take")?;
            Ok((c, id))
        });
        let mut first = false;
        if let Some((ctl, id)) = self.needs(DELETE, taken.clone()) {
            let r = succeeds(ctl.delete_snapshot(request(id.clone(), self.secrets())).await);
            if r.is_ok() {
                forget(&mut self.made.snapshots, &id);
                first = true;
            }
            self.record(DELETE, r.map(drop));
        }
        let again = after_first(first, taken, "DeleteSnapshot");
        if let Some((ctl, id)) = self.needs(DELETE_AGAIN, again) {
            let r = succeeds(ctl.delete_snapshot(request(id, self.secrets())).await);
            self.record(DELETE_AGAIN, r.map(drop));
        }
        if let Some(ctl) = self.needs(DELETE_UNKNOWN, deleter.clone()) {
            let id = format!("{}-no-such-snapshot", self.base);
            let r = succeeds(ctl.delete_snapshot(request(id, self.secrets())).await);
            self.record(DELETE_UNKNOWN, r.map(drop));
        }
        if let Some(ctl) = self.needs(DELETE_MISSING, deleter) {
            let r = answers(
                "DeleteSnapshot",
                ctl.delete_snapshot(request(String::new(), self.secrets())).await,
                Code::InvalidArgument,
            );
            self.record(DELETE_MISSING, r);
        }
    }
}

async fn list_finds(ctl: &CsiClient, snapshot_id: &str, volume_id: &str) -> Result<(), Why> {
    let by_id = proto::ListSnapshotsRequest {
        snapshot_id: snapshot_id.to_string(),
        ..Default::default()
    };
    let by_source = proto::ListSnapshotsRequest {
        source_volume_id: volume_id.to_string(),
        ..Default::default()
    };
    for (how, req) in [("by snapshot_id", by_id), ("by source_volume_id", by_source)] {
        let resp = succeeds(ctl.list_snapshots(req).await)?;
        let found = resp
            .entries
            .iter()
            .filter_map(|e| e.snapshot.as_ref())
            .any(|s| s.snapshot_id == snapshot_id);
        if !found {
            return Err(Why::from(format!("listing {how} does not show {snapshot_id}")));
        }
    }
    Ok(())
}
