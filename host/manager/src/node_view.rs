//! Each node's plugins as the manager knows them: the node's agent state,
//! the node plugin's fingerprint and health as the agent reported them, and
//! the table's publication counts. Placement and the API both see nodes
//! through this one view.

use std::collections::BTreeMap;

use crate::VolumeManager;
use crate::nodes::{NodeState, NodeSummary};
use berth_csi::fingerprint::NodeInfo;
use berth_csi::registry::Health;

/// One plugin on one node.
#[derive(Clone, Debug)]
pub struct NodePluginView {
    pub node: String,
    pub labels: BTreeMap<String, String>,
    pub plugin: String,
    /// `Unknown` until the node plugin has been fingerprinted; unhealthy
    /// while the node's agent is not ready, whatever the plugin last said.
    pub health: Health,
    /// What NodeGetInfo reported (node id, topology, limit).
    pub info: Option<NodeInfo>,
    /// Volumes of the plugin published there, or being published or undone.
    pub published_volumes: u64,
}

impl VolumeManager {
    /// Every known node's plugins, by node name; only those of `plugin` when given.
    pub fn node_views(&self, plugin: Option<&str>) -> Vec<NodePluginView> {
        let mut out = Vec::new();
        for n in self.nodes.nodes() {
            for name in n.plugins.keys().filter(|p| plugin.is_none_or(|want| want == *p)) {
                out.push(self.view(&n, name));
            }
        }
        out
    }

    /// `plugin` on `node`, when the node has it.
    pub fn node_view(&self, node: &str, plugin: &str) -> Option<NodePluginView> {
        let n = self.nodes.node(node)?;
        n.plugins.contains_key(plugin).then(|| self.view(&n, plugin))
    }

    fn view(&self, n: &NodeSummary, plugin: &str) -> NodePluginView {
        let status = n.plugins.get(plugin);
        let mut health = status.map_or(Health::Unknown, |s| s.health.clone());
        if n.state != NodeState::Ready && health == Health::Healthy {
            health = Health::Unhealthy {
                reason: format!("the node's agent is {}", n.state.as_str()),
            };
        } else if n.draining && health == Health::Healthy {
            health = Health::Unhealthy {
                reason: "the node is draining".into(),
            };
        }
        NodePluginView {
            node: n.name.clone(),
            labels: n.labels.clone(),
            plugin: plugin.to_string(),
            health,
            info: status
                .and_then(|s| s.fingerprint.as_ref())
                .and_then(|f| f.node.clone()),
            published_volumes: self.table.published_on(plugin, &n.name),
        }
    }
}
