//! Publications a request marked sent (durably, with the request's own
//! write) whose first call has not gone out, by volume id: withdrawn before
//! it, they need no call to undo. Likewise volumes a create request named
//! and marked sent whose CreateVolume has not gone out: deleted before it,
//! they are forgotten without a call. Kept in memory only: after a restart
//! every sent publication and create may have been called.

use std::collections::HashMap;
use std::sync::Mutex;

use berth_csi::proto::TopologyRequirement;

#[derive(Default)]
pub struct Uncalled {
    by_volume: Mutex<HashMap<String, Vec<String>>>,
    /// By volume id: the accessibility requirements decided with the name,
    /// if the plugin has any, for CreateVolume to send.
    creates: Mutex<HashMap<String, Option<TopologyRequirement>>>,
}

impl Uncalled {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<String>>> {
        self.by_volume.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes that a request marked the publication on `node` sent before any
    /// call for it: to be called from inside that request's change.
    pub fn note(&self, id: &str, node: &str) {
        let mut u = self.map();
        let nodes = u.entry(id.to_string()).or_default();
        if !nodes.iter().any(|n| n == node) {
            nodes.push(node.to_string());
        }
    }

    /// Forgets the note; whether there was one, i.e. whether no call for
    /// the publication has gone out. From inside a change, or under the
    /// volume's lock.
    pub fn withdraw(&self, id: &str, node: &str) -> bool {
        let mut u = self.map();
        let Some(nodes) = u.get_mut(id) else {
            return false;
        };
        let before = nodes.len();
        nodes.retain(|n| n != node);
        let was = nodes.len() < before;
        if nodes.is_empty() {
            u.remove(id);
        }
        was
    }

    /// Forgets every note of a volume that is gone.
    pub fn forget(&self, id: &str) {
        self.map().remove(id);
        self.creates().remove(id);
    }

    fn creates(&self) -> std::sync::MutexGuard<'_, HashMap<String, Option<TopologyRequirement>>> {
        self.creates.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes that a create request named volume `id` and marked it sent
    /// before any CreateVolume, with the placement decided with the name.
    pub fn note_create(&self, id: &str, placed: Option<TopologyRequirement>) {
        self.creates().insert(id.to_string(), placed);
    }

    /// The accessibility requirements the create's request decided with
    /// the name, if its note stands and the plugin has topology.
    pub fn create_placement(&self, id: &str) -> Option<TopologyRequirement> {
        self.creates().get(id).cloned().flatten()
    }

    /// Whether the create's note stands: no CreateVolume has gone out.
    pub fn create_noted(&self, id: &str) -> bool {
        self.creates().contains_key(id)
    }

    /// Forgets the create's note; whether there was one (no CreateVolume
    /// had gone out). Under the volume's lock, or for a volume not made.
    pub fn withdraw_create(&self, id: &str) -> bool {
        self.creates().remove(id).is_some()
    }
}
