//! On start, beside the workers: the publications Berth believes are on a node
//! are checked against that node's paths. One whose staging or target path no
//! longer shows the volume (the node restarted, someone unmounted it) is
//! lowered to the step before, so the plan stages and publishes it again.
//! Berth's record never claims a mount the node does not have.

use std::sync::Arc;

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

/// A publication done or half done on a node: what the check needs of it.
struct Placed {
    id: String,
    name: String,
    plugin: String,
    node: String,
    step: PublishStep,
}

impl VolumeManager {
    /// Checks every publication that is done or half done on a node against
    /// the mount table, off the async threads; lowered ones are queued.
    /// Safe beside the workers: a publication is lowered only if it is still
    /// wanted and at the step that was checked. Returns how many were lowered.
    pub async fn recover_node_paths(self: &Arc<Self>) -> usize {
        let m = self.clone();
        let lost = match tokio::task::spawn_blocking(move || m.lost_publications()).await {
            Ok(Ok(lost)) => lost,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot read the mount table; node paths are not checked");
                return 0;
            }
            Err(e) => {
                tracing::warn!(error = %e, "checking node paths failed");
                return 0;
            }
        };
        let mut lowered = 0;
        for lost in lost {
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
                    self.queue.push(&r.id);
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

    fn lost_publications(&self) -> std::io::Result<Vec<Lost>> {
        let mounts = MountTable::read()?;
        let placed = self.table.collect(|r, out| {
            for (node, p) in r.publications.iter() {
                if p.wanted && p.sent && p.step >= PublishStep::Staged {
                    out.push(Placed {
                        id: r.id.clone(),
                        name: r.spec.name.clone(),
                        plugin: r.spec.plugin.clone(),
                        node: node.clone(),
                        step: p.step,
                    });
                }
            }
        });
        let mut lost = Vec::new();
        for p in placed {
            // Without the node plugin's fingerprint, whether it stages is unknown: leave it.
            let Some(fp) = self
                .nodes
                .plugin(&p.node, &p.plugin)
                .and_then(|plugin| plugin.status().fingerprint)
            else {
                tracing::debug!(volume = %p.name, node = %p.node, "node plugin not fingerprinted; its paths are not checked");
                continue;
            };
            let stages = fp.has_node_capability(NodeCap::StageUnstageVolume);
            let (now, why) = if stages && !mounts.shows_volume(&self.nodes.staging_path(&p.node, &p.id)) {
                (
                    PublishStep::ControllerPublished,
                    "the volume's staging path on the node no longer shows it",
                )
            } else if p.step == PublishStep::Published
                && !mounts.shows_volume(&self.nodes.target_path(&p.node, &p.id))
            {
                (
                    PublishStep::Staged,
                    "the volume's target path on the node no longer shows it",
                )
            } else {
                continue;
            };
            lost.push(Lost {
                id: p.id,
                node: p.node,
                was: p.step,
                now,
                why,
            });
        }
        Ok(lost)
    }
}
