//! The CSI spec's field rules that drivers in the wild lean on, each against
//! the sample plugin told to answer that way: a capacity of 0 (unknown),
//! OPTIONAL fields left unset, snapshots not ready at once, a driver of an
//! older CSI version that does not know the newer access modes.

use std::time::Duration;

use berth_tests::{Cluster, ClusterSpec, texts, wait_for};
use serde_json::Value;

fn get(c: &Cluster, name: &str) -> Value {
    serde_json::from_str(&c.ok(&["volume", "get", name, "-o", "json"])).unwrap()
}

fn with_plugin(args: &[&'static str]) -> Cluster {
    Cluster::start(ClusterSpec {
        plugin_args: args.to_vec(),
        ..ClusterSpec::default()
    })
}

/// Lines of the controller plugin's log containing `what`.
fn controller_lines(c: &Cluster, what: &str) -> Vec<String> {
    c.controller
        .log_text()
        .lines()
        .filter(|l| l.contains(what))
        .map(str::to_string)
        .collect()
}

#[test]
fn a_volume_of_unknown_capacity_is_used_as_it_is_and_grows_when_asked() {
    let c = with_plugin(&["--omit", "capacity"]);
    c.ok(&[
        "volume",
        "create",
        "nfs",
        "--plugin",
        "hostpath",
        "--size",
        "1GiB",
        "--requisite",
        "zone=a",
        "--wait",
    ]);
    let v = get(&c, "nfs");
    assert_eq!(v["state"], "available", "{v:#}");
    assert_eq!(v["capacity_bytes"], 0, "kept as the plugin said: unknown");
    assert_eq!(v["expanding"], false);
    let shown = c.ok(&["volume", "get", "nfs"]);
    assert!(shown.contains("unknown"), "{shown}");
    c.ok(&["volume", "publish", "nfs", "--node", "node-a", "--wait"]);
    assert!(
        controller_lines(&c, "volume expanded").is_empty(),
        "0 is not smaller than asked: no ControllerExpandVolume\n{}",
        c.log()
    );

    // Growing it when asked: ControllerExpandVolume answers the capacity (REQUIRED there).
    c.ok(&["volume", "expand", "nfs", "--size", "2GiB", "--wait"]);
    assert_eq!(controller_lines(&c, "volume expanded").len(), 1);
    let v = get(&c, "nfs");
    assert_eq!(v["capacity_bytes"], 2u64 << 30, "{v:#}");
    assert_eq!(v["state"], "published");
}

#[test]
fn optional_fields_left_unset_are_taken_as_the_spec_says() {
    let c = with_plugin(&["--omit", "all"]);
    let status = c.ok(&["plugin", "status"]);
    assert!(
        !status.contains("not ready"),
        "an unset Probe.ready means ready: {status}"
    );
    // No accessible topology from a plugin that offers the constraint: the
    // operator's requirement is what Berth holds the volume to.
    c.create_in("kept-in-a", "zone=a");
    let refused = c.berth(&["volume", "publish", "kept-in-a", "--node", "node-b"]);
    let (out, err) = texts(&refused);
    assert!(!refused.status.success(), "{out}");
    assert!(err.contains("outside the topology"), "{err}");
    c.ok(&["volume", "publish", "kept-in-a", "--node", "node-a", "--wait"]);
    // Without any requirement the spec lets any node take it.
    c.ok(&["volume", "create", "anywhere", "--plugin", "hostpath", "--wait"]);
    c.ok(&["volume", "publish", "anywhere", "--node", "node-b", "--wait"]);
    for name in ["kept-in-a", "anywhere"] {
        let v = get(&c, name);
        assert_eq!(
            v["state"], "published",
            "no publish context, no volume context: {v:#}"
        );
    }

    // A snapshot of unknown size is still a snapshot to restore.
    c.ok(&["snapshot", "create", "snap", "--volume", "anywhere", "--wait"]);
    let s: Value = serde_json::from_str(&c.ok(&["snapshot", "get", "snap", "-o", "json"])).unwrap();
    assert_eq!(
        (s["state"].as_str(), s["size_bytes"].as_i64()),
        (Some("ready"), Some(0)),
        "{s:#}"
    );
    c.ok(&[
        "volume",
        "create",
        "restored",
        "--plugin",
        "hostpath",
        "--from-snapshot",
        "snap",
        "--wait",
    ]);

    c.ok(&["snapshot", "delete", "snap", "--wait"]);
    for name in ["kept-in-a", "anywhere", "restored"] {
        c.ok(&["volume", "delete", "--force", name, "--wait"]);
    }
    assert_eq!((c.plugin_volumes(), c.plugin_snapshots()), (0, 0));
}

#[test]
fn a_snapshot_not_ready_yet_is_followed_until_it_is_and_not_restored_before() {
    let c = with_plugin(&["--snapshot-ready-after", "3s"]);
    c.create_in("source", "zone=a");
    c.ok(&["snapshot", "create", "slow", "--volume", "source"]);
    let state = || {
        let s: Value = serde_json::from_str(&c.ok(&["snapshot", "get", "slow", "-o", "json"])).unwrap();
        s["state"].as_str().unwrap_or_default().to_string()
    };
    wait_for(
        "the plugin to answer not ready",
        Duration::from_secs(20),
        || state() == "cutting",
        || c.log(),
    );
    let early = c.berth(&[
        "volume",
        "create",
        "early",
        "--plugin",
        "hostpath",
        "--from-snapshot",
        "slow",
    ]);
    let (_, err) = texts(&early);
    assert!(!early.status.success(), "restored from a snapshot not ready");
    assert!(err.contains("not ready to restore"), "{err}");

    wait_for(
        "the snapshot to be ready",
        Duration::from_secs(30),
        || state() == "ready",
        || c.log(),
    );
    c.ok(&[
        "volume",
        "create",
        "restored",
        "--plugin",
        "hostpath",
        "--from-snapshot",
        "slow",
        "--wait",
    ]);
    assert_eq!(c.plugin_snapshots(), 1, "followed, not cut twice");
}

/// A snapshot being cut is followed by its id with GetSnapshot (CSI 1.12)
/// where the plugin offers it, ListSnapshots otherwise, and CreateSnapshot
/// by name only when it can do neither; it is cut once either way, a
/// `kill -9` of the server while it follows included.
#[test]
fn a_snapshot_being_cut_is_followed_with_the_call_the_plugin_offers() {
    let cases: [(&[&'static str], &str); 3] = [
        (&[], "GetSnapshot"),
        (&["--disable", "GET_SNAPSHOT"], "ListSnapshots"),
        (
            &["--disable", "GET_SNAPSHOT", "--disable", "LIST_SNAPSHOTS"],
            "CreateSnapshot",
        ),
    ];
    for (disabled, follower) in cases {
        let logs = berth_tests::test_dir();
        let calls = logs.path().join("calls.log");
        let calls_arg = calls.display().to_string();
        let mut args = vec!["--snapshot-ready-after", "2s", "--call-log", &calls_arg];
        args.extend_from_slice(disabled);
        let mut c = Cluster::start(ClusterSpec {
            plugin_args: args,
            ..ClusterSpec::default()
        });
        c.create_in("source", "zone=a");
        c.ok(&["snapshot", "create", "slow", "--volume", "source"]);
        let state = |c: &Cluster| {
            let s: Value = serde_json::from_str(&c.ok(&["snapshot", "get", "slow", "-o", "json"])).unwrap();
            s["state"].as_str().unwrap_or_default().to_string()
        };
        // Killed while following it: the next run follows it on, by its id.
        wait_for(
            "the plugin to answer not ready",
            Duration::from_secs(20),
            || state(&c) == "cutting",
            || c.log(),
        );
        c.kill_serve();
        c.start_serve();
        wait_for(
            "the snapshot to be ready",
            Duration::from_secs(30),
            || state(&c) == "ready",
            || c.log(),
        );
        let log = std::fs::read_to_string(&calls).unwrap();
        let count = |method: &str| {
            log.lines()
                .filter(|l| l.starts_with(&format!("/csi.v1.Controller/{method} ")))
                .count()
        };
        let (creates, gets, lists) = (
            count("CreateSnapshot"),
            count("GetSnapshot"),
            count("ListSnapshots"),
        );
        match follower {
            "GetSnapshot" => assert!(creates == 1 && gets >= 1 && lists == 0, "{log}"),
            "ListSnapshots" => assert!(creates == 1 && gets == 0 && lists >= 1, "{log}"),
            _ => assert!(creates >= 2 && gets == 0 && lists == 0, "{log}"),
        }
        assert_eq!(c.plugin_snapshots(), 1, "{follower}: cut twice");
    }
}

#[test]
fn a_driver_from_before_csi_1_5_gets_the_single_node_mode_it_knows() {
    let c = with_plugin(&["--csi-version", "1.4"]);
    for (name, mode) in [
        ("one", "single-node-single-writer"),
        ("many", "single-node-multi-writer"),
    ] {
        c.ok(&[
            "volume",
            "create",
            name,
            "--plugin",
            "hostpath",
            "--access-mode",
            mode,
            "--requisite",
            "zone=a",
            "--wait",
        ]);
        c.ok(&["volume", "publish", name, "--node", "node-a", "--wait"]);
        let v = get(&c, name);
        assert_eq!(v["access_mode"], mode, "the operator's mode is kept: {v:#}");
    }
    let created = controller_lines(&c, "volume created");
    assert_eq!(created.len(), 2);
    assert!(
        created.iter().all(|l| l.contains("SINGLE_NODE_WRITER")),
        "sent as the mode a CSI 1.4 driver knows: {created:#?}"
    );

    // A driver that offers SINGLE_NODE_MULTI_WRITER gets the mode as asked.
    let c = with_plugin(&[]);
    c.ok(&[
        "volume",
        "create",
        "one",
        "--plugin",
        "hostpath",
        "--access-mode",
        "single-node-single-writer",
        "--requisite",
        "zone=a",
        "--wait",
    ]);
    c.ok(&["volume", "publish", "one", "--node", "node-a", "--wait"]);
    let created = controller_lines(&c, "volume created");
    assert!(created[0].contains("SINGLE_NODE_SINGLE_WRITER"), "{created:#?}");
}

/// A restore or a clone without a size asks the driver for at least its
/// source's size, as Kubernetes does: a driver that refuses a size below
/// the source's (the Kubernetes hostpath driver does, 0 included) restores
/// and clones.
#[test]
fn a_restore_or_clone_without_a_size_asks_for_the_sources() {
    let c = with_plugin(&["--like-reference-driver"]);
    c.ok(&[
        "volume", "create", "src", "--plugin", "hostpath", "--size", "64MiB", "--wait",
    ]);
    c.ok(&["snapshot", "create", "s1", "--volume", "src", "--wait"]);
    c.ok(&[
        "volume",
        "create",
        "restored",
        "--plugin",
        "hostpath",
        "--from-snapshot",
        "s1",
        "--wait",
    ]);
    c.ok(&[
        "volume",
        "create",
        "cloned",
        "--plugin",
        "hostpath",
        "--from-volume",
        "src",
        "--wait",
    ]);
    for name in ["restored", "cloned"] {
        let v = get(&c, name);
        assert_eq!(v["state"], "available", "{v:#}");
        assert_eq!(
            v["required_bytes"],
            64 << 20,
            "asked for the source's size: {v:#}"
        );
    }
    // A limit below the source's size is refused before any call.
    let out = c.berth(&[
        "volume",
        "create",
        "small",
        "--plugin",
        "hostpath",
        "--from-snapshot",
        "s1",
        "--limit",
        "1MiB",
    ]);
    let (_, stderr) = texts(&out);
    assert!(
        !out.status.success() && stderr.contains("less than the source"),
        "{stderr}"
    );
}
