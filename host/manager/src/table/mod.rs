//! The volume table: every record in memory, mirrored durably by the store,
//! with indexes kept in step on every change so no request or decision scans
//! all volumes.
//!
//! Every change goes through [`VolumeTable::modify`] (or `insert_new`,
//! `remove`): serialized per volume, written to the store, and only then
//! visible.

pub(crate) mod indexes;
pub(crate) mod records;

use crate::Unready;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

mod changes;
mod first_call;
mod insert;
mod locks;
mod reserve;
mod uncalled;
mod unsure;
mod waits;

pub use reserve::{Reservation, held};
pub use uncalled::Uncalled;
pub use waits::{Waiting, Waits};

use crate::RequestError;
use crate::quotas::Usage;
use crate::table::indexes::{Indexed, snapshot_key};

/// Which namespaces a list takes.
pub type Within<'a> = dyn Fn(&Namespace) -> bool + 'a;

/// Which namespaces a page of volumes is from.
#[derive(Clone, Copy)]
pub enum Pages<'a> {
    One(&'a str),
    /// Every namespace this takes.
    Every(&'a Within<'a>),
}
use berth_model::{Namespace, VolumeName, VolumeRecord, VolumeState};
use berth_store::{Store, StoreError};

/// The most records one page looks at, matched or not.
pub const PAGE_SCAN: usize = 100_000;

/// Counts of the table, without listing every volume.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub volumes: u64,
    /// Volumes in each state that has any.
    pub states: Vec<(VolumeState, u64)>,
    /// Volumes waiting to retry a failed call.
    pub retrying: u64,
    /// Volumes that cannot progress until something else happens.
    pub waiting: u64,
    /// What each namespace holding volumes holds, by name.
    pub namespaces: Vec<(Namespace, Usage)>,
}

/// Why [`VolumeTable::remove_if`] did not remove.
pub enum RemoveError {
    Refused(RequestError),
    Store(StoreError),
}

/// What [`VolumeTable::insert_new`] did.
pub enum Inserted {
    New(VolumeRecord),
    /// A live volume with this name and the same spec was there already.
    Existing(VolumeRecord),
}

/// A name another volume already has: that volume's id.
#[derive(Debug, PartialEq, Eq)]
pub struct TakenBy(pub String);

pub struct VolumeTable {
    store: Arc<dyn Store>,
    indexed: Mutex<Indexed>,
    /// Volumes that cannot progress.
    waits: waits::Waits,
    locks: locks::VolumeLocks,
    /// Publications a request marked sent whose first call has not gone out.
    uncalled: Uncalled,
    /// Records the store may hold otherwise than here.
    unsure: unsure::Unsure,
    /// Workers' outcomes waiting for the next write of their volume.
    parked: changes::Parked,
    /// Bumped on every change, for watchers.
    changes: watch::Sender<u64>,
}

pub(super) fn unavailable(what: &str, e: StoreError) -> RequestError {
    Unready::store(what, e).into()
}

