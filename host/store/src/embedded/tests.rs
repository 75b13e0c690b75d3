//! The embedded store's tests, on real redb files.

use std::sync::Arc;

use redb::ReadableTableMetadata;

use super::*;
use berth_model::{VolumeSpec, new_id};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_survive_reopening_and_batches_commit_together() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.redb");
    let ids: Vec<String> = (0..50).map(|_| new_id()).collect();
    {
        let store = Arc::new(RedbStore::open(&path).unwrap());
        let writes = ids.iter().map(|id| {
            let store = store.clone();
            let mut r = VolumeRecord::new(id.clone(), VolumeSpec::default());
            r.csi_name = Some(format!("name-{id}"));
            tokio::spawn(async move { store.put(&r).await })
        });
        for w in writes {
            w.await.unwrap().unwrap();
        }
        store.remove(&ids[0]).await.unwrap();
    }
    let store = RedbStore::open(&path).unwrap();
    let loaded = store.load().unwrap();
    assert_eq!(loaded.len(), 49);
    assert!(
        loaded
            .iter()
            .all(|r| r.csi_name.as_deref() == Some(&format!("name-{}", r.id)))
    );
    drop(store);
    assert_eq!(RedbStore::recorded_schema(&path).unwrap(), Some(SCHEMA_VERSION));
}

#[tokio::test]
async fn nodes_are_remembered_and_removed_and_a_store_without_them_has_none() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.redb");
    let store = RedbStore::open(&path).unwrap();
    assert!(store.load_nodes().unwrap().is_empty(), "no nodes table yet");
    let node = NodeRecord {
        name: "node-a".into(),
        labels: [("zone".to_string(), "a".to_string())].into(),
        plugins: [("hostpath".to_string(), None)].into(),
        draining: true,
        forgotten: false,
        cert: None,
        paths: Some(berth_model::Paths::under(Path::new("/var/lib/berth/node"))),
    };
    store.put_node(&node).await.unwrap();
    drop(store);
    let store = RedbStore::open(&path).unwrap();
    assert_eq!(store.load_nodes().unwrap(), vec![node]);
    store.remove_node("node-a").await.unwrap();
    store.remove_node("node-a").await.unwrap();
    assert!(store.load_nodes().unwrap().is_empty());
    // The first form written, with only a name, still reads.
    let old: NodeRecord = serde_json::from_str(r#"{"name":"n"}"#).unwrap();
    assert!(!old.draining && !old.forgotten && old.plugins.is_empty());
    // As written before nodes kept their paths: none until the agent registers.
    let old: NodeRecord = serde_json::from_str(
        r#"{"name":"n","labels":{},"plugins":{"hostpath":null},"draining":false,"forgotten":false,"cert":"ab"}"#,
    )
    .unwrap();
    assert_eq!((old.paths, old.cert.as_deref()), (None, Some("ab")));
}

#[test]
fn a_new_store_is_for_its_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state/deeper/state.redb");
    drop(RedbStore::open(&path).unwrap());
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(path.parent().unwrap()), 0o700);
    assert_eq!(mode(&dir.path().join("state")), 0o700);
}

#[test]
fn a_store_from_a_newer_release_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.redb");
    RedbStore::open(&path)
        .unwrap()
        .set_schema_version(SCHEMA_VERSION + 1);
    let before = std::fs::read(&path).unwrap();
    let err = RedbStore::open(&path).err().expect("a newer schema is refused");
    let text = err.to_string();
    assert!(
        matches!(err, StoreError::NewerSchema { found, .. } if found == SCHEMA_VERSION + 1),
        "{text}"
    );
    assert!(
        text.contains("newer release") && text.contains("not changed"),
        "{text}"
    );
    assert!(
        std::fs::read(&path).unwrap() == before,
        "the file is not rewritten"
    );
}

fn logged(kind: &str, from: usize, n: usize) -> crate::LoggedBatch {
    crate::LoggedBatch {
        kind: kind.into(),
        entries: (from..from + n)
            .map(|i| (format!("{i:06}"), i.to_string().into_bytes()))
            .collect(),
    }
}

