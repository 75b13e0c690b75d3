//! Disks that fail under a running Berth, made by a FUSE filesystem of the
//! tests' own (`berth_tests::faultfs`) mounted under the store: fsyncs that
//! fail, writes that fail, a disk full, a disk gone read-only. Nothing is
//! acknowledged that is not kept, reads keep working, writes come back by
//! themselves when the disk does, and `berth store check` finds the store
//! sound afterwards. Root only (it mounts).

use std::time::Duration;

use berth_tests::faultfs::{DiskFault, FaultDisk};
use berth_tests::scrape::wait_ready;
use berth_tests::{Cluster, ClusterSpec, create_args, texts};
use serde_json::Value;

/// The server of `c` restarted on a faulty disk mounted under its state
/// directory (store, sockets and all); `None` when not root.
fn on_faulty_disk(c: &mut Cluster, metrics: u16) -> Option<FaultDisk> {
    c.kill_serve();
    let state = c.store_path().parent().unwrap().to_path_buf();
    let disk = FaultDisk::over(&state)?;
    c.start_serve();
    wait_ready(metrics, 200, Duration::from_secs(20));
    Some(disk)
}

#[test]
fn a_failing_disk_under_the_store_acknowledges_nothing_it_did_not_keep() {
    let (mut c, port) = Cluster::builtin_with_metrics();
    c.create_in("before", "zone=a");
    let Some(disk) = on_faulty_disk(&mut c, port) else {
        eprintln!("skipped: mounting a FUSE filesystem needs root");
        return;
    };
    let store = c.store_path().display().to_string();
    let mut acknowledged = vec!["before".to_string()];
    for (fault, said) in [
        (DiskFault::FailFsync, "Input/output error"),
        (DiskFault::FailWrites, "Input/output error"),
        (DiskFault::Full, "No space left on device"),
        (DiskFault::ReadOnly, "Read-only file system"),
    ] {
        disk.set(fault);
        let refused_before = disk.refused();
        let name = format!("during-{fault:?}").to_lowercase();
        let out = c.berth(&create_args(&name, "zone=a"));
        let (stdout, stderr) = texts(&out);
        assert!(
            !out.status.success(),
            "{fault:?}: a create was acknowledged: {stdout}"
        );
        assert!(
            disk.refused() > refused_before,
            "{fault:?}: the disk refused nothing"
        );
        // The error names the store's file and what its disk said.
        assert!(
            stderr.contains("UNAVAILABLE") && stderr.contains(&store) && stderr.contains(said),
            "{fault:?}: {stderr}"
        );
        let not_ready = wait_ready(port, 503, Duration::from_secs(20));
        assert!(not_ready.contains("[-]store"), "{fault:?}: {not_ready}");
        // Reads go on.
        let listed = c.volume_names();
        assert!(
            acknowledged.iter().all(|n| listed.contains(n)),
            "{fault:?}: {listed:?}"
        );

        // The disk back: writes come back by themselves.
        disk.set(DiskFault::None);
        wait_ready(port, 200, Duration::from_secs(20));
        let after = format!("after-{fault:?}").to_lowercase();
        c.create_in(&after, "zone=a");
        acknowledged.push(after);
    }

    // A crash, then the store as the next start reads it: everything
    // acknowledged is there, and the store's own check finds it sound.
    c.kill_serve();
    let check = c.berth(&["store", "check", "--file", &store, "-o", "json"]);
    let (stdout, stderr) = texts(&check);
    assert!(check.status.success(), "{stdout}{stderr}");
    let found: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(found["unreadable"], serde_json::json!([]), "{found}");
    assert!(
        found["volumes"].as_u64().unwrap() >= acknowledged.len() as u64,
        "{found}"
    );
    c.start_serve();
    let listed = c.volume_names();
    for name in &acknowledged {
        assert!(listed.contains(name), "{name} was acknowledged: {listed:?}");
    }
    c.kill_serve();
    drop(disk);
}

