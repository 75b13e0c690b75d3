//! Group snapshots: one snapshot of several volumes taken together
//! (CreateVolumeGroupSnapshot). A group lives in the record of its first
//! volume, which drives it as it drives its own snapshots: the name sent to
//! the plugin is stored when the operator asks, the intent before the first
//! call, so a crash or a retry never takes a second group. Its name shares
//! one namespace with snapshots; a member is restored as `GROUP/VOLUME`.

use crate::Conflict;
use crate::Missing;
use crate::Taken;
use crate::snapshots::Snapshots;
use std::collections::HashMap;

use crate::worker::outcome::{Apply, StepError, Unwritten, look_again, not_found_answer, step_error};
use crate::worker::snapshot_steps::snapshot_backend;
use crate::{RequestError, now_ms};
use berth_csi::proto;
use berth_csi::proto::group_controller_service_capability::rpc::Type as GroupCap;
use berth_model::text::echo;
use berth_model::{GroupMember, GroupSnapshot, VolumeRecord, new_id};
use berth_policy::Code;

/// The most volumes one group snapshot may hold.
pub const MAX_GROUP_MEMBERS: usize = 64;

/// A group snapshot with the record that holds it.
pub struct GroupView {
    pub name: String,
    pub group: GroupSnapshot,
    pub anchor: VolumeRecord,
}