async fn logged_keys(store: &RedbStore, kind: &str) -> Vec<String> {
    let page = store.read_decisions(kind, "", 100).await.unwrap();
    page.into_iter().map(|(key, _)| key).collect()
}

#[tokio::test]
async fn the_decision_ring_keeps_the_newest_across_batches_kinds_and_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.redb");
    let keys = |r: std::ops::Range<usize>| r.map(|i| format!("{i:06}")).collect::<Vec<_>>();
    {
        let store = RedbStore::open(&path).unwrap();
        for round in 0..3 {
            let batches = vec![logged("naming", round * 4, 4), logged("placement", round * 2, 2)];
            store.append_decisions(batches, 5).await.unwrap();
        }
        assert_eq!(logged_keys(&store, "naming").await, keys(7..12));
        assert_eq!(logged_keys(&store, "placement").await, keys(1..6));
        // Larger than the ring: only its newest are stored.
        store
            .append_decisions(vec![logged("naming", 20, 8)], 5)
            .await
            .unwrap();
        assert_eq!(logged_keys(&store, "naming").await, keys(23..28));
    }
    // Opened again, the ring is read from the file.
    let store = RedbStore::open(&path).unwrap();
    store
        .append_decisions(vec![logged("placement", 6, 3)], 5)
        .await
        .unwrap();
    assert_eq!(logged_keys(&store, "placement").await, keys(4..9));
    store
        .append_decisions(vec![logged("placement", 9, 1)], 3)
        .await
        .unwrap();
    assert_eq!(
        logged_keys(&store, "placement").await,
        keys(7..10),
        "a smaller ring trims to it"
    );
}

#[tokio::test]
async fn a_batch_of_decisions_is_one_write_and_pages_run_across_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let store = RedbStore::open(&dir.path().join("state.redb")).unwrap();
    for round in 0..4 {
        store
            .append_decisions(vec![logged("naming", round * 100, 100)], 1000)
            .await
            .unwrap();
    }
    let keys = |page: &[(String, Vec<u8>)]| page.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
    let first = store.read_decisions("naming", "", 150).await.unwrap();
    assert_eq!(
        keys(&first),
        (0..150).map(|i| format!("{i:06}")).collect::<Vec<_>>()
    );
    assert_eq!(first[7].1, b"7", "each entry's own JSON");
    let next = store.read_decisions("naming", "000149", 1000).await.unwrap();
    assert_eq!(
        keys(&next),
        (150..400).map(|i| format!("{i:06}")).collect::<Vec<_>>()
    );
    let held = store
        .committer
        .read_async(|db| {
            let txn = db.begin_read().map_err(failed)?;
            txn.open_table(DECISIONS).map_err(failed)?.len().map_err(failed)
        })
        .await
        .unwrap();
    assert_eq!(held, 4, "a key a batch, not a key an entry");
}

#[tokio::test]
async fn decisions_an_older_release_stored_one_a_key_read_and_are_trimmed() {
    let dir = tempfile::tempdir().unwrap();
    let store = RedbStore::open(&dir.path().join("state.redb")).unwrap();
    // As releases before chunks stored them: the entry's key, its JSON.
    let old = (0..4)
        .map(|i| {
            Change::Put(
                DECISIONS,
                format!("naming/{i:06}"),
                format!("{{\"n\":{i}}}").into_bytes(),
            )
        })
        .collect();
    store.committer.write_all(old).await.unwrap();
    let page = store.read_decisions("naming", "000001", 10).await.unwrap();
    assert_eq!(page[0], ("000002".to_string(), br#"{"n":2}"#.to_vec()));
    store
        .append_decisions(vec![logged("naming", 4, 2)], 3)
        .await
        .unwrap();
    assert_eq!(
        logged_keys(&store, "naming").await,
        ["000003", "000004", "000005"],
        "the oldest single entries went first"
    );
}
