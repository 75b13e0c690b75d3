//! The rest of the CSI lifecycle against the sample plugin: expansion,
//! snapshots, restores and clones, import and forget, orphans and health.
//! Each change is crashed in its worst window — the plugin has done the work
//! and not yet answered — and must end with nothing duplicated.

use std::time::{Duration, Instant};

use berth_tests::{Cluster, ClusterSpec, texts};
use serde_json::Value;

const GIB: u64 = 1 << 30;

/// A cluster whose plugin, once CreateVolume, CreateSnapshot,
/// ControllerExpandVolume, ControllerModifyVolume or
/// CreateVolumeGroupSnapshot has done its work, waits before answering.
pub(crate) fn slow_replies() -> Cluster {
    Cluster::start(ClusterSpec {
        plugin_args: vec![
            "--reply-delay",
            "1500ms",
            "--fault-calls",
            "CreateVolume,CreateSnapshot,ControllerExpandVolume,ControllerModifyVolume,CreateVolumeGroupSnapshot",
        ],
        ..ClusterSpec::default()
    })
}

fn json(c: &Cluster, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&c.ok(&all)).unwrap()
}

pub(crate) fn replies_held(c: &Cluster) -> usize {
    c.controller
        .log_text()
        .matches("answering after the reply delay")
        .count()
}

