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
