//! A node (re)registers with what its agent holds (checked by the agent
//! against its mount table). The manager answers with the node's complete
//! desired set, and makes its records agree with the node:
//!
//! - a publication still wanted stays at whatever level the node holds: a
//!   node further along than the record (outcomes are recorded in batches)
//!   keeps it, and the plan's next call is answered at once; a node behind
//!   the record (it lost a mount) has the record lowered to match, so the
//!   plan does the step again. Berth's record never claims a mount the node
//!   does not have.
//! - a publication being undone is torn down on the node at once;
//! - anything else the node holds is torn down.

use crate::fleet::Fleet;
use std::collections::HashMap;
use std::sync::Arc;

use berth_proto::berth::v1 as wire;

use crate::VolumeManager;
use crate::nodes::NodeSync;
use berth_model::NodeLevel as Level;
use berth_store::{NodeRecord, StoreError};

/// A publication on the registering node, as the record has it.
struct OnNode {
    id: String,
    level: Level,
    forward: bool,
}

impl Fleet<'_> {
    async fn lower(&self, node: &str, p: &OnNode, now: Level) {
        let changed = self
            .table
            .modify(&p.id, |r| {
                let deleting = r.deleting;
                Ok(match r.publications.get_mut(node) {
                    Some(q) if q.wanted && !deleting && q.node == p.level => {
                        q.node = now;
                        true
                    }
                    _ => false,
                })
            })
            .await;
        match changed {
            Ok((true, r)) => tracing::warn!(
                volume = %r.spec.name,
                %node,
                was = ?p.level,
                now = ?now,
                "the node no longer holds the volume as recorded; the step is done again"
            ),
            Ok((false, _)) => {}
            Err(e) => {
                tracing::warn!(volume = %p.id, %node, error = %e, "could not record what the node lost")
            }
        }
    }
}

impl Fleet<'_> {
    /// Ids of the volumes with a publication on `node`, wanted or being undone.
    pub(crate) fn ids_on(&self, node: &str) -> Vec<String> {
        self.table.collect_keys(|r, out| {
            if r.publications().contains_key(node) {
                out.push(r.id().to_owned());
            }
        })
    }

    /// Every node that has registered with this store.
    pub fn remembered_nodes(&self) -> Result<Vec<NodeRecord>, StoreError> {
        self.table.store().load_nodes()
    }

    /// What the records say `node` holds: the seed of a node record written
    /// for the first time (a store from before node records existed).
    pub fn recorded_on(&self, node: &str) -> Vec<wire::Held> {
        self.table.collect(|r, out| {
            if let (Some(p), Some(b)) = (r.publications.get(node), &r.backend)
                && p.sent
                && p.node > Level::Absent
            {
                out.push(wire::Held {
                    berth_id: r.id.clone(),
                    plugin: r.spec.plugin.clone(),
                    volume_id: b.volume_id.clone(),
                    level: p.node.to_wire(),
                });
            }
        })
    }
}

#[tonic::async_trait]
impl NodeSync for VolumeManager {
    async fn desired_set(&self, node: &str, held: &[wire::Held]) -> Vec<wire::Desired> {
        let mut holds: HashMap<&str, Level> = held
            .iter()
            .map(|h| (h.berth_id.as_str(), Level::from_wire(h.level)))
            .collect();
        let on_node = self.table.collect_keys(|r, out| {
            if let Some(p) = r.publications().get(node) {
                out.push(OnNode {
                    id: r.id().to_owned(),
                    level: p.node,
                    forward: p.wanted && !r.deleting(),
                });
            }
        });
        let mut set = Vec::new();
        for p in &on_node {
            let holds = holds.remove(p.id.as_str()).unwrap_or(Level::Absent);
            let level = if p.forward {
                if holds < p.level {
                    self.fleet().lower(node, p, holds).await;
                }
                holds
            } else {
                Level::Absent
            };
            if level > Level::Absent {
                set.push(wire::Desired {
                    berth_id: p.id.clone(),
                    level: level.to_wire(),
                });
            }
        }
        for (id, _) in holds {
            tracing::warn!(%node, volume = %id, "the node holds a volume Berth has not placed there; tearing it down");
        }
        set
    }

    async fn remember(&self, node: NodeRecord) {
        if let Err(e) = self.table.store().put_node(&node).await {
            tracing::warn!(node = %node.name, error = %e, "could not remember the node");
        }
    }

    fn node_ready(&self, node: &str) {
        for id in self.fleet().ids_on(node) {
            self.work.queue.push(&id);
        }
    }
}

/// The manager as the directory's `NodeSync`.
pub fn as_sync(m: &Arc<VolumeManager>) -> std::sync::Weak<dyn NodeSync> {
    let weak: std::sync::Weak<VolumeManager> = Arc::downgrade(m);
    weak
}
