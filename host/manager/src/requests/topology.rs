//! Whether a volume's topology can be honoured: by the plugin or by
//! placement at declaration, and by a node the operator names at publish.

use crate::Unready;
use crate::requests::Requests;
use std::collections::BTreeMap;

use crate::RequestError;
use crate::nodes::NodeState;
use berth_model::text::echo;
use berth_model::{Segments, VolumeRecord, VolumeSpec};

impl Requests<'_> {
    /// Refuses a required topology that neither the plugin (it takes no
    /// accessibility requirements) nor placement (no node is there) can
    /// honour. While the plugins are not fingerprinted yet it cannot be told;
    /// publishing enforces it then.
    pub(crate) fn check_requisite(&self, spec: &VolumeSpec) -> Result<(), RequestError> {
        if spec.requisite_topology.is_empty() || self.decisions().constrained(&spec.plugin) != Some(false) {
            return Ok(());
        }
        let views = self.fleet().node_views(Some(&spec.plugin));
        let mut unknown = false;
        for v in &views {
            match &v.info {
                Some(info)
                    if spec
                        .requisite_topology
                        .iter()
                        .any(|t| reaches(&info.accessible_topology, t)) =>
                {
                    return Ok(());
                }
                Some(_) => {}
                None => unknown = true,
            }
        }
        if unknown {
            return Ok(());
        }
        Err(RequestError::Invalid(format!(
            "requisite_topology: {} cannot be honoured: plugin {:?} takes no accessibility requirements (it does not offer VOLUME_ACCESSIBILITY_CONSTRAINTS), and none of its nodes is there",
            spec.requisite_topology
                .iter()
                .map(|t| show(t.iter()))
                .collect::<Vec<_>>()
                .join(" or "),
            spec.plugin
        )))
    }

    /// Whether the volume may be published on `node`, named by the operator:
    /// the node serves its plugin, has room under its volume limit, and is
    /// inside the volume's topology.
    pub(crate) fn check_node(&self, r: &VolumeRecord, node: &str) -> Result<(), RequestError> {
        let plugin = &r.spec.plugin;
        let Some(view) = self
            .fleet()
            .node_views(Some(plugin))
            .into_iter()
            .find(|v| v.node == node)
        else {
            return Err(RequestError::Invalid(match self.nodes.node(node) {
                None => format!("node: there is no node named {}", echo(node)),
                Some(_) => format!("node: {node:?} has no node plugin for {plugin:?}"),
            }));
        };
        let already = r.publications.get(node).is_some_and(|p| p.wanted);
        if let Some(n) = self
            .nodes
            .node(node)
            .filter(|n| !already && (n.draining || n.state == NodeState::Forgotten))
        {
            return Err(RequestError::Invalid(format!(
                "node: {node:?} is {}; publish elsewhere{}",
                if n.draining { "draining" } else { "forgotten" },
                if n.draining {
                    format!(", or `berth node drain {node} --undo` first")
                } else {
                    String::new()
                }
            )));
        }
        if let Some(max) = view.info.as_ref().and_then(|i| i.max_volumes_per_node)
            && !already
            && view.published_volumes >= max
        {
            return Err(RequestError::NodeFull {
                node: node.to_string(),
                plugin: plugin.to_string(),
                published: view.published_volumes,
                max,
            });
        }
        let allowed = allowed_topology(r);
        if allowed.is_empty() {
            return Ok(());
        }
        let Some(info) = &view.info else {
            return Err(Unready::TopologyUnknown {
                plugin: plugin.to_string(),
                node: node.to_string(),
                volume: r.spec.name.clone(),
            }
            .into());
        };
        if allowed.iter().any(|t| reaches(&info.accessible_topology, t)) {
            return Ok(());
        }
        Err(RequestError::Invalid(format!(
            "node: {node:?} ({}) is outside the topology volume {:?} is {} ({})",
            show(info.accessible_topology.iter()),
            r.spec.name,
            if r.backend
                .as_ref()
                .is_some_and(|b| !b.accessible_topology.is_empty())
            {
                "accessible from"
            } else {
                "required in"
            },
            allowed
                .iter()
                .map(|t| show(t.iter()))
                .collect::<Vec<_>>()
                .join(" or ")
        )))
    }
}

/// Where a volume may be published: what the plugin said it is accessible
/// from, or else what the operator required (empty: anywhere).
pub(crate) fn allowed_topology(r: &VolumeRecord) -> &[Segments] {
    match &r.backend {
        Some(b) if !b.accessible_topology.is_empty() => &b.accessible_topology,
        _ => &r.spec.requisite_topology,
    }
}

/// Whether a node with `topology` has every segment of `required`.
pub(crate) fn reaches(topology: &BTreeMap<String, String>, required: &Segments) -> bool {
    required.iter().all(|(k, v)| topology.get(k) == Some(v))
}

fn show<'a>(segments: impl Iterator<Item = (&'a String, &'a String)>) -> String {
    segments
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}
