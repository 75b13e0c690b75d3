//! The snapshot steps: a snapshot cut (its intent written first, as for a
//! volume) and followed until the plugin says it is ready to use, and what
//! Berth keeps of the plugin's answer.

use crate::worker::Worker;
use crate::worker::outcome::{Apply, StepError, Unwritten, look_again, not_found_answer, step_error};
use crate::worker::steps::backend;
use berth_csi::proto;
use berth_csi::proto::controller_service_capability::rpc::Type as ControllerCap;
use berth_csi::registry::Plugin;
use berth_model::{SnapshotBackend, VolumeRecord, VolumeSpec};
use berth_policy::Code;

impl Worker<'_> {
    /// CreateSnapshot for a snapshot asked for, or the one being cut
    /// followed until the plugin says it is ready to use.
    pub(crate) async fn cut_snapshot(
        &self,
        r: &VolumeRecord,
        name: &str,
        unwritten: &mut Unwritten,
    ) -> Result<Apply, StepError> {
        let spec = &r.spec;
        let controller = self.controller(&spec.plugin)?;
        let snapshot = &r.snapshots[name];
        if !snapshot.create_sent {
            // As for volumes: the intent first, so a delete after a crash asks the plugin.
            let key = name.to_string();
            unwritten.push(Box::new(move |r: &mut VolumeRecord| {
                if let Some(s) = r.snapshots.get_mut(&key) {
                    s.create_sent = true;
                }
            }));
            self.sync(&r.id, unwritten)
                .await
                .map_err(|e| step_error(Code::Unavailable, e.to_string()))?;
        }
        // One being cut is followed by its id where the plugin can say how
        // it is (GetSnapshot, else ListSnapshots); else, or when it is not
        // found so, CreateSnapshot is asked again by name (idempotent).
        let following = snapshot.backend.as_ref().filter(|b| !b.ready);
        let followed = match following {
            Some(b) => self.follow_snapshot(&controller, spec, &b.snapshot_id).await?,
            None => None,
        };
        let s = match followed {
            Some(s) => s,
            None => controller
                .client()
                .create_snapshot(proto::CreateSnapshotRequest {
                    source_volume_id: backend(r).volume_id.clone(),
                    name: snapshot.csi_name.clone(),
                    secrets: self.secrets_for(spec)?,
                    parameters: Default::default(),
                })
                .await?
                .snapshot
                .filter(|s| !s.snapshot_id.is_empty())
                .ok_or_else(|| step_error(Code::Internal, "CreateSnapshot answered without a snapshot id"))?,
        };
        let found = snapshot_backend(s);
        let ready = found.ready;
        let key = name.to_string();
        let effect: Apply = Box::new(move |r: &mut VolumeRecord| {
            if let Some(s) = r.snapshots.get_mut(&key) {
                s.backend = Some(found.clone());
            }
        });
        if !ready {
            // Not a failure: the plugin is still cutting (or uploading) it.
            // It is followed on Berth's own schedule, with the id kept meanwhile.
            unwritten.push(effect);
            let age_ms = crate::now_ms().saturating_sub(snapshot.requested_ms);
            return Err(StepError {
                not_yet: Some(look_again(age_ms)),
                ..step_error(
                    Code::Unavailable,
                    format!("waiting for snapshot {name:?} to be ready to use"),
                )
            });
        }
        Ok(effect)
    }

    /// How the plugin says a snapshot it is cutting is now, by its id: None
    /// when the plugin cannot say (neither GET_SNAPSHOT nor LIST_SNAPSHOTS)
    /// or does not know it.
    async fn follow_snapshot(
        &self,
        controller: &Plugin,
        spec: &VolumeSpec,
        snapshot_id: &str,
    ) -> Result<Option<proto::Snapshot>, StepError> {
        let offers = |cap| {
            controller
                .status()
                .fingerprint
                .is_some_and(|f| f.has_controller_capability(cap))
        };
        let client = controller.client();
        let found = if offers(ControllerCap::GetSnapshot) {
            let asked = client
                .get_snapshot(proto::GetSnapshotRequest {
                    snapshot_id: snapshot_id.to_string(),
                    secrets: self.secrets_for(spec)?,
                })
                .await;
            match asked {
                Ok(resp) => resp.snapshot,
                Err(e) if not_found_answer(&e) => None,
                Err(e) => return Err(e.into()),
            }
        } else if offers(ControllerCap::ListSnapshots) {
            let page = client
                .list_snapshots(proto::ListSnapshotsRequest {
                    snapshot_id: snapshot_id.to_string(),
                    secrets: self.secrets_for(spec)?,
                    ..Default::default()
                })
                .await?;
            page.entries
                .into_iter()
                .filter_map(|e| e.snapshot)
                .find(|s| s.snapshot_id == snapshot_id)
        } else {
            None
        };
        Ok(found.filter(|s| s.snapshot_id == snapshot_id))
    }
}

/// What Berth keeps of the plugin's answer about a snapshot.
pub(crate) fn snapshot_backend(s: proto::Snapshot) -> SnapshotBackend {
    SnapshotBackend {
        snapshot_id: s.snapshot_id,
        size_bytes: s.size_bytes,
        created_ms: s.creation_time.map_or(0, |t| {
            (t.seconds.max(0) as u64) * 1000 + (t.nanos.max(0) as u64) / 1_000_000
        }),
        ready: s.ready_to_use,
    }
}
