//! The manager's [`NodeAgent`] on the directory: node operations become
//! operations on the node's session, settled by its agent's reports;
//! expand and stats are questions asked once and answered once.

use std::path::PathBuf;

use berth_proto::berth::v1 as wire;

use crate::directory::{Directory, lock};
use berth_agent::calls::{refused_id, staging_arg};
use berth_csi::registry::PluginStatus;
use berth_csi::{CsiError, proto};
use berth_manager::nodes::{NodeAgent, NodeSummary, NodeVolume};
use berth_model::NodeLevel as Level;
use berth_model::Paths;
use berth_store::NodeRecord;

fn mismatched(node: &str, call: &'static str) -> CsiError {
    CsiError::invalid(&format!("agent {node}"), call, "the agent answered another call")
}

fn operation(kind: wire::OperationKind, plugin: &str, berth_id: &str, volume_id: &str) -> wire::Operation {
    wire::Operation {
        kind: kind as i32,
        plugin: plugin.to_string(),
        berth_id: berth_id.to_string(),
        volume_id: volume_id.to_string(),
        ..Default::default()
    }
}

fn forward(kind: wire::OperationKind, plugin: &str, v: NodeVolume, staged: bool) -> wire::Operation {
    wire::Operation {
        staged,
        capability: Some(v.capability),
        publish_context: v.publish_context,
        volume_context: v.volume_context,
        secrets: v.secrets,
        readonly: v.readonly,
        ..operation(kind, plugin, &v.berth_id, &v.volume_id)
    }
}

#[tonic::async_trait]
impl NodeAgent for Directory {
    fn nodes(&self) -> Vec<NodeSummary> {
        let nodes = self.nodes.read().unwrap_or_else(|p| p.into_inner());
        nodes
            .iter()
            .map(|(name, n)| self.summary(name, &lock(n)))
            .collect()
    }

    fn node(&self, node: &str) -> Option<NodeSummary> {
        self.get(node).map(|n| self.summary(node, &lock(&n)))
    }

    fn mark(&self, node: &str, draining: Option<bool>, forgotten: bool) -> Option<NodeRecord> {
        Directory::mark(self, node, draining, forgotten)
    }

    fn node_record(&self, node: &str) -> Option<NodeRecord> {
        Directory::node_record(self, node)
    }

    fn remove(&self, node: &str) {
        Directory::remove(self, node)
    }

    fn plugin_status(&self, node: &str, plugin: &str) -> Option<PluginStatus> {
        self.get(node).and_then(|n| lock(&n).plugins.get(plugin).cloned())
    }

    fn forgotten(&self, node: &str) -> bool {
        Directory::forgotten(self, node)
    }

    fn connected(&self, node: &str) -> bool {
        self.get(node)
            .is_some_and(|n| lock(&n).link.as_ref().is_some_and(|l| l.synced))
    }

    fn staging_path(&self, node: &str, berth_id: &str) -> PathBuf {
        self.paths(node)
            .and_then(|p| p.staging(berth_id).ok())
            .unwrap_or_default()
    }

    fn target_path(&self, node: &str, berth_id: &str) -> PathBuf {
        self.paths(node)
            .and_then(|p| p.target(berth_id).ok())
            .unwrap_or_default()
    }

    async fn publish(&self, node: &str, plugin: &str, v: NodeVolume, staged: bool) -> Result<(), CsiError> {
        let op = forward(wire::OperationKind::Publish, plugin, v, staged);
        self.operate(node, "NodePublishVolume", op, Level::Published, true)
            .await
    }

    async fn unpublish(
        &self,
        node: &str,
        plugin: &str,
        volume_id: &str,
        berth_id: &str,
    ) -> Result<(), CsiError> {
        // Unstage on the wire: down to nothing, unpublishing first.
        let op = operation(wire::OperationKind::Unstage, plugin, berth_id, volume_id);
        self.operate(node, "NodeUnpublishVolume", op, Level::Absent, false)
            .await
    }

    async fn expand(
        &self,
        node: &str,
        plugin: &str,
        v: NodeVolume,
        staged: bool,
        range: proto::CapacityRange,
    ) -> Result<i64, CsiError> {
        let paths = self.paths(node).unwrap_or_else(|| Paths::under(&PathBuf::new()));
        let refused = |e| refused_id("NodeExpandVolume", e);
        let req = proto::NodeExpandVolumeRequest {
            volume_path: paths.target(&v.berth_id).map_err(refused)?.display().to_string(),
            staging_target_path: staging_arg(&paths, &v.berth_id, staged).map_err(refused)?,
            volume_id: v.volume_id,
            capacity_range: Some(range),
            volume_capability: Some(v.capability),
            secrets: v.secrets,
        };
        match self
            .ask(node, plugin, "NodeExpandVolume", wire::call::Call::Expand(req))
            .await?
        {
            wire::answer::Answer::Expand(resp) => Ok(resp.capacity_bytes),
            _ => Err(mismatched(node, "NodeExpandVolume")),
        }
    }

    async fn stats(
        &self,
        node: &str,
        plugin: &str,
        volume_id: &str,
        berth_id: &str,
        staged: bool,
    ) -> Result<proto::NodeGetVolumeStatsResponse, CsiError> {
        let paths = self.paths(node).unwrap_or_else(|| Paths::under(&PathBuf::new()));
        let refused = |e| refused_id("NodeGetVolumeStats", e);
        let req = proto::NodeGetVolumeStatsRequest {
            volume_id: volume_id.to_string(),
            volume_path: paths.target(berth_id).map_err(refused)?.display().to_string(),
            staging_target_path: staging_arg(&paths, berth_id, staged).map_err(refused)?,
        };
        match self
            .ask(node, plugin, "NodeGetVolumeStats", wire::call::Call::Stats(req))
            .await?
        {
            wire::answer::Answer::Stats(resp) => Ok(resp),
            _ => Err(mismatched(node, "NodeGetVolumeStats")),
        }
    }
}
