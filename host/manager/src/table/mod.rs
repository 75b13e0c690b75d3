//! The volume table: every record in memory, mirrored durably by the store,
//! with indexes kept in step on every change so no request or decision scans
//! all volumes.
//!
//! Every change goes through [`VolumeTable::modify`] (or `insert_new`,
//! `remove`): serialized per volume, written to the store, and only then
//! visible.

pub(crate) mod indexes;
pub(crate) mod records;
#[cfg(test)]
mod stored_tests;

use crate::Unready;
use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

mod changes;
mod claims;
mod first_call;
mod insert;
mod locks;
mod page;
mod reserve;
mod uncalled;
mod unsure;
mod waits;

pub use reserve::{Reservation, held};
pub use uncalled::Uncalled;
pub use waits::{Waiting, Waits};

use crate::RequestError;
use crate::quotas::Usage;
use crate::table::indexes::Indexed;
pub(crate) use crate::table::indexes::Keys;

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
use berth_store::{Loaded, Store, StoreError};

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
    /// Volumes held as the store holds them (read since the start, never
    /// changed): each is decoded when read.
    pub held_as_stored: u64,
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

/// Runs `each` on every record `table` holds decoded, under its lock;
/// returns the texts of those held as stored, as they were then.
fn each_decoded(table: &VolumeTable, mut each: impl FnMut(&VolumeRecord)) -> Vec<Arc<records::Text>> {
    let s = table.lock();
    let (decoded, stored) = s.volumes.split();
    decoded.for_each(&mut each);
    stored
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
        // Nearly every stored volume has a CSI name: grown as they came,
        // the map was rehashed whole some twenty times.
        indexed.csi_names.reserve(count);
        // Records the store can hand over as stored are indexed by their
        // keys alone and decoded when read.
        let mut room = Some(count);
        store.load_keyed(&mut |loaded| {
            // Room made once, in the map the store's records go to.
            if let Some(count) = room.take() {
                indexed
                    .volumes
                    .reserve(count, matches!(loaded, Loaded::Stored(_)));
            }
            match loaded {
                Loaded::Record(r) => indexed.insert(r),
                Loaded::Stored(v) => indexed.insert_stored(v.keys, v.text),
            }
        })?;
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
        self.lock().volumes.get(id).map(Cow::into_owned)
    }

    pub fn by_name(&self, name: &VolumeName) -> Option<VolumeRecord> {
        let s = self.lock();
        s.named(name.namespace.as_str(), &name.name)
            .and_then(|id| s.volumes.get(id))
            .map(Cow::into_owned)
    }

    pub fn id_of(&self, name: &VolumeName) -> Option<String> {
        self.lock().named(name.namespace.as_str(), &name.name).cloned()
    }

    pub fn generation(&self, id: &str) -> Option<u64> {
        self.lock().volumes.generation(id)
    }

    /// Every volume in the namespaces `within` takes (all of them with
    /// `None`), by namespace and name.
    pub fn list(&self, within: Option<&dyn Fn(&Namespace) -> bool>) -> Vec<VolumeRecord> {
        let mut v = self.collect(|r, out| {
            if within.is_none_or(|w| w(&r.spec.namespace)) {
                out.push(r.clone());
            }
        });
        v.sort_by(|a, b| (&a.spec.namespace, &a.spec.name).cmp(&(&b.spec.namespace, &b.spec.name)));
        v
    }

    /// Picks from every record without copying the records: `pick` runs
    /// under the table's lock for the records held decoded, so it must be
    /// quick; those held as stored are decoded after, the lock let go, from
    /// their texts as they were at that moment.
    pub fn collect<T>(&self, mut pick: impl FnMut(&VolumeRecord, &mut Vec<T>)) -> Vec<T> {
        let mut out = Vec::new();
        for text in each_decoded(self, |r| pick(r, &mut out)) {
            if let Some(r) = text.decode() {
                pick(&r, &mut out);
            }
        }
        out
    }

    /// As [`VolumeTable::collect`], with only what the indexes read of
    /// each record: one held as stored has its keys read, not the rest
    /// (about a third of the cost), for walks of every volume such as an
    /// agent's desired set.
    pub(crate) fn collect_keys<T>(&self, mut pick: impl FnMut(&dyn Keys, &mut Vec<T>)) -> Vec<T> {
        let mut out = Vec::new();
        for text in each_decoded(self, |r| pick(r, &mut out)) {
            if let Some(keys) = text.keys() {
                pick(&keys, &mut out);
            }
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
            held_as_stored: s.volumes.stored_len() as u64,
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
        assert!(!t.claims().claim_csi_name("pv-data", "id2"), "the name is taken");
        assert!(t.claims().claim_csi_name("pv-data", "id1"));
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
            t.claims().claim_csi_name("pv-data", "id2"),
            "a cleared CSI name is free again"
        );
        t.claims().release_csi_name("pv-data", "id2");
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
        assert_eq!((t.claims().grouped("a"), t.claims().grouped("b")), (1, 1));
        assert_eq!(
            t.claims()
                .snapshot_owner(&Namespace::default(), "nightly")
                .as_deref(),
            Some("a")
        );
        assert!(
            t.claims()
                .claim_snapshot_name(&Namespace::default(), "nightly", "b")
                .is_err()
        );
        // Another change to the record leaves the counts as they are.
        t.modify("a", |r| {
            r.failure = Some("x".into());
            Ok(())
        })
        .await
        .unwrap();
        assert_eq!((t.claims().grouped("a"), t.claims().grouped("b")), (1, 1));
        t.modify("a", |r| {
            r.group_snapshots.remove("nightly");
            Ok(())
        })
        .await
        .unwrap();
        assert_eq!((t.claims().grouped("a"), t.claims().grouped("b")), (0, 0));
        assert_eq!(t.claims().snapshot_owner(&Namespace::default(), "nightly"), None);
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