#[test]
fn the_store_check_says_whether_a_store_is_sound() {
    let mut c = Cluster::start(ClusterSpec::builtin());
    c.create_in("kept", "zone=a");
    let store = c.store_path().display().to_string();
    // While the server holds it, the check says so and touches nothing.
    let out = c.berth(&["store", "check", "--file", &store]);
    let (_, stderr) = texts(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("a running berth serve holds it"), "{stderr}");
    c.kill_serve();
    let config = c.config.display().to_string();
    let text = c.ok(&["store", "check", "--config", &config]);
    assert!(text.contains("sound") && text.contains("1 volumes"), "{text}");
    // A record that no longer reads is named, and the check fails.
    {
        let db = redb::Database::open(c.store_path()).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut nodes = txn
                .open_table(redb::TableDefinition::<&str, &[u8]>::new("nodes"))
                .unwrap();
            nodes.insert("node-z", b"{not json".as_slice()).unwrap();
        }
        txn.commit().unwrap();
    }
    let out = c.berth(&["store", "check", "--config", &config]);
    let (stdout, _) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("unreadable") && stdout.contains("node node-z"),
        "{stdout}"
    );
}

/// The attempt a volume's retry is at (0 when none is).
fn attempt(v: &Value) -> u32 {
    let retrying = v["retrying"].as_str().unwrap_or("");
    retrying
        .split_once("(attempt ")
        .and_then(|(_, rest)| rest.split_once(')'))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or(0)
}

fn state_of(c: &Cluster, name: &str) -> Value {
    serde_json::from_str(&c.ok(&["volume", "get", name, "-o", "json"])).unwrap()
}