/// Waits until the plugin has done one more piece of work than `before`
/// and holds its answer, then kills `berth serve` (SIGKILL) and starts it again.
fn crash_once_done(c: &mut Cluster, before: usize) {
    let started = Instant::now();
    while replies_held(c) <= before {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the plugin never did the work"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    c.kill_serve();
    c.start_serve();
}

fn until(c: &Cluster, what: &str, args: &[&str], done: impl Fn(&Value) -> bool) -> Value {
    let started = Instant::now();
    loop {
        let out = c.berth(&[args, &["-o", "json"]].concat());
        if out.status.success() {
            let v: Value = serde_json::from_slice(&out.stdout).unwrap();
            if done(&v) {
                return v;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{what}: {v:#}\n{}",
                c.log()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn plugin_record(c: &Cluster, volume_id: &str) -> Value {
    let path = c.volumes_dir.join(format!("hostpath/volumes/{volume_id}.json"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn expansion_reaches_the_plugin_and_the_node_through_a_crash() {
    let mut c = slow_replies();
    c.ok(&[
        "volume", "create", "v", "--plugin", "hostpath", "--size", "1GiB", "--wait",
    ]);
    c.ok(&["volume", "publish", "v", "--node", "node-a", "--wait"]);
    let before = replies_held(&c);
    c.ok(&["volume", "expand", "v", "--size", "3GiB"]);
    crash_once_done(&mut c, before);
    let v = until(&c, "grown", &["volume", "get", "v"], |v| {
        v["capacity_bytes"] == 3 * GIB && v["expanding"] == false
    });
    assert_eq!(
        plugin_record(&c, v["volume_id"].as_str().unwrap())["capacity_bytes"],
        3 * GIB
    );
    let node = &c.nodes[0].1;
    assert!(
        node.log_text().contains("volume expanded on the node"),
        "NodeExpandVolume never came"
    );
    // Volumes only grow, and say so.
    let (_, stderr) = texts(&c.berth(&["volume", "expand", "v", "--size", "2GiB"]));
    assert!(stderr.contains("volumes only grow"), "{stderr}");
    c.ok(&["volume", "delete", "--force", "v", "--wait"]);
    assert_eq!(c.plugin_volumes(), 0);
}

#[test]
fn modification_reaches_the_plugin_through_a_crash() {
    let mut c = slow_replies();
    c.ok(&[
        "volume",
        "create",
        "v",
        "--plugin",
        "hostpath",
        "--mutable-param",
        "tier=silver",
        "--wait",
    ]);
    let v = json(&c, &["volume", "get", "v"]);
    let id = v["volume_id"].as_str().unwrap().to_string();
    assert_eq!(
        plugin_record(&c, &id)["mutable_parameters"],
        serde_json::json!({"tier": "silver"})
    );
    assert_eq!(v["modifying"], false, "{v:#}");

    let before = replies_held(&c);
    c.ok(&["volume", "modify", "v", "--parameter", "iops=3000"]);
    crash_once_done(&mut c, before);
    let v = until(&c, "modified", &["volume", "get", "v"], |v| {
        v["modifying"] == false
    });
    let both = serde_json::json!({"iops": "3000", "tier": "silver"});
    assert_eq!(v["mutable_parameters"], both, "{v:#}");
    assert_eq!(plugin_record(&c, &id)["mutable_parameters"], both);
    assert_eq!(v["failure"], "", "{v:#}");

    // A value the plugin refuses fails the volume with the plugin's reason;
    // a good one asked next clears it.
    c.ok(&["volume", "modify", "v", "--parameter", "iops=lots"]);
    let v = until(&c, "refused", &["volume", "get", "v"], |v| v["failure"] != "");
    assert!(v["failure"].as_str().unwrap().contains("not valid"), "{v:#}");
    c.ok(&["volume", "modify", "v", "--parameter", "iops=500", "--wait"]);
    assert_eq!(plugin_record(&c, &id)["mutable_parameters"]["iops"], "500");

    // Nothing to change is refused before the plugin hears of it.
    let out = c.berth(&["volume", "modify", "v"]);
    assert!(!out.status.success());
    c.ok(&["volume", "delete", "v", "--wait"]);
    assert_eq!(c.plugin_volumes(), 0);
}

#[test]
fn group_snapshots_are_taken_once_through_a_crash_and_each_member_restores() {
    let mut c = slow_replies();
    for v in ["db", "wal"] {
        c.ok(&["volume", "create", v, "--plugin", "hostpath", "--wait"]);
        let id = json(&c, &["volume", "get", v])["volume_id"]
            .as_str()
            .unwrap()
            .to_string();
        std::fs::write(c.volume_data(&id).join("who"), v).unwrap();
    }
    let before = replies_held(&c);
    c.ok(&[
        "snapshot", "group", "create", "nightly", "--volume", "db", "--volume", "wal",
    ]);
    crash_once_done(&mut c, before);
    let g = until(&c, "group ready", &["snapshot", "group", "get", "nightly"], |g| {
        g["state"] == "ready"
    });
    assert_eq!(c.plugin_snapshots(), 2, "a group was taken twice: {g:#}");
    let members = g["members"].as_array().unwrap();
    assert_eq!(members.len(), 2, "{g:#}");
    assert!(
        members
            .iter()
            .all(|m| m["ready"] == true && m["snapshot_id"] != ""),
        "{g:#}"
    );
    let listed = json(&c, &["snapshot", "group", "list"]);
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");

    // Each member restores with its own volume's data.
    for v in ["db", "wal"] {
        let back = format!("{v}-back");
        let from = format!("nightly/{v}");
        c.ok(&[
            "volume",
            "create",
            &back,
            "--plugin",
            "hostpath",
            "--from-snapshot",
            &from,
            "--wait",
        ]);
        let id = json(&c, &["volume", "get", &back])["volume_id"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(
            std::fs::read_to_string(c.volume_data(&id).join("who")).unwrap(),
            v
        );
    }

    // A member stays while its group does; the name is taken for snapshots too.
    let (_, stderr) = texts(&c.berth(&["volume", "delete", "wal"]));
    assert!(stderr.contains("group snapshot"), "{stderr}");
    let (_, stderr) = texts(&c.berth(&["snapshot", "create", "nightly", "--volume", "db"]));
    assert!(stderr.contains("already exists"), "{stderr}");

    c.ok(&["snapshot", "group", "delete", "nightly", "--wait"]);
    assert_eq!(c.plugin_snapshots(), 0);
    for v in ["db", "wal", "db-back", "wal-back"] {
        c.ok(&["volume", "delete", v, "--wait"]);
    }
    assert_eq!(c.plugin_volumes(), 0);
}

#[test]
fn modification_and_group_snapshots_are_refused_when_the_plugin_does_not_offer_them() {
    let c = Cluster::start(ClusterSpec {
        plugin_args: vec![
            "--disable",
            "MODIFY_VOLUME",
            "--disable",
            "CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT",
        ],
        ..ClusterSpec::default()
    });
    let (_, stderr) = texts(&c.berth(&[
        "volume",
        "create",
        "v",
        "--plugin",
        "hostpath",
        "--mutable-param",
        "tier=gold",
    ]));
    assert!(stderr.contains("does not offer MODIFY_VOLUME"), "{stderr}");
    c.ok(&["volume", "create", "v", "--plugin", "hostpath", "--wait"]);
    let (_, stderr) = texts(&c.berth(&["volume", "modify", "v", "--parameter", "tier=gold"]));
    assert!(stderr.contains("does not offer MODIFY_VOLUME"), "{stderr}");
    let v = json(&c, &["volume", "get", "v"]);
    assert_eq!(v["modifying"], false, "{v:#}");
    assert!(v.get("mutable_parameters").is_none(), "{v:#}");
    let (_, stderr) = texts(&c.berth(&["snapshot", "group", "create", "g", "--volume", "v"]));
    assert!(
        stderr.contains("does not offer CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT"),
        "{stderr}"
    );
}

#[test]
fn snapshots_restores_and_clones_survive_crashes_without_duplicates() {
    let mut c = slow_replies();
    c.ok(&["volume", "create", "src", "--plugin", "hostpath", "--wait"]);
    let src = json(&c, &["volume", "get", "src"]);
    std::fs::write(
        c.volume_data(src["volume_id"].as_str().unwrap()).join("greeting"),
        "hello",
    )
    .unwrap();

    let before = replies_held(&c);
    c.ok(&["snapshot", "create", "s1", "--volume", "src"]);
    crash_once_done(&mut c, before);
    let s = until(&c, "snapshot ready", &["snapshot", "get", "s1"], |s| {
        s["state"] == "ready"
    });
    assert_eq!(c.plugin_snapshots(), 1, "a snapshot was taken twice");
    assert_eq!(s["volume"], "src");
    let listed = json(&c, &["snapshot", "list", "--volume", "src"]);
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");

    // Restore, crashed after the plugin made the volume.
    let before = replies_held(&c);
    c.ok(&[
        "volume",
        "create",
        "restored",
        "--plugin",
        "hostpath",
        "--from-snapshot",
        "s1",
    ]);
    crash_once_done(&mut c, before);
    let r = until(&c, "restored", &["volume", "get", "restored"], |v| {
        v["state"] == "available"
    });
    assert_eq!(c.plugin_volumes(), 2, "a volume was created twice");
    assert_eq!(r["source"], "snapshot s1");
    let data = c.volume_data(r["volume_id"].as_str().unwrap());
    assert_eq!(std::fs::read_to_string(data.join("greeting")).unwrap(), "hello");

    // Clone, crashed the same way.
    let before = replies_held(&c);
    c.ok(&[
        "volume",
        "create",
        "copy",
        "--plugin",
        "hostpath",
        "--from-volume",
        "src",
    ]);
    crash_once_done(&mut c, before);
    let copy = until(&c, "cloned", &["volume", "get", "copy"], |v| {
        v["state"] == "available"
    });
    assert_eq!(c.plugin_volumes(), 3, "a clone was created twice");
    assert_eq!(copy["source"], "volume src");
    let data = c.volume_data(copy["volume_id"].as_str().unwrap());
    assert_eq!(std::fs::read_to_string(data.join("greeting")).unwrap(), "hello");

    // A volume with snapshots is not deleted from under them.
    let (_, stderr) = texts(&c.berth(&["volume", "delete", "src"]));
    assert!(stderr.contains("delete its snapshots first"), "{stderr}");
    // Names are unique across volumes.
    let (_, stderr) = texts(&c.berth(&["snapshot", "create", "s1", "--volume", "copy"]));
    assert!(stderr.contains("already exists, of volume \"src\""), "{stderr}");
    assert!(stderr.contains("ALREADY_EXISTS"), "as for volumes: {stderr}");

    c.ok(&["snapshot", "delete", "s1", "--wait"]);
    assert_eq!(c.plugin_snapshots(), 0);
    for v in ["src", "restored", "copy"] {
        c.ok(&["volume", "delete", v, "--wait"]);
    }
    assert_eq!(c.plugin_volumes(), 0);
}

#[test]
fn forget_import_and_orphans_keep_berth_and_the_plugin_in_step() {
    // Import asks the plugin for the volume (ControllerGetVolume); its answer is held.
    let mut c = Cluster::start(ClusterSpec {
        plugin_args: vec!["--reply-delay", "1500ms", "--fault-calls", "ControllerGetVolume"],
        ..ClusterSpec::default()
    });
    c.ok(&[
        "volume", "create", "old", "--plugin", "hostpath", "--size", "2GiB", "--wait",
    ]);
    let id = json(&c, &["volume", "get", "old"])["volume_id"]
        .as_str()
        .unwrap()
        .to_string();
    c.ok(&["volume", "publish", "old", "--node", "node-a", "--wait"]);
    let (_, stderr) = texts(&c.berth(&["volume", "forget", "old"]));
    assert!(stderr.contains("unpublish it first"), "{stderr}");
    c.ok(&["volume", "unpublish", "old", "--node", "node-a", "--wait"]);
    c.ok(&["volume", "forget", "old"]);
    c.kill_serve();
    c.start_serve();
    assert!(
        !c.berth(&["volume", "get", "old"]).status.success(),
        "forgotten, yet back"
    );
    assert_eq!(c.plugin_volumes(), 1, "forget touched the plugin");

    let orphans = json(&c, &["plugin", "orphans", "hostpath"]);
    assert_eq!(orphans["untracked"][0]["volume_id"], id.as_str(), "{orphans}");
    assert_eq!(orphans["untracked"][0]["capacity_bytes"], 2 * GIB);

    let (_, stderr) = texts(&c.berth(&[
        "volume",
        "import",
        "x",
        "--plugin",
        "hostpath",
        "--volume-id",
        "hp-0000",
    ]));
    assert!(stderr.contains("has no volume"), "{stderr}");
    let import = [
        "volume",
        "import",
        "adopted",
        "--plugin",
        "hostpath",
        "--volume-id",
        &id,
    ];
    // Crashed while the plugin holds its answer: nothing is adopted, nothing changes on the plugin.
    let before = replies_held(&c);
    let pending = c.spawn_berth(&import);
    crash_once_done(&mut c, before);
    let out = pending.wait_with_output().unwrap();
    assert!(!out.status.success(), "the import outlived its server");
    assert!(
        !c.berth(&["volume", "get", "adopted"]).status.success(),
        "half an import"
    );
    assert_eq!(c.plugin_volumes(), 1);
    // Asked again, it is adopted; and it stays adopted through a crash.
    c.ok(&import);
    c.kill_serve();
    c.start_serve();
    let v = json(&c, &["volume", "get", "adopted"]);
    assert_eq!(
        (v["state"].as_str(), v["capacity_bytes"].as_u64()),
        (Some("available"), Some(2 * GIB))
    );
    let (_, stderr) = texts(&c.berth(&[
        "volume",
        "import",
        "twice",
        "--plugin",
        "hostpath",
        "--volume-id",
        &id,
    ]));
    assert!(stderr.contains("already"), "{stderr}");
    let orphans = json(&c, &["plugin", "orphans", "hostpath"]);
    assert_eq!(
        orphans["untracked"].as_array().map(Vec::len),
        Some(0),
        "{orphans}"
    );

    // An adopted volume is Berth's like any other.
    c.ok(&["volume", "publish", "adopted", "--node", "node-a", "--wait"]);
    c.ok(&["volume", "unpublish", "adopted", "--node", "node-a", "--wait"]);

    // Forget is one store write: crashed as it is asked, the volume is either
    // Berth's as before or gone whole, its name and backend id free again.
    for pause_ms in [0, 5, 20] {
        let pending = c.spawn_berth(&["volume", "forget", "adopted"]);
        std::thread::sleep(Duration::from_millis(pause_ms));
        c.kill_serve();
        c.start_serve();
        let _ = pending.wait_with_output();
        if c.berth(&["volume", "get", "adopted"]).status.success() {
            assert_eq!(json(&c, &["volume", "get", "adopted"])["state"], "available");
            c.ok(&["volume", "forget", "adopted"]);
        }
        assert_eq!(c.plugin_volumes(), 1, "forget touched the plugin");
        c.ok(&import);
    }

    // Gone from the plugin behind Berth's back: reported, not acted on.
    std::fs::remove_file(c.volumes_dir.join(format!("hostpath/volumes/{id}.json"))).unwrap();
    c.controller.restart();
    let orphans = until(&c, "missing", &["plugin", "orphans", "hostpath"], |o| {
        o["missing"].as_array().is_some_and(|m| !m.is_empty())
    });
    assert_eq!(orphans["missing"][0]["name"], "adopted", "{orphans}");
    assert_eq!(json(&c, &["volume", "get", "adopted"])["state"], "available");
}

#[test]
fn volume_get_shows_condition_and_usage() {
    let c = Cluster::start(ClusterSpec::default());
    c.ok(&["volume", "create", "h", "--plugin", "hostpath", "--wait"]);
    c.ok(&["volume", "publish", "h", "--node", "node-a", "--wait"]);
    let id = json(&c, &["volume", "get", "h"])["volume_id"]
        .as_str()
        .unwrap()
        .to_string();
    std::fs::write(c.volume_data(&id).join("blob"), vec![7u8; 10_000]).unwrap();
    let v = json(&c, &["volume", "get", "h"]);
    assert_eq!(v["health"]["controller"], "ok", "{v:#}");
    let node = &v["health"]["nodes"][0];
    assert_eq!(node["node"], "node-a");
    assert_eq!(node["condition"], "ok");
    assert!(node["used_bytes"].as_i64().unwrap() >= 10_000, "{node}");
    assert_eq!(node["total_bytes"].as_u64(), Some(GIB));

    std::fs::write(c.volume_data(&id).join(".abnormal"), "disk on fire").unwrap();
    let text = c.ok(&["volume", "get", "h"]);
    assert!(text.contains("abnormal: disk on fire"), "{text}");
}

#[test]
fn what_the_plugin_does_not_offer_is_refused_clearly() {
    let c = Cluster::start(ClusterSpec {
        guests: false,
        plugin_args: vec![
            "--disable",
            "EXPAND_VOLUME",
            "--disable",
            "CREATE_DELETE_SNAPSHOT",
            "--disable",
            "CLONE_VOLUME",
            "--disable",
            "LIST_VOLUMES",
            "--disable",
            "GET_VOLUME",
            "--disable",
            "VOLUME_CONDITION",
            "--disable",
            "GET_VOLUME_STATS",
        ],
        ..ClusterSpec::default()
    });
    c.ok(&["volume", "create", "v", "--plugin", "hostpath", "--wait"]);
    let refused = |args: &[&str], expected: &str| {
        let out = c.berth(args);
        let (_, stderr) = texts(&out);
        assert!(
            !out.status.success() && stderr.contains(expected),
            "{args:?}: {stderr}"
        );
    };
    refused(
        &["volume", "expand", "v", "--size", "5GiB"],
        "does not offer EXPAND_VOLUME",
    );
    refused(
        &["snapshot", "create", "s", "--volume", "v"],
        "does not offer CREATE_DELETE_SNAPSHOT",
    );
    refused(
        &[
            "volume",
            "create",
            "c",
            "--plugin",
            "hostpath",
            "--from-volume",
            "v",
        ],
        "does not offer CLONE_VOLUME",
    );
    refused(&["plugin", "orphans", "hostpath"], "does not offer LIST_VOLUMES");
    refused(
        &[
            "volume",
            "import",
            "i",
            "--plugin",
            "hostpath",
            "--volume-id",
            "hp-1",
        ],
        "neither GET_VOLUME nor LIST_VOLUMES",
    );
    let text = c.ok(&["volume", "get", "v"]);
    assert!(
        text.contains("does not offer GET_VOLUME with VOLUME_CONDITION"),
        "{text}"
    );
}

#[test]
fn placement_does_not_put_a_volume_where_it_cannot_fit() {
    // Zone a has 2 GiB; zone b has the plugin's whole capacity.
    let c = Cluster::start(ClusterSpec {
        plugin_args: vec!["--capacity-in", "zone=a=2147483648"],
        ..ClusterSpec::default()
    });
    c.ok(&[
        "volume", "create", "big", "--plugin", "hostpath", "--size", "3GiB", "--wait",
    ]);
    let v = json(&c, &["volume", "get", "big"]);
    assert_eq!(
        v["accessible_topology"],
        serde_json::json!([{ "zone": "b" }]),
        "{v:#}"
    );

    // Required in zone a, where it cannot fit: it waits, saying why.
    c.ok(&[
        "volume",
        "create",
        "stuck",
        "--plugin",
        "hostpath",
        "--size",
        "3GiB",
        "--requisite",
        "zone=a",
    ]);
    let v = until(&c, "a capacity refusal", &["volume", "get", "stuck"], |v| {
        v["retrying"]
            .as_str()
            .is_some_and(|r| r.contains("bytes available there"))
    });
    assert_eq!(v["volume_id"], "", "{v:#}");
    assert_eq!(c.plugin_volumes(), 1);
}
