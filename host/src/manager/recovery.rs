//! On start, before any work: the publications Berth believes are on a node
//! are checked against that node's paths. One whose staging or target path no
//! longer shows the volume (the node restarted, someone unmounted it) is
//! lowered to the step before, so the plan stages and publishes it again.
//! Berth's record never claims a mount the node does not have.

use crate::agent::mounts::MountTable;
use crate::csi::proto::node_service_capability::rpc::Type as NodeCap;
use crate::model::PublishStep;

use super::VolumeManager;

/// A publication whose node has lost what Berth put there.
struct Lost {
    id: String,
    node: String,
    /// What the step was, and what it becomes.
    was: PublishStep,
    now: PublishStep,
    why: &'static str,
}

impl VolumeManager {
    /// Checks every publication that is done or half done on a node against
    /// the mount table; returns how many were lowered to be done again.
    pub async fn recover_node_paths(&self) -> usize {
        let mounts = match MountTable::read() {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the mount table; node paths are not checked");
                return 0;
            }
        };
        let mut lowered = 0;
        for lost in self.lost_publications(&mounts) {
            let changed = self
                .table
                .modify(&lost.id, |r| {
                    let p = r.publications.get_mut(&lost.node);
                    Ok(match p {
                        Some(p) if p.wanted && p.step == lost.was => {
                            p.step = lost.now;
                            true
                        }
                        _ => false,
                    })
                })
                .await;
            match changed {
                Ok((true, r)) => {
                    lowered += 1;
                    tracing::warn!(
                        volume = %r.spec.name,
                        node = %lost.node,
                        "{}; publishing it there again",
                        lost.why
                    );
                }
                Ok((false, _)) => {}
                Err(e) => {
                    tracing::warn!(volume = %lost.id, node = %lost.node, error = %e, "could not record a lost publication")
                }
            }
        }
        lowered
    }

    fn lost_publications(&self, mounts: &MountTable) -> Vec<Lost> {
        let mut lost = Vec::new();
        for r in self.table.list() {
            for (node, p) in r.publications.iter() {
                if !p.wanted || !p.sent || p.step < PublishStep::Staged {
                    continue;
                }
                // Without the node plugin's fingerprint, whether it stages is unknown: leave it.
                let Some(fp) = self
                    .nodes
                    .plugin(node, &r.spec.plugin)
                    .and_then(|p| p.status().fingerprint)
                else {
                    continue;
                };
                let stages = fp.has_node_capability(NodeCap::StageUnstageVolume);
                let staging_lost = stages && !mounts.shows_volume(&self.nodes.staging_path(node, &r.id));
                let (now, why) = if staging_lost {
                    (
                        PublishStep::ControllerPublished,
                        "the volume's staging path on the node no longer shows it",
                    )
                } else if p.step == PublishStep::Published
                    && !mounts.shows_volume(&self.nodes.target_path(node, &r.id))
                {
                    (
                        PublishStep::Staged,
                        "the volume's target path on the node no longer shows it",
                    )
                } else {
                    continue;
                };
                lost.push(Lost {
                    id: r.id.clone(),
                    node: node.clone(),
                    was: p.step,
                    now,
                    why,
                });
            }
        }
        lost
    }
}
