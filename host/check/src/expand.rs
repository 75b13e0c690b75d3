//! Expansion cases: ControllerExpandVolume, then NodeExpandVolume where the
//! plugin asks for it. Run while the volume is published when the plugin says
//! VOLUME_EXPANSION_ONLINE only, before it is published otherwise.

use tonic::Code;

use crate::Why;
use crate::expect::{answers, refuses_missing, succeeds};
use crate::{Rule, Run};
use berth_csi::{CsiClient, proto};
use proto::controller_service_capability::rpc::Type as ControllerCap;
use proto::node_service_capability::rpc::Type as NodeCap;

const EXPAND: Rule = (
    "ControllerExpandVolume",
    "grows the volume to at least the new size",
);
const EXPAND_AGAIN: Rule = ("ControllerExpandVolume twice", "succeeds the second time too");
const EXPAND_UNKNOWN: Rule = ("ControllerExpandVolume, unknown volume", "answers NOT_FOUND");
const EXPAND_MISSING: Rule = (
    "ControllerExpandVolume missing a field",
    "answers INVALID_ARGUMENT without volume_id or capacity_range",
);
const NODE_EXPAND_UNKNOWN: Rule = ("NodeExpandVolume, unknown volume", "answers NOT_FOUND");
const NODE_EXPAND: Rule = (
    "NodeExpandVolume",
    "grows the published volume on the node when ControllerExpandVolume asks for it",
);

/// When the expansion cases run.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    Unpublished,
    Published,
}

impl Run<'_> {
    /// Whether the plugin wants its volumes expanded while published.
    fn expands_online_only(&self) -> bool {
        let says = |c: &str| self.fp().plugin_capabilities.iter().any(|p| p == c);
        says("VOLUME_EXPANSION_ONLINE") && !says("VOLUME_EXPANSION_OFFLINE")
    }

    fn expander(&self) -> Result<(CsiClient, String), Why> {
        Ok((
            self.controller_with(ControllerCap::ExpandVolume)?,
            self.volume_id()?,
        ))
    }

    fn expand_request(&self, volume_id: String, required_bytes: i64) -> proto::ControllerExpandVolumeRequest {
        proto::ControllerExpandVolumeRequest {
            volume_id,
            capacity_range: Some(proto::CapacityRange {
                required_bytes,
                limit_bytes: 0,
            }),
            secrets: self.secrets(),
            volume_capability: Some(self.capability()),
        }
    }

    /// Twice the volume's size: what the expansion asks for.
    fn grown_size(&self) -> i64 {
        self.volume
            .as_ref()
            .map_or(0, |v| v.capacity_bytes)
            .max(self.opts.size_bytes)
            .saturating_mul(2)
    }

    pub(super) async fn expand_cases(&mut self, phase: Phase) {
        let wanted = if self.expands_online_only() {
            Phase::Published
        } else {
            Phase::Unpublished
        };
        if phase != wanted {
            return;
        }
        let size = self.grown_size();
        let mut node_expansion = None;
        if let Some((ctl, volume_id)) = self.needs(EXPAND, self.expander()) {
            let r = succeeds(
                ctl.controller_expand_volume(self.expand_request(volume_id, size))
                    .await,
            )
            .and_then(|resp| {
                if resp.capacity_bytes < size {
                    return Err(Why::from(format!(
                        "asked for {size} bytes, ControllerExpandVolume answered {}",
                        resp.capacity_bytes
                    )));
                }
                Ok((resp.node_expansion_required, resp.capacity_bytes))
            })
            .map(|(node_expansion, capacity)| {
                self.grown_to = Some(capacity);
                node_expansion
            });
            node_expansion = r.as_ref().ok().copied();
            self.record(EXPAND, r.map(drop));
        }
        let expanded = self.expander().and_then(|e| {
            node_expansion
                .map(|_| e)
                .ok_or_else(|| Why::from("needs the first ControllerExpandVolume to have worked"))
        });
        if let Some((ctl, volume_id)) = self.needs(EXPAND_AGAIN, expanded) {
            let r = succeeds(
                ctl.controller_expand_volume(self.expand_request(volume_id, size))
                    .await,
            );
            self.record(EXPAND_AGAIN, r.map(drop));
        }
        let ctl = self.controller_with(ControllerCap::ExpandVolume);
        if let Some(ctl) = self.needs(EXPAND_UNKNOWN, ctl.clone()) {
            let req = self.expand_request(self.unknown_volume(), size);
            let r = answers(
                "ControllerExpandVolume",
                ctl.controller_expand_volume(req).await,
                Code::NotFound,
            );
            self.record(EXPAND_UNKNOWN, r);
        }
        if let Some((ctl, volume_id)) = self.needs(EXPAND_MISSING, self.expander()) {
            let r = refuses_missing(
                "ControllerExpandVolume",
                &self.expand_request(volume_id, size),
                &[
                    ("volume_id", |r| r.volume_id.clear()),
                    ("capacity_range", |r| r.capacity_range = None),
                ],
                |req| ctl.controller_expand_volume(req),
            )
            .await;
            self.record(EXPAND_MISSING, r);
        }
        let node = self.node_expander(node_expansion);
        if let Some((node, volume_id, path)) = self.needs(NODE_EXPAND, node) {
            let req = proto::NodeExpandVolumeRequest {
                volume_id,
                volume_path: path,
                capacity_range: Some(proto::CapacityRange {
                    required_bytes: size,
                    limit_bytes: 0,
                }),
                staging_target_path: self.staged_at.clone().unwrap_or_default(),
                volume_capability: Some(self.capability()),
                secrets: self.secrets(),
            };
            let r = succeeds(node.node_expand_volume(req).await).and_then(|resp| {
                if resp.capacity_bytes != 0 && resp.capacity_bytes < size {
                    Err(Why::from(format!(
                        "asked for {size} bytes, NodeExpandVolume answered {}",
                        resp.capacity_bytes
                    )))
                } else {
                    Ok(())
                }
            });
            self.record(NODE_EXPAND, r);
        }
        let node = self.node_with(Some(NodeCap::ExpandVolume));
        if let Some(node) = self.needs(NODE_EXPAND_UNKNOWN, node) {
            let req = proto::NodeExpandVolumeRequest {
                volume_id: self.unknown_volume(),
                volume_path: self.work_dir.join("target-unknown").display().to_string(),
                capacity_range: Some(proto::CapacityRange {
                    required_bytes: size,
                    limit_bytes: 0,
                }),
                staging_target_path: String::new(),
                volume_capability: Some(self.capability()),
                secrets: self.secrets(),
            };
            let r = answers(
                "NodeExpandVolume",
                node.node_expand_volume(req).await,
                Code::NotFound,
            );
            self.record(NODE_EXPAND_UNKNOWN, r);
        }
    }

    fn node_expander(&self, required: Option<bool>) -> Result<(CsiClient, String, String), Why> {
        match required {
            Some(true) => {}
            Some(false) => return Err(Why::from("ControllerExpandVolume did not ask for it")),
            None => return Err(Why::from("needs ControllerExpandVolume to have worked")),
        }
        let node = self.node_with(Some(NodeCap::ExpandVolume))?;
        let path = self
            .published_at
            .clone()
            .ok_or("the volume is not published on a node; it grows there when next published")?;
        Ok((node, self.volume_id()?, path))
    }
}
