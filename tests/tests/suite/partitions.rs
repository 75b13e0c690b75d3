//! What `cargo xtask nemesis` found under partitions and process faults,
//! each kept as a small deterministic reproduction with real processes.

use std::time::Duration;

use berth_tests::{Cluster, ClusterSpec, wait_for};
use serde_json::Value;

fn get(c: &Cluster, name: &str) -> Value {
    serde_json::from_str(&c.ok(&["volume", "get", name, "-o", "json"])).unwrap()
}

/// Lines of node `i`'s plugin log that say it `did` ("published on the
/// node", "unpublished") something to `volume_id`.
fn plugin_said(c: &Cluster, i: usize, did: &str, volume_id: &str) -> usize {
    c.nodes[i]
        .1
        .log_text()
        .lines()
        .filter(|l| l.contains(did) && l.contains(volume_id))
        .count()
}

/// The nemesis saw a single-node volume moved from node-2 to node-0 get
/// ControllerPublishVolume on node-0 while node-2 still held it: the plan
/// took publications in the order of their nodes' names. Here the plugin
/// offers no ControllerPublish, so nothing but Berth's order keeps the
/// volume on one node: the new node must wait for the old one to be
/// reachable and let go.
#[test]
fn a_single_node_volume_moved_off_an_unreachable_node_waits_for_it_to_let_go() {
    let mut c = Cluster::start(ClusterSpec {
        nodes: vec![("node-a", "a"), ("node-b", "a")],
        agents: true,
        controller_topology: None,
        plugin_args: vec!["--publish-unpublish", "false"],
        ..ClusterSpec::default()
    });
    c.ok(&[
        "volume", "create", "moved", "--plugin", "hostpath", "--size", "1Mi",
    ]);
    c.ok(&["volume", "publish", "moved", "--node", "node-b"]);
    wait_for(
        "the volume published on node-b",
        Duration::from_secs(20),
        || get(&c, "moved")["state"] == "published",
        || get(&c, "moved").to_string(),
    );
    let id = get(&c, "moved")["volume_id"].as_str().unwrap().to_string();

    // node-b out of reach; the volume is moved to node-a (which sorts first).
    c.agent("node-b").freeze();
    c.wait_nodes(&["node-b"], "down", Duration::from_secs(10));
    c.ok(&["volume", "unpublish", "moved", "--node", "node-b"]);
    c.ok(&["volume", "publish", "moved", "--node", "node-a"]);
    wait_for(
        "the move to say it waits for node-b",
        Duration::from_secs(10),
        || {
            get(&c, "moved")
                .to_string()
                .contains("node-b\\\", whose agent is")
        },
        || get(&c, "moved").to_string(),
    );
    assert_eq!(
        plugin_said(&c, 0, "published on the node", &id),
        0,
        "node-a published the volume while node-b still held it: {}",
        get(&c, "moved")
    );

    c.agent("node-b").thaw();
    wait_for(
        "the volume published on node-a once node-b let go",
        Duration::from_secs(30),
        || {
            let v = get(&c, "moved");
            v["state"] == "published" && v["publications"].as_array().is_some_and(|p| p.len() == 1)
        },
        || format!("{}\n{}", get(&c, "moved"), c.log()),
    );
    assert_eq!(get(&c, "moved")["publications"][0]["node"], "node-a");
    assert_eq!(plugin_said(&c, 0, "published on the node", &id), 1);
}

/// The nemesis saw a create acknowledged for a volume that never existed: a
/// leader cut from etcd reserved the name in memory, its write hung, the
/// client asked again, and the repeat was answered OK from the reservation;
/// the write was then refused (a newer leader had taken over). Here etcd
/// answers nothing (stopped) while the first create waits on its write: the
/// repeat must not be answered until that write is done.
#[test]
fn a_repeated_create_is_not_answered_before_the_first_one_is_written() {
    use berth_proto::berth::v1 as api;
    let etcd = berth_tests::EtcdCluster::start(1);
    let c = Cluster::start(ClusterSpec {
        guests: false,
        store: Some(etcd.store_config("/berth-repeat")),
        ..ClusterSpec::default()
    });
    let create = |timeout: Duration| {
        berth_tests::block_on(async {
            let mut client = c.client();
            let spec = api::VolumeSpec {
                name: "repeated".into(),
                plugin: "hostpath".into(),
                required_bytes: 1 << 20,
                ..Default::default()
            };
            let request = api::CreateVolumeRequest { spec: Some(spec) };
            tokio::time::timeout(timeout, client.create_volume(request)).await
        })
    };
    // Leading: a volume is made.
    c.ok(&[
        "volume", "create", "first", "--plugin", "hostpath", "--size", "1Mi",
    ]);
    etcd.freeze(0, true);
    std::thread::scope(|s| {
        let first = s.spawn(|| create(Duration::from_secs(60)));
        // The first has reserved the name once the API shows the volume.
        wait_for(
            "the first create to reserve the name",
            Duration::from_secs(10),
            || c.berth(&["volume", "get", "repeated"]).status.success(),
            || c.log(),
        );
        let repeat = create(Duration::from_secs(2));
        assert!(
            repeat.is_err(),
            "the repeat was answered while the first create's write had not been made: {repeat:?}"
        );
        etcd.freeze(0, false);
        let first = first
            .join()
            .unwrap()
            .expect("the first create answers once etcd is back");
        assert!(first.is_ok(), "{first:?}");
    });
    // Now written: the repeat is answered, from what the store holds.
    assert!(matches!(create(Duration::from_secs(10)), Ok(Ok(_))));
}

