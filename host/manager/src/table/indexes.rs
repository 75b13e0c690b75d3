//! The volume table's indexes, kept in step with its records: names, CSI
//! names and snapshot names to ids, publications per node, and counts by
//! state, so no request or decision scans all volumes.

use std::collections::{BTreeMap, HashMap};

use berth_model::{Namespace, VolumeRecord, VolumeState};

use crate::quotas::Usage;

use crate::table::records::Records;

/// Records and their indexes.
#[derive(Default)]
pub(crate) struct Indexed {
    pub(crate) volumes: Records,
    /// Namespace → operator name → id, for live volumes; in name order,
    /// for paged lists.
    pub(crate) names: BTreeMap<Namespace, BTreeMap<String, String>>,
    /// CSI name → id: a name given to one volume is never given to another.
    pub(crate) csi_names: HashMap<String, String>,
    /// Snapshot key ([`snapshot_key`]) → the id of the volume it is of;
    /// group snapshot key → the id of the volume whose record holds it (one
    /// set of names for both, in each namespace).
    pub(crate) snapshots: HashMap<String, String>,
    /// Volume id → how many group snapshots it is a member of.
    pub(crate) grouped: HashMap<String, u32>,
    /// Plugin → node → publications there, wanted or still being undone.
    pub(crate) published: BTreeMap<String, BTreeMap<String, u64>>,
    /// Volumes by [`VolumeState::index`].
    pub(crate) states: [u64; VolumeState::ALL.len()],
    /// Volumes waiting to retry a failed call.
    pub(crate) retrying: u64,
    /// What each namespace holds, for its quota.
    pub(crate) usage: HashMap<Namespace, Usage>,
    /// What changes under way have taken of each namespace's quota and
    /// not yet written (see [`super::Reservation`]).
    pub(crate) reserved: HashMap<Namespace, Usage>,
}

impl Indexed {
    /// What `namespace` holds with what is reserved there: what a quota
    /// is checked against.
    pub(crate) fn taken(&self, namespace: &Namespace) -> Usage {
        let mut taken = self.usage.get(namespace).copied().unwrap_or_default();
        if let Some(reserved) = self.reserved.get(namespace) {
            taken.add(reserved, true);
        }
        taken
    }
}

/// A snapshot's (or group snapshot's) key in the snapshot index: its name
/// in the default namespace (as before namespaces), `namespace NUL name`
/// in any other (a name holds no control character), so each namespace
/// has names of its own.
pub(crate) fn snapshot_key(namespace: &Namespace, name: &str) -> String {
    if namespace.is_default() {
        name.to_string()
    } else {
        format!("{namespace}\0{name}")
    }
}

/// What one record counts for in its namespace's usage.
fn usage_of(r: &VolumeRecord) -> Usage {
    Usage {
        volumes: 1,
        bytes: r.spec.required_bytes.max(0) as u64,
        snapshots: r.snapshots.len() as u64,
    }
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
    /// The id of the live volume of that name in that namespace.
    pub(crate) fn named(&self, namespace: &str, name: &str) -> Option<&String> {
        self.names.get(namespace).and_then(|names| names.get(name))
    }

    /// Stores a new or changed record. A record's spec (and so its operator
    /// name) never changes; its CSI name is set once and cleared on delete.
    pub(crate) fn insert(&mut self, r: VolumeRecord) {
        self.tally(&r, true);
        let Some(slot) = self.volumes.get_mut(&r.id) else {
            self.names
                .entry(r.spec.namespace.clone())
                .or_default()
                .insert(r.spec.name.clone(), r.id.clone());
            if let Some(c) = &r.csi_name {
                self.csi_names.insert(c.clone(), r.id.clone());
            }
            for name in r.snapshots.keys() {
                self.snapshots
                    .insert(snapshot_key(&r.spec.namespace, name), r.id.clone());
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
            let ns = &old.spec.namespace;
            for name in old.snapshots.keys().filter(|n| !new.snapshots.contains_key(n)) {
                let key = snapshot_key(ns, name);
                if self.snapshots.get(&key) == Some(&old.id) {
                    self.snapshots.remove(&key);
                }
            }
            for name in new.snapshots.keys() {
                self.snapshots.insert(snapshot_key(ns, name), old.id.clone());
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
        if let Some(names) = self.names.get_mut(old.spec.namespace.as_str())
            && names.get(&old.spec.name) == Some(&old.id)
        {
            names.remove(&old.spec.name);
            if names.is_empty() {
                self.names.remove(old.spec.namespace.as_str());
            }
        }
        if let Some(c) = &old.csi_name
            && self.csi_names.get(c) == Some(&old.id)
        {
            self.csi_names.remove(c);
        }
        for name in old.snapshots.keys() {
            let key = snapshot_key(&old.spec.namespace, name);
            if self.snapshots.get(&key) == Some(&old.id) {
                self.snapshots.remove(&key);
            }
        }
        self.groups(&old, false);
        Some(old)
    }

    /// Counts a record's group snapshots in (or out of) the names and the
    /// members' memberships.
    fn groups(&mut self, r: &VolumeRecord, add: bool) {
        for (name, g) in r.group_snapshots.iter() {
            let key = snapshot_key(&r.spec.namespace, name);
            if add {
                self.snapshots.insert(key, r.id.clone());
            } else if self.snapshots.get(&key) == Some(&r.id) {
                self.snapshots.remove(&key);
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
        match self.usage.get_mut(&r.spec.namespace) {
            Some(usage) => {
                usage.add(&usage_of(r), add);
                if !add && usage.volumes == 0 {
                    self.usage.remove(&r.spec.namespace);
                }
            }
            None if add => {
                self.usage.insert(r.spec.namespace.clone(), usage_of(r));
            }
            None => {}
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
