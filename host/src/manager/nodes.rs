//! Node operations: NodeStage, NodePublish and their reverse, against a node's
//! CSI node plugin, with paths under the node's directory. Behind a trait so a
//! per-node agent process can take this over later.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use crate::config::NodeConfig;
use crate::csi::proto;
use crate::csi::registry::Plugin;
use crate::csi::{CsiError, Failure};

/// What a node operation needs besides the paths, which the agent owns.
pub struct NodeVolume {
    pub volume_id: String,
    /// Berth's id, used to name the volume's paths on the node.
    pub berth_id: String,
    pub capability: proto::VolumeCapability,
    pub publish_context: HashMap<String, String>,
    pub volume_context: HashMap<String, String>,
    pub secrets: HashMap<String, String>,
    pub readonly: bool,
}

#[tonic::async_trait]
pub trait NodeAgent: Send + Sync {
    /// The node plugin of `plugin` on `node`, as registered.
    fn plugin(&self, node: &str, plugin: &str) -> Option<Arc<Plugin>>;
    fn staging_path(&self, node: &str, berth_id: &str) -> PathBuf;
    fn target_path(&self, node: &str, berth_id: &str) -> PathBuf;
    async fn stage(&self, node: &str, plugin: &str, v: NodeVolume) -> Result<(), CsiError>;
    async fn publish(&self, node: &str, plugin: &str, v: NodeVolume, staged: bool) -> Result<(), CsiError>;
    async fn unpublish(
        &self,
        node: &str,
        plugin: &str,
        volume_id: &str,
        berth_id: &str,
    ) -> Result<(), CsiError>;
    async fn unstage(
        &self,
        node: &str,
        plugin: &str,
        volume_id: &str,
        berth_id: &str,
    ) -> Result<(), CsiError>;
    /// NodeExpandVolume at the volume's target path; the node's new capacity.
    async fn expand(
        &self,
        node: &str,
        plugin: &str,
        v: NodeVolume,
        staged: bool,
        range: proto::CapacityRange,
    ) -> Result<i64, CsiError>;
    /// NodeGetVolumeStats at the volume's target path.
    async fn stats(
        &self,
        node: &str,
        plugin: &str,
        volume_id: &str,
        berth_id: &str,
        staged: bool,
    ) -> Result<proto::NodeGetVolumeStatsResponse, CsiError>;
}

/// Node plugins reached directly from `berth serve`, on this machine.
pub struct LocalNodes {
    nodes: HashMap<String, NodeConfig>,
    plugins: HashMap<(String, String), Arc<Plugin>>,
}

impl LocalNodes {
    pub fn new(nodes: &[NodeConfig], plugins: HashMap<(String, String), Arc<Plugin>>) -> Self {
        LocalNodes {
            nodes: nodes.iter().map(|n| (n.name.clone(), n.clone())).collect(),
            plugins,
        }
    }

    fn client(&self, node: &str, plugin: &str, call: &'static str) -> Result<Arc<Plugin>, CsiError> {
        self.plugin(node, plugin).ok_or_else(|| CsiError {
            plugin: format!("{plugin}@{node}"),
            call,
            failure: Failure::Unreachable(format!("node {node:?} has no node plugin for {plugin:?}")),
        })
    }
}

fn local_io(node: &str, call: &'static str, e: std::io::Error) -> CsiError {
    CsiError {
        plugin: format!("node {node}"),
        call,
        failure: Failure::Status {
            code: tonic::Code::Internal,
            message: format!("preparing paths: {e}"),
        },
    }
}

#[tonic::async_trait]
impl NodeAgent for LocalNodes {
    fn plugin(&self, node: &str, plugin: &str) -> Option<Arc<Plugin>> {
        self.plugins.get(&(node.to_string(), plugin.to_string())).cloned()
    }

    fn staging_path(&self, node: &str, berth_id: &str) -> PathBuf {
        self.nodes
            .get(node)
            .map(|n| n.staging_dir())
            .unwrap_or_default()
            .join(berth_id)
    }

    fn target_path(&self, node: &str, berth_id: &str) -> PathBuf {
        self.nodes
            .get(node)
            .map(|n| n.publish_dir())
            .unwrap_or_default()
            .join(berth_id)
    }

