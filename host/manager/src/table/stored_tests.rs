//! The table loaded from the embedded store: records held as stored, read
//! and changed as if decoded at the start.

use super::*;
use berth_model::{Backend, NodeLevel, Publication, Snapshot, VecMap, VolumeSpec};
use berth_store::RedbStore;

fn open(dir: &tempfile::TempDir) -> (Arc<RedbStore>, VolumeTable) {
    let store = Arc::new(RedbStore::open(&dir.path().join("s.redb")).unwrap());
    let table = VolumeTable::load(store.clone()).unwrap();
    (store, table)
}

/// Volumes in several states, namespaces and with snapshots.
fn records() -> Vec<VolumeRecord> {
    (0..12)
        .map(|i| {
            let spec = VolumeSpec {
                name: format!("v{i}"),
                namespace: Namespace::parse(if i % 3 == 0 { "team-a" } else { "default" }).unwrap(),
                plugin: "hp".into(),
                required_bytes: 1 << 20,
                ..Default::default()
            };
            let mut r = VolumeRecord::new(format!("{i:032x}"), spec);
            if i % 2 == 0 {
                r.csi_name = Some(format!("pv-{i}"));
            }
            if i % 4 == 0 {
                r.backend = Some(Arc::new(Backend {
                    volume_id: format!("hp-{i}"),
                    capacity_bytes: 1 << 20,
                    sized_for: None,
                    context: VecMap::new(),
                    accessible_topology: Vec::new(),
                    node_expansion_required: false,
                    mutable_parameters: VecMap::new(),
                }));
                let mut p = Publication::new(false);
                p.node = NodeLevel::Published;
                p.controller_published = true;
                r.publications.insert("n1".into(), p);
            }
            if i == 4 {
                r.snapshots.insert(
                    "nightly".into(),
                    Snapshot {
                        csi_name: "snap-4".into(),
                        create_sent: false,
                        backend: None,
                        deleting: false,
                        requested_ms: 1,
                    },
                );
            }
            r
        })
        .collect()
}

fn all_pages(t: &VolumeTable, matches: &dyn Fn(&VolumeRecord) -> bool) -> Vec<VolumeRecord> {
    let every = |_: &Namespace| true;
    let (mut after, mut out) = (String::new(), Vec::new());
    loop {
        let (page, next) = t.page(Pages::Every(&every), &after, 2, matches);
        out.extend(page);
        match next {
            Some(n) => after = n,
            None => return out,
        }
    }
}

