//! Snapshot requests: take, delete, look up. A snapshot lives in the record
//! of the volume it is of, so it is driven, retried and made durable with
//! that volume; its name is unique across volumes.

pub(crate) mod groups;

use crate::Conflict;
use crate::Missing;
use crate::Taken;
use crate::{RequestError, now_ms};
use berth_csi::proto::controller_service_capability::rpc::Type as ControllerCap;
use berth_model::text::echo;
use berth_model::{Snapshot, VolumeRecord, new_id};

/// A snapshot with the volume it is of.
pub struct SnapshotView {
    pub name: String,
    pub snapshot: Snapshot,
    pub volume: VolumeRecord,
}

crate::shared::namespaced_view!(
    /// Snapshots and group snapshots of one namespace's volumes: asked
    /// for, listed, deleted.
    Snapshots,
    snapshots,
    snapshots_in
);

impl Snapshots<'_> {
    pub async fn create_snapshot(&self, name: &str, volume: &str) -> Result<SnapshotView, RequestError> {
        if name.is_empty() || name.len() > 253 || name.chars().any(char::is_control) {
            return Err(RequestError::Invalid(format!(
                "name: {} must be 1 to 253 bytes without control characters",
                echo(name)
            )));
        }
        let current = self.named(&self.in_namespace(volume))?;
        let id = current.id.clone();
        self.require(
            &current.spec.plugin,
            ControllerCap::CreateDeleteSnapshot,
            "snapshots",
        )?;
        self.ask_admission(
            berth_policy::AdmissionCall::CreateSnapshot(name.to_string()),
            &current,
        )
        .await?;
        // A new snapshot's room is held until it is written (then the record
        // counts it); a repeat of one that exists asks for none.
        let more = crate::quotas::Usage {
            snapshots: u64::from(!current.snapshots.contains_key(name)),
            ..Default::default()
        };
        let _room = crate::table::Reservation::take(&self.table, &self.namespace, more, |used| {
            self.admit(&self.namespace, used, &more)
        })?;
        if let Err(crate::table::TakenBy(owner)) =
            self.table
                .claims()
                .claim_snapshot_name(&self.namespace, name, &id)
        {
            let of = self
                .table
                .by_id(&owner)
                .map(|v| v.spec.name.clone())
                .unwrap_or_default();
            return Err(Taken::Snapshot {
                name: name.to_string(),
                volume: of,
            }
            .into());
        }
        let result = self
            .modify(&id, format!("snapshot {name}"), |r| {
                if r.deleting {
                    return Err(Conflict::VolumeDeleting(volume.to_string()).into());
                }
                if r.group_snapshots.contains_key(name) {
                    return Err(Taken::Group(name.to_string()).into());
                }
                if r.snapshots.get(name).is_some_and(|s| s.deleting) {
                    return Err(Conflict::SnapshotDeleting(name.to_string()).into());
                }
                r.snapshots.get_or_insert_with(name, || Snapshot {
                    csi_name: format!("snapshot-{}", new_id()),
                    create_sent: false,
                    backend: None,
                    deleting: false,
                    requested_ms: now_ms(),
                });
                Ok(())
            })
            .await;
        if result.is_err() {
            self.table
                .claims()
                .release_snapshot_name(&self.namespace, name, &id);
        }
        self.snapshot_view(name, result?)
    }

    pub async fn delete_snapshot(&self, name: &str) -> Result<SnapshotView, RequestError> {
        let id = self.snapshot_owner(name)?;
        let r = self
            .modify(&id, format!("delete snapshot {name}"), |r| {
                if let Some(s) = r.snapshots.get_mut(name) {
                    s.deleting = true;
                }
                // Deleting is the operator's answer to a give-up too.
                r.failure = None;
                r.retrying = None;
                Ok(())
            })
            .await?;
        self.snapshot_view(name, r)
    }

    pub fn get_snapshot(&self, name: &str) -> Result<SnapshotView, RequestError> {
        let id = self.snapshot_owner(name)?;
        let r = self.table.by_id(&id).ok_or_else(|| not_found(name))?;
        self.snapshot_view(name, r)
    }

    /// Every snapshot (of one volume, if named), by name.
    pub fn list_snapshots(&self, volume: Option<&str>) -> Result<Vec<SnapshotView>, RequestError> {
        let records = match volume {
            Some(v) => vec![
                self.table
                    .by_name(&self.in_namespace(v))
                    .ok_or_else(|| Missing::Volume(v.to_string()))?,
            ],
            None => self.table.list(Some(&|ns| *ns == self.namespace)),
        };
        let mut out: Vec<SnapshotView> = records
            .into_iter()
            .flat_map(|r| {
                r.snapshots
                    .iter()
                    .map(|(name, s)| SnapshotView {
                        name: name.clone(),
                        snapshot: s.clone(),
                        volume: r.clone(),
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    fn snapshot_owner(&self, name: &str) -> Result<String, RequestError> {
        // A snapshot of another namespace's volume is not there for this one.
        self.table
            .claims()
            .snapshot_owner(&self.namespace, name)
            .filter(|id| {
                self.table
                    .by_id(id)
                    .is_some_and(|r| r.spec.namespace == self.namespace)
            })
            .ok_or_else(|| not_found(name))
    }

    fn snapshot_view(&self, name: &str, volume: VolumeRecord) -> Result<SnapshotView, RequestError> {
        let snapshot = volume
            .snapshots
            .get(name)
            .cloned()
            .ok_or_else(|| not_found(name))?;
        Ok(SnapshotView {
            name: name.to_string(),
            snapshot,
            volume,
        })
    }
}

fn not_found(name: &str) -> RequestError {
    Missing::Snapshot(name.to_string()).into()
}