impl VolumeTable {
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Loads every record from `store`.
    pub fn load(store: Arc<dyn Store>) -> Result<VolumeTable, StoreError> {
        let mut indexed = Indexed::default();
        let count = usize::try_from(store.volume_count()?).unwrap_or(0);
        indexed.volumes.reserve(count);
        // Nearly every stored volume has a CSI name: grown as they came,
        // the map was rehashed whole some twenty times.
        indexed.csi_names.reserve(count);
        store.load_each(&mut |r| indexed.insert(r))?;
        Ok(VolumeTable {
            store,
            indexed: Mutex::new(indexed),
            waits: waits::Waits::default(),
            locks: locks::VolumeLocks::default(),
            uncalled: Uncalled::default(),
            unsure: unsure::Unsure::default(),
            parked: changes::Parked::default(),
            changes: watch::channel(0).0,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Indexed> {
        self.indexed.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn changed(&self) {
        self.changes.send_modify(|g| *g += 1);
    }

    pub fn ids(&self) -> Vec<String> {
        self.lock().volumes.ids().map(str::to_owned).collect()
    }

    pub fn by_id(&self, id: &str) -> Option<VolumeRecord> {
        self.lock().volumes.get(id).cloned()
    }

    pub fn by_name(&self, name: &VolumeName) -> Option<VolumeRecord> {
        let s = self.lock();
        s.named(name.namespace.as_str(), &name.name)
            .and_then(|id| s.volumes.get(id))
            .cloned()
    }

    pub fn id_of(&self, name: &VolumeName) -> Option<String> {
        self.lock().named(name.namespace.as_str(), &name.name).cloned()
    }

    pub fn generation(&self, id: &str) -> Option<u64> {
        self.lock().volumes.get(id).map(|v| v.generation)
    }

    /// Every volume in the namespaces `within` takes (all of them with
    /// `None`), by namespace and name.
    pub fn list(&self, within: Option<&dyn Fn(&Namespace) -> bool>) -> Vec<VolumeRecord> {
        let taken = |r: &&VolumeRecord| within.is_none_or(|w| w(&r.spec.namespace));
        let mut v: Vec<VolumeRecord> = self.lock().volumes.values().filter(taken).cloned().collect();
        v.sort_by(|a, b| (&a.spec.namespace, &a.spec.name).cmp(&(&b.spec.namespace, &b.spec.name)));
        v
    }

    /// Up to `max` volumes (at least one) after `after` in the namespaces
    /// `pages` names, and the token to continue after when there are more:
    /// a page costs its own volumes, whatever the table holds. Within one
    /// namespace, names in order and a volume's name as the token; across
    /// several, namespace then name, the token `namespace/name` (a
    /// namespace never holds a '/').
    pub fn page(
        &self,
        pages: Pages<'_>,
        after: &str,
        max: usize,
        matches: &dyn Fn(&VolumeRecord) -> bool,
    ) -> (Vec<VolumeRecord>, Option<String>) {
        use std::ops::Bound;
        let (after_ns, after_name, within): (&str, &str, &Within<'_>) = match pages {
            Pages::One(ns) => (ns, after, &move |n: &Namespace| n.as_str() == ns),
            Pages::Every(within) => {
                let (ns, name) = after.split_once('/').unwrap_or((after, ""));
                (ns, name, within)
            }
        };
        let s = self.lock();
        let mut ids = s
            .names
            .range::<str, _>((Bound::Included(after_ns), Bound::Unbounded))
            .filter(|(ns, _)| within(ns))
            .flat_map(|(ns, names)| {
                let from = match ns.as_str() == after_ns && !after_name.is_empty() {
                    true => Bound::Excluded(after_name),
                    false => Bound::Unbounded,
                };
                names.range::<str, _>((from, Bound::Unbounded)).map(|(_, id)| id)
            });
        let mut page: Vec<VolumeRecord> = Vec::new();
        let mut last = None;
        // A filter that matches few is answered in parts: the lock is held
        // for a bounded scan, and the token says where the next part starts.
        for _ in 0..PAGE_SCAN {
            let Some(r) = ids.next().and_then(|id| s.volumes.get(id)) else {
                last = None;
                break;
            };
            last = Some(r);
            if matches(r) {
                page.push(r.clone());
                if page.len() >= max.max(1) {
                    break;
                }
            }
        }
        let more = last.is_some() && ids.next().is_some();
        let next = more.then_some(last).flatten().map(|r| match pages {
            Pages::One(_) => r.spec.name.clone(),
            Pages::Every(_) => format!("{}/{}", r.spec.namespace, r.spec.name),
        });
        (page, next)
    }

    /// Picks from every record without copying the records: `pick` runs
    /// under the table's lock, so it must be quick.
    pub fn collect<T>(&self, mut pick: impl FnMut(&VolumeRecord, &mut Vec<T>)) -> Vec<T> {
        let mut out = Vec::new();
        for r in self.lock().volumes.values() {
            pick(r, &mut out);
        }
        out
    }

    /// The nodes any volume is published on (or being published on, or
    /// being undone on), from the index.
    pub fn nodes_published_on(&self) -> std::collections::BTreeSet<String> {
        let s = self.lock();
        s.published
            .values()
            .flat_map(|nodes| nodes.keys().cloned())
            .collect()
    }

    /// Volumes of `plugin` published (or being published, or being undone) on `node`.
    pub fn published_on(&self, plugin: &str, node: &str) -> u64 {
        self.lock()
            .published
            .get(plugin)
            .and_then(|nodes| nodes.get(node))
            .copied()
            .unwrap_or(0)
    }

    /// Volumes that cannot progress: why, and since when.
    pub fn waits(&self) -> &Waits {
        &self.waits
    }

    pub fn counts(&self) -> Counts {
        let s = self.lock();
        let waiting = self.waits.count() as u64;
        Counts {
            waiting,
            volumes: s.volumes.len() as u64,
            states: VolumeState::ALL
                .into_iter()
                .map(|st| (st, s.states[st.index()]))
                .filter(|(_, n)| *n > 0)
                .collect(),
            retrying: s.retrying,
            namespaces: {
                let mut all: Vec<(Namespace, Usage)> = s.usage.iter().map(|(n, u)| (n.clone(), *u)).collect();
                all.sort_by(|a, b| a.0.cmp(&b.0));
                all
            },
        }
    }

    /// Claims a CSI name for volume `id`; false when another volume has it.
    /// The claim is undone by [`VolumeTable::release_csi_name`] if the name
    /// is not recorded after all.
    pub fn claim_csi_name(&self, name: &str, id: &str) -> bool {
        let mut s = self.lock();
        match s.csi_names.get(name) {
            Some(owner) => owner == id,
            None => {
                s.csi_names.insert(name.to_string(), id.to_string());
                true
            }
        }
    }

    pub fn release_csi_name(&self, name: &str, id: &str) {
        let mut s = self.lock();
        let recorded = s.volumes.get(id).and_then(|v| v.csi_name.as_deref()) == Some(name);
        if !recorded && s.csi_names.get(name).is_some_and(|owner| owner == id) {
            s.csi_names.remove(name);
        }
    }

    /// The id of the volume a snapshot of `namespace` is of.
    pub fn snapshot_owner(&self, namespace: &Namespace, name: &str) -> Option<String> {
        self.lock().snapshots.get(&snapshot_key(namespace, name)).cloned()
    }

    /// Claims a snapshot name for volume `id`; the owner's id when another
    /// volume has it. Undone by [`VolumeTable::release_snapshot_name`] if
    /// the snapshot is not recorded after all.
    pub fn claim_snapshot_name(&self, namespace: &Namespace, name: &str, id: &str) -> Result<(), TakenBy> {
        let mut s = self.lock();
        let key = snapshot_key(namespace, name);
        match s.snapshots.get(&key) {
            Some(owner) if owner != id => Err(TakenBy(owner.clone())),
            Some(_) => Ok(()),
            None => {
                s.snapshots.insert(key, id.to_string());
                Ok(())
            }
        }
    }

    /// How many group snapshots a volume is a member of.
    pub fn grouped(&self, id: &str) -> u32 {
        self.lock().grouped.get(id).copied().unwrap_or(0)
    }

    pub fn release_snapshot_name(&self, namespace: &Namespace, name: &str, id: &str) {
        let mut s = self.lock();
        let recorded = s
            .volumes
            .get(id)
            .is_some_and(|v| v.snapshots.contains_key(name) || v.group_snapshots.contains_key(name));
        let key = snapshot_key(namespace, name);
        if !recorded && s.snapshots.get(&key).is_some_and(|owner| owner == id) {
            s.snapshots.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_model::{Publication, Retrying, VolumeSpec};
    use berth_store::RedbStore;

    fn publication() -> Publication {
        Publication::new(false)
    }

    fn record(id: &str, name: &str) -> VolumeRecord {
        VolumeRecord::new(
            id.into(),
            VolumeSpec {
                name: name.into(),
                plugin: "hp".into(),
                ..Default::default()
            },
        )
    }

    fn state_count(c: &Counts, st: VolumeState) -> u64 {
        c.states.iter().find(|(s, _)| *s == st).map_or(0, |(_, n)| *n)
    }

    fn table(dir: &tempfile::TempDir) -> VolumeTable {
        let store = RedbStore::open(&dir.path().join("s.redb")).unwrap();
        VolumeTable::load(Arc::new(store)).unwrap()
    }

    #[tokio::test]
    async fn indexes_follow_every_change_and_empty_out() {
        let dir = tempfile::tempdir().unwrap();
        let t = table(&dir);
        assert!(matches!(
            t.insert_new(record("id1", "data"), |_| true, |_| Ok(())).await,
            Ok(Inserted::New(_))
        ));
        assert_eq!(t.id_of(&"data".into()).as_deref(), Some("id1"));
        assert_eq!(state_count(&t.counts(), VolumeState::Pending), 1);
        t.modify("id1", |r| {
            r.csi_name = Some("pv-data".into());
            r.publications.insert("n1".into(), publication());
            r.retrying = Some(Box::new(Retrying {
                operation: "CreateVolume".into(),
                attempt: 1,
                first_failure_ms: 0,
                next_attempt_ms: 0,
                delay_ms: 0,
                last_error: String::new(),
                policy_failures: 0,
            }));
            Ok(())
        })
        .await
        .unwrap();
        assert!(!t.claim_csi_name("pv-data", "id2"), "the name is taken");
        assert!(t.claim_csi_name("pv-data", "id1"));
        assert_eq!(t.published_on("hp", "n1"), 1);
        let c = t.counts();
        assert_eq!(
            (
                state_count(&c, VolumeState::Pending),
                state_count(&c, VolumeState::Creating)
            ),
            (0, 1)
        );
        assert_eq!(c.retrying, 1);
        t.modify("id1", |r| {
            r.csi_name = None;
            r.publications.clear();
            r.retrying = None;
            Ok(())
        })
        .await
        .unwrap();
        assert!(
            t.claim_csi_name("pv-data", "id2"),
            "a cleared CSI name is free again"
        );
        t.release_csi_name("pv-data", "id2");
        assert_eq!(t.published_on("hp", "n1"), 0);
        t.remove("id1").await.unwrap();
        assert_eq!(t.counts(), Counts::default());
        assert!(t.by_name(&"data".into()).is_none());
    }

    #[tokio::test]
    async fn group_snapshots_count_their_members_and_take_their_name() {
        use berth_model::{GroupMember, GroupSnapshot};
        let dir = tempfile::tempdir().unwrap();
        let t = table(&dir);
        for (id, name) in [("a", "va"), ("b", "vb")] {
            t.insert_new(record(id, name), |_| true, |_| Ok(()))
                .await
                .unwrap();
        }
        let member = |id: &str| GroupMember {
            volume: id.into(),
            name: format!("v{id}"),
            volume_id: format!("hp-{id}"),
            snapshot: None,
        };
        let group = GroupSnapshot {
            csi_name: "group-1".into(),
            create_sent: false,
            members: vec![member("a"), member("b")],
            group_snapshot_id: None,
            deleting: false,
            requested_ms: 0,
        };
        t.modify("a", |r| {
            r.group_snapshots.insert("nightly".into(), group.clone());
            Ok(())
        })
        .await
        .unwrap();
        assert_eq!((t.grouped("a"), t.grouped("b")), (1, 1));
        assert_eq!(
            t.snapshot_owner(&Namespace::default(), "nightly").as_deref(),
            Some("a")
        );
        assert!(
            t.claim_snapshot_name(&Namespace::default(), "nightly", "b")
                .is_err()
        );
        // Another change to the record leaves the counts as they are.
        t.modify("a", |r| {
            r.failure = Some("x".into());
            Ok(())
        })
        .await
        .unwrap();
        assert_eq!((t.grouped("a"), t.grouped("b")), (1, 1));
        t.modify("a", |r| {
            r.group_snapshots.remove("nightly");
            Ok(())
        })
        .await
        .unwrap();
        assert_eq!((t.grouped("a"), t.grouped("b")), (0, 0));
        assert_eq!(t.snapshot_owner(&Namespace::default(), "nightly"), None);
    }

    #[tokio::test]
    async fn waits_are_counted_and_cleared() {
        let dir = tempfile::tempdir().unwrap();
        let t = table(&dir);
        t.waits().set("a", "for x".into(), 1);
        t.waits().set("a", "for x".into(), 5);
        t.waits().set("b", "for y".into(), 2);
        assert_eq!(
            t.waits().get("a").map(|w| w.since_ms),
            Some(1),
            "the same reason keeps its start"
        );
        assert_eq!(t.counts().waiting, 2);
        t.waits().clear("a");
        t.waits().clear("a");
        assert_eq!((t.counts().waiting, t.waits().get("a")), (1, None));
        t.waits().clear("b");
        assert_eq!(t.counts().waiting, 0);
    }

    #[tokio::test]
    async fn a_name_is_taken_once_and_every_change_is_durable_first() {
        let dir = tempfile::tempdir().unwrap();
        let t = table(&dir);
        t.insert_new(record("id1", "data"), |_| true, |_| Ok(()))
            .await
            .unwrap();
        let again = t
            .insert_new(record("id2", "data"), |r| r.id == "id1", |_| Ok(()))
            .await
            .unwrap();
        assert!(matches!(again, Inserted::Existing(r) if r.id == "id1"));
        let conflict = t.insert_new(record("id3", "data"), |_| false, |_| Ok(())).await;
        assert!(matches!(conflict, Err(RequestError::AlreadyExists(_))));
        let (_, r) = t
            .modify("id1", |r| {
                r.deleting = true;
                Ok(())
            })
            .await
            .unwrap();
        assert_eq!(r.generation, 1);
        let refused: Result<((), _), _> = t.modify("id1", |_| Err(RequestError::Invalid("no".into()))).await;
        assert!(refused.is_err());
        assert_eq!(t.generation("id1"), Some(1), "a refused change changes nothing");
        drop(t);
        let t = table(&dir);
        let r = t.by_name(&"data".into()).unwrap();
        assert!(r.deleting && r.generation == 1, "reloaded as written");
        assert_eq!(t.ids(), vec!["id1".to_string()]);
    }
}
