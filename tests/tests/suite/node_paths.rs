//! A node that lost its mounts while `berth serve` was down (a reboot, an
//! operator's umount): on start, the node's agent checks what it holds against its
//! mount table; Berth publishes the lost ones again and leaves intact ones alone.

use std::path::Path;
use std::time::{Duration, Instant};

use berth_tests::{Cluster, ClusterSpec};
use serde_json::Value;

fn get(c: &Cluster, name: &str) -> Value {
    serde_json::from_str(&c.ok(&["volume", "get", name, "-o", "json"])).unwrap()
}

/// How many times the node plugin did `what` ("staged", "published") for a volume.
fn calls(c: &Cluster, what: &str, volume_id: &str) -> usize {
    let needle = format!("{what} on the node");
    c.nodes[0]
        .1
        .log_text()
        .lines()
        .filter(|l| l.contains(&needle) && l.contains(volume_id))
        .count()
}

fn remove_path(p: &Path) {
    std::fs::remove_file(p)
        .or_else(|_| std::fs::remove_dir_all(p))
        .unwrap_or_else(|e| panic!("removing {}: {e}", p.display()));
}

#[test]
fn lost_mounts_are_published_again_and_intact_ones_are_left_alone() {
    let mut c = Cluster::start(ClusterSpec::default());
    let mut ids = Vec::new();
    for name in ["kept", "lost"] {
        c.create_in(name, "zone=a");
        c.ok(&["volume", "publish", name, "--node", "node-a", "--wait"]);
        let v = get(&c, name);
        let (id, volume_id) = (v["id"].as_str().unwrap(), v["volume_id"].as_str().unwrap());
        ids.push((id.to_string(), volume_id.to_string()));
        assert_eq!(calls(&c, "published", volume_id), 1);
    }
    let [(_, kept), (lost_id, lost)] = &ids[..] else {
        unreachable!()
    };

    c.kill_serve();
    // The node forgets one volume's mounts, as a reboot would.
    let node_dir = c.volumes_dir.join("nodes/node-a");
    remove_path(&node_dir.join("publish").join(lost_id));
    remove_path(&node_dir.join("staging").join(lost_id));
    c.start_serve();

    let started = Instant::now();
    while calls(&c, "published", lost) < 2 || get(&c, "lost")["state"] != "published" {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "never published again: {}\n{}",
            get(&c, "lost"),
            c.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(calls(&c, "staged", lost), 2, "staged again before publishing");
    assert!(
        std::fs::metadata(node_dir.join("publish").join(lost_id)).is_ok(),
        "the target path shows the volume again"
    );
    assert!(
        c.log()
            .contains("the node no longer holds the volume as recorded"),
        "{}",
        c.log()
    );
    // The intact publication got no second call.
    assert_eq!(calls(&c, "staged", kept), 1);
    assert_eq!(calls(&c, "published", kept), 1);
    assert_eq!(get(&c, "kept")["state"], "published");
}

/// The publish directory is the CO's to make (CSI: the target's parent), and
/// the agent makes it again when someone removed it between two publishes.
#[test]
fn a_removed_publish_directory_is_made_again() {
    let c = Cluster::start(ClusterSpec::default());
    c.create_in("v", "zone=a");
    c.ok(&["volume", "publish", "v", "--node", "node-a", "--wait"]);
    c.ok(&["volume", "unpublish", "v", "--node", "node-a", "--wait"]);
    let publish_dir = c.volumes_dir.join("nodes/node-a/publish");
    remove_path(&publish_dir);

    c.ok(&["volume", "publish", "v", "--node", "node-a", "--wait"]);
    let v = get(&c, "v");
    assert_eq!(v["state"], "published", "{v:#}");
    let id = v["id"].as_str().unwrap();
    assert!(publish_dir.join(id).exists(), "the target path is there again");
    let volume_id = v["volume_id"].as_str().unwrap();
    assert_eq!(calls(&c, "published", volume_id), 2);
}

/// An in-process node's record as an earlier release kept it, in
/// `agent.redb` in the node's directory, is moved into the store on start:
/// the node holds the same volumes, publishes nothing again, and a record
/// the store no longer has for it is not taken for "the node holds nothing".
#[test]
fn a_node_record_file_of_before_is_moved_into_the_store() {
    use berth::agent::record::{NodeRecord, RecordPlace};

    let mut c = Cluster::start(ClusterSpec::default());
    c.create_in("v", "zone=a");
    c.ok(&["volume", "publish", "v", "--node", "node-a", "--wait"]);
    let v = get(&c, "v");
    let (id, volume_id) = (v["id"].as_str().unwrap(), v["volume_id"].as_str().unwrap());
    c.kill_serve();

    // Back to what an earlier release left: the node's record in a file of
    // its own, none in the store.
    let node_dir = c.volumes_dir.join("nodes/node-a");
    let file = node_dir.join("agent.redb");
    assert!(!file.exists(), "this release keeps the record in the store");
    berth_tests::block_on(async {
        let store = berth::store::RedbStore::open(&c.store_path()).unwrap();
        let place = RecordPlace::Store {
            committer: store.committer(),
            store: c.store_path(),
            node: "node-a".into(),
            file: file.clone(),
        };
        let (in_store, new) = NodeRecord::open_at(&place).await.unwrap();
        assert!(!new, "the store held the node's record");
        let held = in_store.load().await.unwrap();
        let old = NodeRecord::open(&file).unwrap();
        for (id, h) in &held {
            old.put(id, h).await.unwrap();
            let gone = berth::agent::record::Held {
                level: berth::model::NodeLevel::Absent,
                ..h.clone()
            };
            in_store.put(id, &gone).await.unwrap();
        }
        assert!(held.contains_key(id), "{held:?}");
    });

    c.start_serve();
    // The API answers once the in-process node is connected: its record opened.
    berth_tests::wait_for(
        "the API",
        Duration::from_secs(30),
        || c.summary().is_some(),
        || c.log(),
    );
    assert!(!file.exists(), "the file is gone once moved");
    assert!(
        c.log().contains("the node record was moved into the store"),
        "{}",
        c.log()
    );
    assert_eq!(get(&c, "v")["state"], "published");
    // The record named the mounts: nothing was refused, nothing done again.
    assert_eq!(calls(&c, "staged", volume_id), 1);
    assert_eq!(calls(&c, "published", volume_id), 1);
    // And a record moved in is kept: unpublishing works from it.
    c.ok(&["volume", "unpublish", "v", "--node", "node-a", "--wait"]);
    assert!(!node_dir.join("publish").join(id).exists());
}