impl Snapshots<'_> {
    /// Whether the plugin offers group snapshots: `None` while it is not
    /// fingerprinted yet.
    fn offers_groups(&self, plugin: &str) -> Option<bool> {
        self.registry
            .get(plugin)
            .and_then(|p| p.status().fingerprint)
            .map(|f| f.has_group_capability(GroupCap::CreateDeleteGetVolumeGroupSnapshot))
    }

    pub async fn create_group_snapshot(
        &self,
        name: &str,
        volumes: &[String],
    ) -> Result<GroupView, RequestError> {
        let invalid = |m: String| Err(RequestError::Invalid(m));
        if name.is_empty() || name.len() > 253 || name.contains('/') || name.chars().any(char::is_control) {
            return invalid(format!(
                "name: {} must be 1 to 253 bytes without '/' or control characters",
                echo(name)
            ));
        }
        if volumes.is_empty() || volumes.len() > MAX_GROUP_MEMBERS {
            return invalid(format!("volumes: name 1 to {MAX_GROUP_MEMBERS} volumes"));
        }
        let mut members: Vec<GroupMember> = Vec::with_capacity(volumes.len());
        let mut plugin = None;
        for v in volumes {
            let r = self
                .table
                .by_name(&self.in_namespace(v))
                .ok_or_else(|| Missing::Volume(v.to_string()))?;
            if members.iter().any(|m| m.volume == r.id) {
                return invalid(format!("volumes: {} is named twice", echo(v)));
            }
            let volume_id = match &r.backend {
                Some(b) if !r.deleting => b.volume_id.clone(),
                _ => {
                    return Err(Conflict::NotToSnapshot {
                        name: v.to_string(),
                        state: r.state().to_string(),
                    }
                    .into());
                }
            };
            match &plugin {
                None => plugin = Some(r.spec.plugin.clone()),
                Some(p) if *p != r.spec.plugin => {
                    return invalid(format!(
                        "volumes: {} is on plugin {:?}, the first on {p:?}; a group is on one plugin",
                        echo(v),
                        r.spec.plugin
                    ));
                }
                Some(_) => {}
            }
            members.push(GroupMember {
                volume: r.id.clone(),
                name: r.spec.name.clone(),
                volume_id,
                snapshot: None,
            });
        }
        let plugin = plugin.unwrap_or_default();
        if self.offers_groups(&plugin) == Some(false) {
            return invalid(format!(
                "plugin {plugin:?} does not offer {} (group snapshots)",
                GroupCap::CreateDeleteGetVolumeGroupSnapshot.as_str_name()
            ));
        }
        let anchor = members[0].volume.clone();
        if let Err(crate::table::TakenBy(owner)) =
            self.table
                .claims()
                .claim_snapshot_name(&self.namespace, name, &anchor)
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
        let names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
        let what = format!("group snapshot {name} of {}", names.join(", "));
        let result = self
            .modify(&anchor, what, |r| {
                if r.deleting {
                    return Err(Conflict::VolumeDeleting(r.spec.name.clone()).into());
                }
                if r.snapshots.contains_key(name) {
                    return Err(Taken::Snapshot {
                        name: name.to_string(),
                        volume: r.spec.name.clone(),
                    }
                    .into());
                }
                match r.group_snapshots.get(name) {
                    Some(g) if g.deleting => Err(Conflict::GroupDeleting(name.to_string()).into()),
                    Some(g)
                        if g.members
                            .iter()
                            .map(|m| &m.volume)
                            .ne(members.iter().map(|m| &m.volume)) =>
                    {
                        Err(Taken::GroupOfOthers(name.to_string()).into())
                    }
                    // The same request again.
                    Some(_) => Ok(()),
                    None => {
                        r.group_snapshots.insert(
                            name.to_string(),
                            GroupSnapshot {
                                csi_name: format!("group-{}", new_id()),
                                create_sent: false,
                                members: members.clone(),
                                group_snapshot_id: None,
                                deleting: false,
                                requested_ms: now_ms(),
                            },
                        );
                        Ok(())
                    }
                }
            })
            .await;
        if result.is_err() {
            self.table
                .claims()
                .release_snapshot_name(&self.namespace, name, &anchor);
        }
        group_view(name, result?)
    }

    pub async fn delete_group_snapshot(&self, name: &str) -> Result<GroupView, RequestError> {
        let anchor = self.group_owner(name)?;
        let r = self
            .modify(&anchor, format!("delete group snapshot {name}"), |r| {
                if let Some(g) = r.group_snapshots.get_mut(name) {
                    g.deleting = true;
                }
                r.failure = None;
                r.retrying = None;
                Ok(())
            })
            .await?;
        group_view(name, r)
    }

    pub fn get_group_snapshot(&self, name: &str) -> Result<GroupView, RequestError> {
        let anchor = self.group_owner(name)?;
        let r = self.table.by_id(&anchor).ok_or_else(|| not_found(name))?;
        group_view(name, r)
    }

    /// Every group snapshot, by name.
    pub fn list_group_snapshots(&self) -> Vec<GroupView> {
        let mut out = self.table.collect(|r, out| {
            if r.spec.namespace != self.namespace {
                return;
            }
            for (name, g) in r.group_snapshots.iter() {
                out.push(GroupView {
                    name: name.clone(),
                    group: g.clone(),
                    anchor: r.clone(),
                });
            }
        });
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// A member's snapshot as a restore names it, `GROUP/VOLUME`: its id
    /// on the plugin once ready, and the record of the group.
    pub(crate) fn group_member_snapshot(&self, source: &str) -> Result<(VolumeRecord, String), RequestError> {
        let Some((group, volume)) = source.split_once('/') else {
            return Err(Missing::Snapshot(source.to_string()).into());
        };
        let view = self.get_group_snapshot(group)?;
        let member = view
            .group
            .members
            .iter()
            .find(|m| m.name == volume)
            .ok_or_else(|| Missing::GroupMember {
                group: group.to_string(),
                volume: volume.to_string(),
            })?;
        match &member.snapshot {
            Some(s) if s.ready && !view.group.deleting => Ok((view.anchor, s.snapshot_id.clone())),
            _ => Err(Conflict::SnapshotNotReady {
                name: source.to_string(),
                state: view.group.state().to_string(),
            }
            .into()),
        }
    }

    fn group_owner(&self, name: &str) -> Result<String, RequestError> {
        self.table
            .claims()
            .snapshot_owner(&self.namespace, name)
            .filter(|id| {
                self.table.by_id(id).is_some_and(|r| {
                    r.group_snapshots.contains_key(name) && r.spec.namespace == self.namespace
                })
            })
            .ok_or_else(|| not_found(name))
    }

    /// CreateVolumeGroupSnapshot, or, for a group being cut, how it is now
    /// (GetVolumeGroupSnapshot by its id).
    pub(crate) async fn take_group_snapshot(
        &self,
        r: &VolumeRecord,
        name: &str,
        unwritten: &mut Unwritten,
    ) -> Result<Apply, StepError> {
        let group = &r.group_snapshots[name];
        let controller = self.controller(&r.spec.plugin)?;
        let offered = controller
            .status()
            .fingerprint
            .is_some_and(|f| f.has_group_capability(GroupCap::CreateDeleteGetVolumeGroupSnapshot));
        if !offered {
            return Err(step_error(
                Code::FailedPrecondition,
                format!(
                    "plugin {:?} does not offer {}",
                    r.spec.plugin,
                    GroupCap::CreateDeleteGetVolumeGroupSnapshot.as_str_name()
                ),
            ));
        }
        if !group.create_sent {
            let key = name.to_string();
            unwritten.push(Box::new(move |r: &mut VolumeRecord| {
                if let Some(g) = r.group_snapshots.get_mut(&key) {
                    g.create_sent = true;
                }
            }));
            self.worker()
                .sync(&r.id, unwritten)
                .await
                .map_err(|e| step_error(Code::Unavailable, e.to_string()))?;
        }
        let secrets = self.secrets_for(&r.spec)?;
        let client = controller.client();
        let followed = match &group.group_snapshot_id {
            Some(id) => {
                let asked = client
                    .get_volume_group_snapshot(proto::GetVolumeGroupSnapshotRequest {
                        group_snapshot_id: id.clone(),
                        snapshot_ids: snapshot_ids(group),
                        secrets: secrets.clone(),
                    })
                    .await;
                match asked {
                    Ok(resp) => resp.group_snapshot,
                    Err(e) if not_found_answer(&e) => None,
                    Err(e) => return Err(e.into()),
                }
            }
            None => None,
        };
        let answer = match followed {
            Some(g) => g,
            None => client
                .create_volume_group_snapshot(proto::CreateVolumeGroupSnapshotRequest {
                    name: group.csi_name.clone(),
                    source_volume_ids: group.members.iter().map(|m| m.volume_id.clone()).collect(),
                    secrets,
                    parameters: Default::default(),
                })
                .await?
                .group_snapshot
                .filter(|g| !g.group_snapshot_id.is_empty())
                .ok_or_else(|| {
                    step_error(
                        Code::Internal,
                        "CreateVolumeGroupSnapshot answered without a group_snapshot_id",
                    )
                })?,
        };
        let mut taken: HashMap<String, proto::Snapshot> = answer
            .snapshots
            .into_iter()
            .map(|s| (s.source_volume_id.clone(), s))
            .collect();
        let mut members = group.members.clone();
        for m in &mut members {
            let s = taken.remove(&m.volume_id).ok_or_else(|| {
                step_error(
                    Code::Internal,
                    format!(
                        "the group snapshot's answer has no snapshot of volume {}",
                        m.volume_id
                    ),
                )
            })?;
            m.snapshot = Some(snapshot_backend(s));
        }
        let id = answer.group_snapshot_id;
        let ready = members
            .iter()
            .all(|m| m.snapshot.as_ref().is_some_and(|s| s.ready));
        let key = name.to_string();
        let effect: Apply = Box::new(move |r: &mut VolumeRecord| {
            if let Some(g) = r.group_snapshots.get_mut(&key) {
                g.group_snapshot_id = Some(id.clone());
                g.members = members.clone();
            }
        });
        if !ready && !group.deleting {
            // Not a failure: followed on Berth's own schedule, as a snapshot is.
            unwritten.push(effect);
            let age_ms = now_ms().saturating_sub(group.requested_ms);
            return Err(StepError {
                not_yet: Some(look_again(age_ms)),
                ..step_error(
                    Code::Unavailable,
                    format!("waiting for group snapshot {name:?} to be ready to use"),
                )
            });
        }
        Ok(effect)
    }

    pub(crate) async fn delete_group_snapshot_now(
        &self,
        r: &VolumeRecord,
        name: &str,
    ) -> Result<(), StepError> {
        let group = &r.group_snapshots[name];
        self.controller(&r.spec.plugin)?
            .client()
            .delete_volume_group_snapshot(proto::DeleteVolumeGroupSnapshotRequest {
                group_snapshot_id: group.group_snapshot_id.clone().unwrap_or_default(),
                snapshot_ids: snapshot_ids(group),
                secrets: self.secrets_for(&r.spec)?,
            })
            .await?;
        Ok(())
    }
}

fn snapshot_ids(group: &GroupSnapshot) -> Vec<String> {
    group
        .members
        .iter()
        .filter_map(|m| m.snapshot.as_ref().map(|s| s.snapshot_id.clone()))
        .collect()
}

fn group_view(name: &str, anchor: VolumeRecord) -> Result<GroupView, RequestError> {
    let group = anchor
        .group_snapshots
        .get(name)
        .cloned()
        .ok_or_else(|| not_found(name))?;
    Ok(GroupView {
        name: name.to_string(),
        group,
        anchor,
    })
}

fn not_found(name: &str) -> RequestError {
    Missing::Group(name.to_string()).into()
}
