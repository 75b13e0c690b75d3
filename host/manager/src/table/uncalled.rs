//! Publications a request marked sent (durably, with the request's own
//! write) whose first call has not gone out, by volume id: withdrawn before
//! it, they need no call to undo. Kept in memory only: after a restart
//! every sent publication may have been called.

use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Default)]
pub struct Uncalled {
    by_volume: Mutex<HashMap<String, Vec<String>>>,
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
    }
}
