//! The volume table's indexes, kept in step with its records: names, CSI
//! names and snapshot names to ids, publications per node, and counts by
//! state, so no request or decision scans all volumes.

use std::collections::{BTreeMap, HashMap};

use std::sync::Arc;

use berth_model::{
    GroupSnapshot, Namespace, Publication, RecordKeys, Snapshot, VecMap, VolumeRecord, VolumeState,
};

use crate::quotas::Usage;

use crate::table::records::{Records, Text};

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

/// What the indexes read of a record: the same of a decoded record as of
/// the keys read from its stored text (see [`berth_model::RecordKeys`]).
pub(crate) trait Keys {
    fn id(&self) -> &str;
    fn namespace(&self) -> &Namespace;
    fn name(&self) -> &str;
    fn plugin(&self) -> &str;
    fn required_bytes(&self) -> i64;
    fn csi_name(&self) -> Option<&str>;
    fn deleting(&self) -> bool;
    fn state(&self) -> VolumeState;
    fn retrying(&self) -> bool;
    fn publications(&self) -> &VecMap<Publication>;
    fn snapshots(&self) -> &VecMap<Snapshot>;
    fn group_snapshots(&self) -> &VecMap<GroupSnapshot>;
}

/// The accessors both kinds of record share field for field; the state
/// and the retry each says in its own way.
macro_rules! keys_of {
    ($t:ty, state: $state:path, retrying: $retrying:expr) => {
        impl Keys for $t {
            fn id(&self) -> &str {
                &self.id
            }
            fn namespace(&self) -> &Namespace {
                &self.spec.namespace
            }
            fn name(&self) -> &str {
                &self.spec.name
            }
            fn plugin(&self) -> &str {
                &self.spec.plugin
            }
            fn required_bytes(&self) -> i64 {
                self.spec.required_bytes
            }
            fn csi_name(&self) -> Option<&str> {
                self.csi_name.as_deref()
            }
            fn deleting(&self) -> bool {
                self.deleting
            }
            fn state(&self) -> VolumeState {
                $state(self)
            }
            fn retrying(&self) -> bool {
                let retrying: fn(&$t) -> bool = $retrying;
                retrying(self)
            }
            fn publications(&self) -> &VecMap<Publication> {
                &self.publications
            }
            fn snapshots(&self) -> &VecMap<Snapshot> {
                &self.snapshots
            }
            fn group_snapshots(&self) -> &VecMap<GroupSnapshot> {
                &self.group_snapshots
            }
        }
    };
}

keys_of!(VolumeRecord, state: VolumeRecord::state, retrying: |r| r.retrying.is_some());
keys_of!(RecordKeys, state: RecordKeys::state, retrying: RecordKeys::retrying);

/// What one record counts for in its namespace's usage.
fn usage_of(r: &impl Keys) -> Usage {
    Usage {
        volumes: 1,
        bytes: r.required_bytes().max(0) as u64,
        snapshots: r.snapshots().len() as u64,
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
        if let Some(old) = self.volumes.take_stored(&r.id) {
            self.unindex_stored(old.text());
        }
        self.tally(&r, true);
        let Some(slot) = self.volumes.decoded_mut(&r.id) else {
            self.claims(&r);
            self.volumes.insert_new(r);
            return;
        };
        let old = std::mem::replace(slot, r);
        self.tally(&old, false);
        let Some(new) = self.volumes.decoded(&old.id) else {
            return;
        };
        if !(old.group_snapshots.is_empty() && new.group_snapshots.is_empty()) {
            let new = new.clone();
            self.groups(&old, false);
            self.groups(&new, true);
        }
        let Some(new) = self.volumes.decoded(&old.id) else {
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

    /// Indexes a record loaded as stored, by the keys read from its text:
    /// one whose id is not held (a store holds a record under its own id,
    /// once; at a million volumes, looking first was a tenth of the load).
    pub(crate) fn insert_stored(&mut self, keys: RecordKeys, text: Arc<[u8]>) {
        debug_assert!(
            !self.volumes.contains(&keys.id),
            "a stored record's id is held once"
        );
        self.tally(&keys, true);
        self.claims(&keys);
        self.volumes.insert_stored(keys.id, text);
    }

    /// Its name, CSI name, snapshot and group names, for a record new here.
    fn claims(&mut self, r: &impl Keys) {
        self.names
            .entry(r.namespace().clone())
            .or_default()
            .insert(r.name().to_owned(), r.id().to_owned());
        if let Some(c) = r.csi_name() {
            self.csi_names.insert(c.to_owned(), r.id().to_owned());
        }
        for name in r.snapshots().keys() {
            self.snapshots
                .insert(snapshot_key(r.namespace(), name), r.id().to_owned());
        }
        self.groups(r, true);
    }

    pub(crate) fn remove(&mut self, id: &str) {
        if let Some(old) = self.volumes.remove_decoded(id) {
            self.unindex(&old);
        } else if let Some(old) = self.volumes.take_stored(id) {
            self.unindex_stored(old.text());
        }
    }

    /// Takes a record held as stored out of the indexes, by the keys read
    /// again from its text (they were read from it once, at the start).
    fn unindex_stored(&mut self, stored: &Text) {
        if let Some(keys) = stored.keys() {
            self.unindex(&keys);
        }
    }

    fn unindex(&mut self, old: &impl Keys) {
        self.tally(old, false);
        let (id, namespace) = (old.id(), old.namespace());
        if let Some(names) = self.names.get_mut(namespace.as_str())
            && names.get(old.name()).is_some_and(|n| n == id)
        {
            names.remove(old.name());
            if names.is_empty() {
                self.names.remove(namespace.as_str());
            }
        }
        if let Some(c) = old.csi_name()
            && self.csi_names.get(c).is_some_and(|n| n == id)
        {
            self.csi_names.remove(c);
        }
        for name in old.snapshots().keys() {
            let key = snapshot_key(namespace, name);
            if self.snapshots.get(&key).is_some_and(|n| n == id) {
                self.snapshots.remove(&key);
            }
        }
        self.groups(old, false);
    }

    /// Counts a record's group snapshots in (or out of) the names and the
    /// members' memberships.
    fn groups(&mut self, r: &impl Keys, add: bool) {
        for (name, g) in r.group_snapshots().iter() {
            let key = snapshot_key(r.namespace(), name);
            if add {
                self.snapshots.insert(key, r.id().to_owned());
            } else if self.snapshots.get(&key).is_some_and(|n| n == r.id()) {
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
    fn tally(&mut self, r: &impl Keys, add: bool) {
        if !r.publications().is_empty() {
            if add && !self.published.contains_key(r.plugin()) {
                self.published.insert(r.plugin().to_owned(), BTreeMap::new());
            }
            if let Some(nodes) = self.published.get_mut(r.plugin()) {
                for node in r.publications().keys() {
                    count(nodes, node, add);
                }
            }
        }
        match self.usage.get_mut(r.namespace()) {
            Some(usage) => {
                usage.add(&usage_of(r), add);
                if !add && usage.volumes == 0 {
                    self.usage.remove(r.namespace());
                }
            }
            None if add => {
                self.usage.insert(r.namespace().clone(), usage_of(r));
            }
            None => {}
        }
        let state = &mut self.states[r.state().index()];
        let retrying = u64::from(r.retrying());
        if add {
            *state += 1;
            self.retrying += retrying;
        } else {
            *state -= 1;
            self.retrying -= retrying;
        }
    }
}
