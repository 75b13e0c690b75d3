//! Each node's plugins as the manager knows them: the node's agent state,
//! the node plugin's fingerprint and health as the agent reported them, and
//! the table's publication counts. Placement and the API both see nodes
//! through this one view.

pub(crate) mod admin;
pub(crate) mod sync;

use std::collections::BTreeMap;

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

crate::shared::view!(
    /// The nodes as the manager keeps them: their views for placement and the
    /// API, drains, forgets and removals, and what a (re)registering node holds.
    Fleet,
    fleet
);

impl Fleet<'_> {
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

/// Publications on a node berth.toml does not name: most often a `[[node]]`
/// removed while it held volumes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stranded {
    pub node: String,
    /// The volumes published (or being published or undone) there.
    pub volumes: Vec<String>,
    /// Whether an agent can attach at all (a cluster endpoint is
    /// configured); without one, nothing will ever carry the node's steps out.
    pub agents_may_attach: bool,
}

impl Fleet<'_> {
    /// Every node that holds publications and is not a `[[node]]` of the
    /// config, with its volumes; for a warning at start.
    pub fn stranded(&self) -> Vec<Stranded> {
        let configured: Vec<&str> = self.config.nodes.iter().map(|n| n.name.as_str()).collect();
        let mut by_node: BTreeMap<String, Vec<String>> = BTreeMap::new();
        // The index says which nodes have publications: the volumes are
        // looked through only when one of them is not configured.
        let stranded = self
            .table
            .nodes_published_on()
            .into_iter()
            .any(|node| !configured.contains(&node.as_str()) && !self.nodes.forgotten(&node));
        if !stranded {
            return Vec::new();
        }
        // Only publications on nodes not configured are copied: at start,
        // a pair of strings for each of a million publications was seconds.
        for (node, volume) in self.table.collect_keys(|r, out| {
            for node in r.publications().keys() {
                if !configured.contains(&node.as_str()) {
                    out.push((node.clone(), r.name().to_owned()));
                }
            }
        }) {
            if !configured.contains(&node.as_str()) && !self.nodes.forgotten(&node) {
                by_node.entry(node).or_default().push(volume);
            }
        }
        let agents_may_attach = self.config.cluster.is_some() || self.config.cluster_address.is_some();
        by_node
            .into_iter()
            .map(|(node, volumes)| Stranded {
                node,
                volumes,
                agents_may_attach,
            })
            .collect()
    }

    /// Why a node step waits for `node`, with what to do when the node is
    /// not configured and no agent for it is known.
    pub(crate) fn node_wait_reason(&self, node: &str) -> String {
        let summary = self.nodes.node(node);
        let state = summary.as_ref().map_or("unknown", |n| n.state.as_str());
        let configured = self.config.nodes.iter().any(|n| n.name == node);
        if configured || state != "unknown" {
            return format!("waiting for node {node:?}, whose agent is {state}");
        }
        format!(
            "waiting for node {node:?}, which berth.toml does not name and whose agent is unknown: if it was a [[node]] removed from berth.toml, put it back; if it is gone, `berth node forget {node} --force`"
        )
    }
}