/// An agent whose own record cannot be written does not report a step done
/// (the server is told why, naming the record's file, and asks again); once
/// the disk is back the publish completes, and a restarted agent finds it
/// recorded (no second NodePublishVolume).
#[test]
fn an_agent_whose_record_fails_reports_no_step_done_until_it_is_kept() {
    let mut c = Cluster::start(ClusterSpec {
        nodes: vec![("node-a", "a")],
        agents: true,
        ..ClusterSpec::builtin()
    });
    let node_dir = c.volumes_dir.join("nodes/node-a");
    c.agents[0].kill();
    let Some(disk) = FaultDisk::over(&node_dir) else {
        eprintln!("skipped: mounting a FUSE filesystem needs root");
        return;
    };
    c.agents[0].start();
    c.wait_nodes(&["node-a"], "ready", Duration::from_secs(30));
    c.create_in("v", "zone=a");

    disk.set(DiskFault::FailFsync);
    c.ok(&["volume", "publish", "v", "--node", "node-a"]);
    let record = node_dir.join("agent.redb").display().to_string();
    let started = std::time::Instant::now();
    let told = loop {
        let v = state_of(&c, "v");
        let events = v["events"].as_array().cloned().unwrap_or_default();
        if let Some(e) = events
            .iter()
            .find(|e| e["message"].as_str().unwrap_or("").contains(&record))
        {
            break (v, e.clone());
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no event names the record: {v:#}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let (v, event) = told;
    assert_ne!(v["state"], "published", "{v:#}");
    assert_eq!(event["code"], "UNAVAILABLE", "{event}");
    assert!(disk.refused() > 0);

    disk.set(DiskFault::None);
    c.ok(&["volume", "publish", "v", "--node", "node-a", "--wait"]);
    let v = state_of(&c, "v");
    assert_eq!(v["state"], "published", "{v:#}");
    let volume_id = v["volume_id"].as_str().unwrap().to_string();
    let published = |c: &Cluster| {
        c.nodes[0]
            .1
            .log_text()
            .lines()
            .filter(|l| l.contains("published on the node") && l.contains(&volume_id))
            .count()
    };
    let before = published(&c);
    c.agents[0].kill();
    c.agents[0].start();
    c.wait_nodes(&["node-a"], "ready", Duration::from_secs(30));
    c.ok(&["volume", "publish", "v", "--node", "node-a", "--wait"]);
    assert_eq!(published(&c), before, "the record kept it: no second publish");

    // Undone by the plugin while the record fails, then asked for again:
    // the agent starts from what the plugin did (it stages again), not
    // from the record it could not write. (It once published onto a
    // staging path the plugin had removed: FAILED_PRECONDITION, for good.)
    disk.set(DiskFault::FailFsync);
    c.ok(&["volume", "unpublish", "v", "--node", "node-a"]);
    let staging = node_dir.join("staging").join(v["id"].as_str().unwrap());
    berth_tests::wait_for(
        "NodeUnstageVolume",
        Duration::from_secs(20),
        || std::fs::symlink_metadata(&staging).is_err(),
        || c.log(),
    );
    c.ok(&["volume", "publish", "v", "--node", "node-a"]);
    // Until the agent has acted on it with the disk still failing.
    berth_tests::wait_for(
        "the agent to stage and publish again, or to fail to",
        Duration::from_secs(20),
        || {
            let v = state_of(&c, "v");
            let told = v["events"].as_array().cloned().unwrap_or_default();
            v["state"] == "published"
                || told
                    .iter()
                    .any(|e| e["message"].as_str().unwrap_or("").contains("is not staged"))
        },
        || c.log(),
    );
    disk.set(DiskFault::None);
    c.ok(&["volume", "publish", "v", "--node", "node-a", "--wait"]);
    assert_eq!(state_of(&c, "v")["state"], "published");
    c.ok(&["volume", "unpublish", "v", "--node", "node-a", "--wait"]);
    c.ok(&["volume", "delete", "v", "--wait"]);
    c.agents[0].kill();
    drop(disk);
}

/// What etcd logs when a write to its own disk fails and it stops.
const ETCD_STOPPED_ON_ITS_DISK: [&str; 2] = ["failed to save state and entries", "cannot commit tx"];

/// An etcd member whose disk fails its fsyncs stops (etcd will not go on
/// with a log it could not keep), the other two keep Berth writing, and
/// every create Berth acknowledged is there after the member comes back and
/// Berth restarts.
#[test]
fn an_etcd_member_on_a_failing_disk_costs_nothing_acknowledged() {
    let mut etcd = berth_tests::EtcdCluster::start(3);
    let data = etcd.data_dir(0);
    etcd.kill(0);
    let Some(disk) = FaultDisk::over(&data) else {
        eprintln!("skipped: mounting a FUSE filesystem needs root");
        return;
    };
    etcd.restart(0);
    etcd.wait_healthy(Duration::from_secs(30));
    let mut c = Cluster::start(ClusterSpec {
        store: Some(etcd.store_config("/berth")),
        ..ClusterSpec::builtin()
    });
    c.create_in("before", "zone=a");
    disk.set(DiskFault::FailFsync);
    let mut acknowledged = vec!["before".to_string()];
    for i in 0..20 {
        let name = format!("during-{i}");
        if c.try_create_in(&name, "zone=a") {
            acknowledged.push(name);
        }
    }
    assert!(disk.refused() > 0, "the member's fsyncs were refused");
    assert!(
        acknowledged.len() > 10,
        "two members kept Berth writing: {acknowledged:?}"
    );
    assert!(!etcd.healthy(0), "the member with the failing disk went on");
    // etcd's own word for it: a log it could not keep is the end of the
    // member. Which fsync fails first decides the words: the raft log's
    // ("failed to save state and entries") or the backend's ("cannot commit
    // tx"); either way it is the disk's EIO that stopped it.
    let log = std::fs::read_to_string(etcd.log(0)).unwrap_or_default();
    assert!(
        ETCD_STOPPED_ON_ITS_DISK.iter().any(|m| log.contains(m)) && log.contains("input/output error"),
        "member 0's log: {log}"
    );

    disk.set(DiskFault::None);
    etcd.restart(0);
    etcd.wait_healthy(Duration::from_secs(30));
    c.kill_serve();
    c.start_serve();
    let listed = c.volume_names();
    for name in &acknowledged {
        assert!(listed.contains(name), "{name} was acknowledged: {listed:?}");
    }
    c.kill_serve();
    etcd.kill(0);
    drop(disk);
}

/// The sample plugin's own state directory on a failing disk: each call it
/// cannot keep is refused as a condition to wait out (not its own fault),
/// Berth asks again rather than giving up, and once the disk is back every
/// volume is created once and deleted for good. (The plugin once answered
/// INTERNAL, given up on after five tries; and a removal whose directory
/// sync failed was refused for ever after, its record already gone.)
#[test]
fn a_plugin_whose_state_disk_fails_is_waited_out_and_does_each_call_once() {
    // The plugin's state directory (and the nodes' mount points) inside it.
    let vols = tempfile::tempdir().unwrap();
    let Some(disk) = FaultDisk::over(vols.path()) else {
        eprintln!("skipped: mounting a FUSE filesystem needs root");
        return;
    };
    let c = Cluster::start(ClusterSpec {
        volumes_dir: Some(vols.path()),
        ..ClusterSpec::builtin()
    });
    c.create_in("before", "zone=a");
    // Until the plugin has refused `name`'s step at least once, telling why.
    let refused = |name: &str, said: &str| {
        berth_tests::wait_for(
            "the plugin to refuse a step",
            Duration::from_secs(30),
            || {
                let v = state_of(&c, name);
                let events = v["events"].as_array().cloned().unwrap_or_default();
                events.iter().any(|e| {
                    let m = e["message"].as_str().unwrap_or("");
                    m.contains("state directory") && m.contains(said)
                })
            },
            || format!("{:#}\n{}", state_of(&c, name), c.log()),
        );
        let v = state_of(&c, name);
        assert_ne!(v["state"], "failed", "given up on: {v:#}");
        v
    };
    let mut made = vec!["before".to_string()];
    for (fault, said) in [
        (DiskFault::FailWrites, "Input/output error"),
        (DiskFault::Full, "No space left on device"),
        (DiskFault::ReadOnly, "Read-only file system"),
    ] {
        let name = format!("during-{fault:?}").to_lowercase();
        disk.set(fault);
        let before = disk.refused();
        c.ok(&create_args(&name, "zone=a"));
        let v = refused(&name, said);
        assert_ne!(v["state"], "available", "{fault:?}: {v:#}");
        assert!(disk.refused() > before, "{fault:?}: the disk refused nothing");
        if fault == DiskFault::FailWrites {
            // Past the tries the built-in policy gives an INTERNAL (five,
            // 1 s doubling): still retried, not given up on.
            berth_tests::wait_for(
                "a fifth try, or a give-up",
                Duration::from_secs(40),
                || {
                    let v = state_of(&c, &name);
                    v["state"] == "failed" || attempt(&v) >= 5
                },
                || c.log(),
            );
            let v = state_of(&c, &name);
            assert_ne!(v["state"], "failed", "given up on: {v:#}");
        }
        disk.set(DiskFault::None);
        c.wait_until(&format!("{name} available"), |vols| {
            vols.iter()
                .any(|v| v["name"] == name.as_str() && v["state"] == "available")
        });
        made.push(name);
        assert_eq!(
            c.plugin_volumes(),
            made.len(),
            "{fault:?}: each volume created once"
        );
    }

    // A deletion whose record is removed but whose directory sync fails.
    let gone = made.pop().unwrap();
    let id = state_of(&c, &gone)["volume_id"].as_str().unwrap().to_string();
    disk.set(DiskFault::FailFsync);
    c.ok(&["volume", "delete", &gone]);
    refused(&gone, "Input/output error");
    disk.set(DiskFault::None);
    c.wait_until("the deletion", |vols| {
        vols.iter().all(|v| v["name"] != gone.as_str())
    });
    assert_eq!(c.plugin_volumes(), made.len(), "the record removed");
    assert!(!c.volume_data(&id).exists(), "its data removed");
    let mut listed = c.volume_names();
    listed.sort();
    assert_eq!(listed, made);
    drop(c);
    drop(disk);
}