/// The nemesis saw a leader cut from the etcd majority lead on for 5 s on a
/// 3 s lease: its election loop sat in an etcd call that answers only at its
/// own deadline, so the check of the lease at the top of the loop came too
/// late. A leader steps down by its own clock when the lease may have run
/// out, whatever it is waiting on: here etcd answers nothing (stopped), the
/// lease is 2 s, and an etcd call's deadline is 5 s.
#[test]
fn a_leader_whose_etcd_stops_answering_steps_down_when_its_lease_may_have_run_out() {
    let etcd = berth_tests::EtcdCluster::start(1);
    let c = Cluster::start(ClusterSpec {
        guests: false,
        store: Some(etcd.store_config("/berth-lease") + "lease_ttl = \"2s\"\n"),
        ..ClusterSpec::default()
    });
    c.ok(&["volume", "create", "led", "--plugin", "hostpath", "--size", "1Mi"]);
    assert!(!c.log().contains("stepping down"), "{}", c.log());
    etcd.freeze(0, true);
    let frozen = std::time::Instant::now();
    wait_for(
        "the leader to step down",
        Duration::from_secs(20),
        || c.log().contains("stepping down"),
        || c.log(),
    );
    let after = frozen.elapsed();
    etcd.freeze(0, false);
    // The lease was renewed at most 2 s before etcd stopped; its third of a
    // second's worth of polling and the log's reading are the margin.
    assert!(
        after < Duration::from_millis(3500),
        "stepped down {after:?} after etcd stopped answering, on a 2 s lease:\n{}",
        c.log()
    );
}

/// The nemesis saw a single-node volume published on node-1, its agent
/// killed just after, and the volume then published on node-2 with no
/// NodeUnpublishVolume on node-1: the restarted agent did not see the mount
/// (the plugin made it in a mount namespace of its own), lowered its record
/// and told the server the node held nothing, and the move went on. Here
/// the paths are emptied while the agent is down, the plugin still holding
/// the volume: the agent must have the plugin let go before it says so.
#[test]
fn a_volume_the_node_does_not_show_is_let_go_by_its_plugin_before_it_moves() {
    moved_while_node_a_is_away(false);
}

/// As above, with node-a's plugin down when its agent starts: nothing can
/// confirm the volume let go, so the agent keeps it as recorded (the move
/// waits) and asks again until the plugin answers, then registers anew.
#[test]
fn a_volume_the_node_does_not_show_waits_for_its_plugin_to_answer_before_it_moves() {
    moved_while_node_a_is_away(true);
}

fn moved_while_node_a_is_away(plugin_down: bool) {
    use berth_tests::nemesis::check;
    let journal_dir = berth_tests::test_dir();
    let journal = journal_dir.path().join("journal.jsonl");
    let journal_arg = journal.display().to_string();
    let mut c = Cluster::start(ClusterSpec {
        nodes: vec![("node-a", "a"), ("node-b", "a")],
        agents: true,
        controller_topology: None,
        plugin_args: vec!["--publish-unpublish", "false", "--journal", &journal_arg],
        ..ClusterSpec::default()
    });
    c.ok(&[
        "volume", "create", "moved", "--plugin", "hostpath", "--size", "1Mi",
    ]);
    c.ok(&["volume", "publish", "moved", "--node", "node-a", "--wait"]);
    let v = get(&c, "moved");
    let (id, volume_id) = (v["id"].as_str().unwrap(), v["volume_id"].as_str().unwrap());

    c.agent("node-a").kill();
    if plugin_down {
        c.nodes[0].1.kill();
    }
    // The node shows nothing of the volume; its plugin still holds it.
    let node_dir = c.volumes_dir.join("nodes/node-a");
    for path in [
        node_dir.join("publish").join(id),
        node_dir.join("staging").join(id),
    ] {
        std::fs::remove_file(&path)
            .or_else(|_| std::fs::remove_dir_all(&path))
            .unwrap_or_else(|e| panic!("removing {}: {e}", path.display()));
    }
    c.ok(&["volume", "unpublish", "moved", "--node", "node-a"]);
    c.ok(&["volume", "publish", "moved", "--node", "node-b"]);
    c.agent("node-a").start();
    let published_on_b = |journal: &[Value]| {
        journal
            .iter()
            .any(|e| e["call"] == "NodePublishVolume" && e["node"] == "node-b")
    };
    if plugin_down {
        wait_for(
            "node-a's agent to keep the volume it cannot confirm let go",
            Duration::from_secs(20),
            || c.agents[0].log_text().contains("kept as recorded"),
            || c.agents[0].log_text(),
        );
        c.wait_nodes(&["node-a"], "ready", Duration::from_secs(20));
        assert!(
            !published_on_b(&check::journal(&journal)),
            "node-b published the volume while node-a's plugin could not say it let go"
        );
        c.nodes[0].1.restart();
    }
    wait_for(
        "the volume published on node-b",
        Duration::from_secs(30),
        || {
            let v = get(&c, "moved");
            v["state"] == "published" && v["publications"].as_array().is_some_and(|p| p.len() == 1)
        },
        || format!("{}\n{}", get(&c, "moved"), c.log()),
    );
    assert_eq!(get(&c, "moved")["publications"][0]["node"], "node-b");
    let journal = check::journal(&journal);
    assert!(published_on_b(&journal));
    let violations = check::single_node(&journal);
    assert!(
        violations.is_empty(),
        "published on node-b while node-a's plugin still held it: {violations:?}"
    );
    let let_go = journal
        .iter()
        .filter(|e| e["call"] == "NodeUnpublishVolume" && e["node"] == "node-a" && e["volume"] == volume_id)
        .count();
    assert_eq!(let_go, 1, "node-a's plugin let go");
    if plugin_down {
        let log = c.agents[0].log_text();
        assert!(log.contains("registering again"), "{log}");
    }
}