    async fn stage(&self, node: &str, plugin: &str, v: NodeVolume) -> Result<(), CsiError> {
        let p = self.client(node, plugin, "NodeStageVolume")?;
        // The CO creates the staging directory (CSI spec).
        let staging = self.staging_path(node, &v.berth_id);
        std::fs::create_dir_all(&staging).map_err(|e| local_io(node, "NodeStageVolume", e))?;
        p.client()
            .node_stage_volume(proto::NodeStageVolumeRequest {
                volume_id: v.volume_id,
                publish_context: v.publish_context,
                staging_target_path: staging.display().to_string(),
                volume_capability: Some(v.capability),
                secrets: v.secrets,
                volume_context: v.volume_context,
            })
            .await
            .map(drop)
    }

    async fn publish(&self, node: &str, plugin: &str, v: NodeVolume, staged: bool) -> Result<(), CsiError> {
        let p = self.client(node, plugin, "NodePublishVolume")?;
        // The CO creates the target's parent; the plugin creates the target.
        let target = self.target_path(node, &v.berth_id);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|e| local_io(node, "NodePublishVolume", e))?;
        }
        let staging = self.staging(node, &v.berth_id, staged);
        p.client()
            .node_publish_volume(proto::NodePublishVolumeRequest {
                volume_id: v.volume_id,
                publish_context: v.publish_context,
                staging_target_path: staging,
                target_path: target.display().to_string(),
                volume_capability: Some(v.capability),
                readonly: v.readonly,
                secrets: v.secrets,
                volume_context: v.volume_context,
            })
            .await
            .map(drop)
    }

    async fn unpublish(
        &self,
        node: &str,
        plugin: &str,
        volume_id: &str,
        berth_id: &str,
    ) -> Result<(), CsiError> {
        let p = self.client(node, plugin, "NodeUnpublishVolume")?;
        p.client()
            .node_unpublish_volume(proto::NodeUnpublishVolumeRequest {
                volume_id: volume_id.to_string(),
                target_path: self.target_path(node, berth_id).display().to_string(),
            })
            .await
            .map(drop)
    }

    async fn unstage(
        &self,
        node: &str,
        plugin: &str,
        volume_id: &str,
        berth_id: &str,
    ) -> Result<(), CsiError> {
        let p = self.client(node, plugin, "NodeUnstageVolume")?;
        let staging = self.staging_path(node, berth_id);
        p.client()
            .node_unstage_volume(proto::NodeUnstageVolumeRequest {
                volume_id: volume_id.to_string(),
                staging_target_path: staging.display().to_string(),
            })
            .await?;
        // Ours to remove, as we created it; the plugin has let go of it.
        let _ = std::fs::remove_dir(&staging);
        Ok(())
    }

    async fn expand(
        &self,
        node: &str,
        plugin: &str,
        v: NodeVolume,
        staged: bool,
        range: proto::CapacityRange,
    ) -> Result<i64, CsiError> {
        let p = self.client(node, plugin, "NodeExpandVolume")?;
        let resp = p
            .client()
            .node_expand_volume(proto::NodeExpandVolumeRequest {
                volume_id: v.volume_id,
                volume_path: self.target_path(node, &v.berth_id).display().to_string(),
                capacity_range: Some(range),
                staging_target_path: self.staging(node, &v.berth_id, staged),
                volume_capability: Some(v.capability),
                secrets: v.secrets,
            })
            .await?;
        Ok(resp.capacity_bytes)
    }

    async fn stats(
        &self,
        node: &str,
        plugin: &str,
        volume_id: &str,
        berth_id: &str,
        staged: bool,
    ) -> Result<proto::NodeGetVolumeStatsResponse, CsiError> {
        let p = self.client(node, plugin, "NodeGetVolumeStats")?;
        p.client()
            .node_get_volume_stats(proto::NodeGetVolumeStatsRequest {
                volume_id: volume_id.to_string(),
                volume_path: self.target_path(node, berth_id).display().to_string(),
                staging_target_path: self.staging(node, berth_id, staged),
            })
            .await
    }
}

impl LocalNodes {
    /// The staging path as node calls take it: empty when the plugin does not stage.
    fn staging(&self, node: &str, berth_id: &str, staged: bool) -> String {
        if staged {
            self.staging_path(node, berth_id).display().to_string()
        } else {
            String::new()
        }
    }
}
