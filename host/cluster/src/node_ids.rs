//! Which node each CSI node id is: a node id (per driver) is one node's,
//! down or not, until that node is removed, so an agent cannot claim
//! another node's id and be sent its volumes.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use berth_csi::registry::PluginStatus;

#[derive(Default)]
pub(super) struct NodeIds {
    /// (driver, node id) → node.
    owners: Mutex<HashMap<(String, String), String>>,
}

/// A plugin's (driver, node id), when it reported one.
fn id_of(status: &PluginStatus) -> Option<(String, String)> {
    let f = status.fingerprint.as_ref()?;
    let info = f.node.as_ref().filter(|i| !i.node_id.is_empty())?;
    Some((f.name.clone(), info.node_id.clone()))
}

impl NodeIds {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), String>> {
        self.owners.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A node known from the store keeps its ids, unless another has them.
    pub fn remember<'a>(&self, node: &str, plugins: impl Iterator<Item = &'a PluginStatus>) {
        let mut owners = self.lock();
        for id in plugins.filter_map(id_of) {
            owners.entry(id).or_insert_with(|| node.to_string());
        }
    }

    /// Takes `node`'s ids afresh from its plugins (letting go of those it no
    /// longer reports); for each plugin whose id is another node's, why.
    pub fn claim(&self, node: &str, plugins: &BTreeMap<String, PluginStatus>) -> BTreeMap<String, String> {
        let mut owners = self.lock();
        owners.retain(|_, owner| owner != node);
        let mut taken = BTreeMap::new();
        for (plugin, status) in plugins {
            let Some(id) = id_of(status) else { continue };
            match owners.get(&id) {
                Some(owner) => {
                    let reason = format!("plugin reports node id {:?}, which is node {owner:?}'s", id.1);
                    tracing::warn!(%node, %plugin, %reason, "a node claims another node's CSI node id");
                    taken.insert(plugin.clone(), reason);
                }
                None => drop(owners.insert(id, node.to_string())),
            }
        }
        taken
    }

    /// A removed node's ids are free again.
    pub fn release(&self, node: &str) {
        self.lock().retain(|_, owner| owner != node);
    }
}