#[tokio::test]
async fn a_loaded_table_reads_stored_records_as_written_and_changes_them_in_step() {
    let dir = tempfile::tempdir().unwrap();
    let written = {
        let (_, t) = open(&dir);
        for r in records() {
            t.insert_new(r, |_| false, |_| Ok(())).await.unwrap();
        }
        // Held decoded as they were made: what a load must answer alike.
        let mut all = t.list(None);
        all.iter_mut().for_each(|r| r.generation = 0);
        (all, t.counts(), t.published_on("hp", "n1"))
    };
    let (_, t) = open(&dir);
    let counts = t.counts();
    assert_eq!(counts.held_as_stored, 12, "nothing decoded at the load");
    assert_eq!(
        Counts {
            held_as_stored: 0,
            ..counts.clone()
        },
        written.1
    );
    assert_eq!(t.published_on("hp", "n1"), written.2);
    let mut listed = t.list(None);
    listed.iter_mut().for_each(|r| r.generation = 0);
    assert_eq!(listed, written.0);
    let names = |rs: Vec<VolumeRecord>| rs.into_iter().map(|r| r.spec.name.clone()).collect::<Vec<_>>();
    let in_order: Vec<String> = listed.iter().map(|r| r.spec.name.clone()).collect();
    assert_eq!(
        names(all_pages(&t, &|_| true)),
        in_order,
        "pages of two, in order"
    );
    assert_eq!(
        names(all_pages(&t, &|r| r.spec.name.ends_with('1'))),
        ["v1", "v11"],
        "a filter over records held as stored, in parts"
    );
    assert_eq!(t.by_name(&"v5".into()).map(|r| r.id), Some(format!("{:032x}", 5)));
    assert!(
        !t.claims().claim_csi_name("pv-2", "someone-else"),
        "a stored record's CSI name is taken"
    );
    assert!(
        t.claims()
            .claim_snapshot_name(&Namespace::default(), "nightly", "someone-else")
            .is_err(),
        "and its snapshot's name"
    );
    assert_eq!(t.counts().held_as_stored, 12, "reading decodes without keeping");

    // A change holds the record decoded and moves it between the counts.
    let id4 = format!("{:032x}", 4);
    t.modify(&id4, |r| {
        r.publications.clear();
        r.snapshots.clear();
        Ok(())
    })
    .await
    .unwrap();
    let after = t.counts();
    assert_eq!(after.held_as_stored, 11);
    assert_eq!(t.published_on("hp", "n1"), written.2 - 1);
    assert!(
        t.claims()
            .claim_snapshot_name(&Namespace::default(), "nightly", "someone-else")
            .is_ok(),
        "the snapshot's name went with it"
    );
    // Removed while stored: out of every index.
    let id2 = format!("{:032x}", 2);
    t.remove(&id2).await.unwrap();
    assert_eq!(t.id_of(&"v2".into()), None);
    assert!(t.claims().claim_csi_name("pv-2", "someone-else"));
    t.claims().release_csi_name("pv-2", "someone-else");

    // What the indexes say is what a new load of the same store says.
    let expected = Counts {
        held_as_stored: 0,
        ..t.counts()
    };
    drop(t);
    let (_, t) = open(&dir);
    assert_eq!(
        Counts {
            held_as_stored: 0,
            ..t.counts()
        },
        expected
    );
    assert_eq!(t.counts().held_as_stored, 11);
}

#[tokio::test]
async fn a_stored_record_that_does_not_decode_reads_as_none_and_keeps_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let id = format!("{:032x}", 7);
    {
        let (_, t) = open(&dir);
        for r in records() {
            t.insert_new(r, |_| false, |_| Ok(())).await.unwrap();
        }
    }
    // Its keys read, the rest does not: an explanation of the wrong shape.
    {
        let store = RedbStore::open(&dir.path().join("s.redb")).unwrap();
        let (_, r) = {
            let t = VolumeTable::load(Arc::new(store)).unwrap();
            ((), t.by_id(&id).unwrap())
        };
        let mut text: serde_json::Value = serde_json::to_value(&r).unwrap();
        text["explanation"] = serde_json::json!("not an explanation");
        let bytes = serde_json::to_vec(&text).unwrap();
        let store = RedbStore::open(&dir.path().join("s.redb")).unwrap();
        let key = id.clone();
        store
            .committer()
            .read(move |db| {
                let txn = db.begin_write().unwrap();
                txn.open_table(redb::TableDefinition::<&str, &[u8]>::new("volumes"))
                    .unwrap()
                    .insert(key.as_str(), bytes.as_slice())
                    .unwrap();
                txn.commit().unwrap();
                Ok(())
            })
            .unwrap();
    }
    let (_, t) = open(&dir);
    assert_eq!(t.counts().volumes, 12, "the load indexes it");
    assert_eq!(t.by_id(&id), None);
    assert_eq!(t.id_of(&"v7".into()), Some(id.clone()));
    let again = VolumeRecord::new(
        "another".into(),
        VolumeSpec {
            name: "v7".into(),
            plugin: "hp".into(),
            ..Default::default()
        },
    );
    let taken = t.insert_new(again, |_| true, |_| Ok(())).await;
    assert!(
        matches!(taken, Err(RequestError::AlreadyExists(_))),
        "its name stays taken: {:?}",
        taken.err()
    );
    assert_eq!(t.list(None).len(), 11, "a list leaves it out");
}
