//! The volume table's indexes, kept in step with its records: names, CSI
//! names and snapshot names to ids, publications per node, and counts by
//! state, so no request or decision scans all volumes.

use std::collections::{BTreeMap, HashMap};

use berth_model::{VolumeRecord, VolumeState};

use crate::table::records::Records;

/// Records and their indexes.
#[derive(Default)]
pub(crate) struct Indexed {
    pub(crate) volumes: Records,
    /// Operator name → id, for live volumes; in name order, for paged lists.
    pub(crate) names: BTreeMap<String, String>,
    /// CSI name → id: a name given to one volume is never given to another.
    pub(crate) csi_names: HashMap<String, String>,
    /// Snapshot name → the id of the volume it is of; group snapshot name →
    /// the id of the volume whose record holds it (one namespace for both).
    pub(crate) snapshots: HashMap<String, String>,
    /// Volume id → how many group snapshots it is a member of.
    pub(crate) grouped: HashMap<String, u32>,
    /// Plugin → node → publications there, wanted or still being undone.
    pub(crate) published: BTreeMap<String, BTreeMap<String, u64>>,
    /// Volumes by [`VolumeState::index`].
    pub(crate) states: [u64; VolumeState::ALL.len()],
    /// Volumes waiting to retry a failed call.
    pub(crate) retrying: u64,
}

/// Adds one to `key`'s count, or takes one away (dropping counts of zero);
/// allocates only for a key not counted yet.
fn count(counts: &mut BTreeMap<String, u64>, key: &str, add: bool) {
    match counts.get_mut(key) {
        Some(n) if add => *n += 1,
        Some(n) => {
            *n -= 1;
            if *n == 0 {
                counts.remove(key);
            }
        }
        None if add => {
            counts.insert(key.to_owned(), 1);
        }
        None => {}
    }
}

impl Indexed {
    /// Stores a new or changed record. A record's spec (and so its operator
    /// name) never changes; its CSI name is set once and cleared on delete.
    pub(crate) fn insert(&mut self, r: VolumeRecord) {
        self.tally(&r, true);
        let Some(slot) = self.volumes.get_mut(&r.id) else {
            self.names.insert(r.spec.name.clone(), r.id.clone());
            if let Some(c) = &r.csi_name {
                self.csi_names.insert(c.clone(), r.id.clone());
            }
            for name in r.snapshots.keys() {
                self.snapshots.insert(name.clone(), r.id.clone());
            }
            self.groups(&r, true);
            self.volumes.insert_new(r);
            return;
        };
        let old = std::mem::replace(slot, r);
        self.tally(&old, false);
        let Some(new) = self.volumes.get(&old.id) else {
            return;
        };
        if !(old.group_snapshots.is_empty() && new.group_snapshots.is_empty()) {
            let new = new.clone();
            self.groups(&old, false);
            self.groups(&new, true);
        }
        let Some(new) = self.volumes.get(&old.id) else {
            return;
        };
        if !(old.snapshots.is_empty() && new.snapshots.is_empty()) {
            for name in old.snapshots.keys().filter(|n| !new.snapshots.contains_key(n)) {
                if self.snapshots.get(name) == Some(&old.id) {
                    self.snapshots.remove(name);
                }
            }
            for name in new.snapshots.keys() {
                self.snapshots.insert(name.clone(), old.id.clone());
            }
        }
        if new.csi_name != old.csi_name {
            if let Some(c) = &old.csi_name
                && self.csi_names.get(c) == Some(&old.id)
            {
                self.csi_names.remove(c);
            }
            if let Some(c) = &new.csi_name {
                self.csi_names.insert(c.clone(), old.id.clone());
            }
        }
    }

    pub(crate) fn remove(&mut self, id: &str) -> Option<VolumeRecord> {
        let old = self.volumes.remove(id)?;
        self.tally(&old, false);
        if self.names.get(&old.spec.name) == Some(&old.id) {
            self.names.remove(&old.spec.name);
        }
        if let Some(c) = &old.csi_name
            && self.csi_names.get(c) == Some(&old.id)
        {
            self.csi_names.remove(c);
        }
        for name in old.snapshots.keys() {
            if self.snapshots.get(name) == Some(&old.id) {
                self.snapshots.remove(name);
            }
        }
        self.groups(&old, false);
        Some(old)
    }

    /// Counts a record's group snapshots in (or out of) the names and the
    /// members' memberships.
    fn groups(&mut self, r: &VolumeRecord, add: bool) {
        for (name, g) in r.group_snapshots.iter() {
            if add {
                self.snapshots.insert(name.clone(), r.id.clone());
            } else if self.snapshots.get(name) == Some(&r.id) {
                self.snapshots.remove(name);
            }
            for m in &g.members {
                match self.grouped.get_mut(&m.volume) {
                    Some(n) if add => *n += 1,
                    Some(n) => {
                        *n -= 1;
                        if *n == 0 {
                            self.grouped.remove(&m.volume);
                        }
                    }
                    None if add => {
                        self.grouped.insert(m.volume.clone(), 1);
                    }
                    None => {}
                }
            }
        }
    }

    /// Counts a record in (or out of) the publications per node, the states
    /// and the retries.
    fn tally(&mut self, r: &VolumeRecord, add: bool) {
        if !r.publications.is_empty() {
            if add && !self.published.contains_key(&r.spec.plugin) {
                self.published.insert(r.spec.plugin.clone(), BTreeMap::new());
            }
            if let Some(nodes) = self.published.get_mut(&r.spec.plugin) {
                for node in r.publications.keys() {
                    count(nodes, node, add);
                }
            }
        }
        let state = &mut self.states[r.state().index()];
        let retrying = u64::from(r.retrying.is_some());
        if add {
            *state += 1;
            self.retrying += retrying;
        } else {
            *state -= 1;
            self.retrying -= retrying;
        }
    }
}
