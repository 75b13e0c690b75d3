//! Each node's plugins as the manager knows them: configuration, the node
//! plugin's fingerprint and health, and the table's publication counts.
//! Placement and the API both see nodes through this one view.

use std::collections::BTreeMap;

use super::VolumeManager;
use crate::config::NodeConfig;
use crate::csi::fingerprint::NodeInfo;
use crate::csi::registry::Health;

/// One plugin on one node.
#[derive(Clone, Debug)]
pub struct NodePluginView {
    pub node: String,
    pub labels: BTreeMap<String, String>,
    pub plugin: String,
    /// `Unknown` until the node plugin has been fingerprinted.
    pub health: Health,
    /// What NodeGetInfo reported (node id, topology, limit).
    pub info: Option<NodeInfo>,
    /// Volumes of the plugin published there, or being published or undone.
    pub published_volumes: u64,
}

impl VolumeManager {
    /// Every configured node's plugins, in configuration order; only those
    /// of `plugin` when given.
    pub fn node_views(&self, plugin: Option<&str>) -> Vec<NodePluginView> {
        let mut out = Vec::new();
        for n in &self.config.nodes {
            for name in n.plugins.keys().filter(|p| plugin.is_none_or(|want| want == *p)) {
                out.push(self.view(n, name));
            }
        }
        out
    }

    /// `plugin` on `node`, when the node is configured with it.
    pub fn node_view(&self, node: &str, plugin: &str) -> Option<NodePluginView> {
        let n = self.config.node(node)?;
        n.plugins.contains_key(plugin).then(|| self.view(n, plugin))
    }

    fn view(&self, n: &NodeConfig, plugin: &str) -> NodePluginView {
        let status = self.nodes.plugin(&n.name, plugin).map(|p| p.status());
        let (health, info) = status
            .map(|s| (s.health, s.fingerprint.and_then(|f| f.node)))
            .unwrap_or((Health::Unknown, None));
        NodePluginView {
            node: n.name.clone(),
            labels: n.labels.clone(),
            plugin: plugin.to_string(),
            health,
            info,
            published_volumes: self.table.published_on(plugin, &n.name),
        }
    }
}
