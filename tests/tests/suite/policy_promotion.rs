//! A policy set promoted and rolled back on three servers on etcd: each
//! version runs on every leader, and the guard rolls back a promoted
//! module that starts failing.

use std::time::{Duration, Instant};

use berth_tests::{Cluster, ClusterSpec, EtcdCluster};
use serde_json::Value;

use crate::policy_rollout::create;

/// Waits until every running server says it has prepared `version`.
fn every_server_prepared(c: &Cluster, via: usize, version: u64) {
    berth_tests::wait_for(
        &format!("every server to prepare version {version}"),
        Duration::from_secs(30),
        || {
            let s = status_via(c, via);
            let servers = s["servers"].as_array().cloned().unwrap_or_default();
            servers.len() == 3 && servers.iter().all(|s| s["prepared"] == version)
        },
        || status_via(c, via).to_string(),
    );
}

fn status_via(c: &Cluster, i: usize) -> Value {
    serde_json::from_str(&c.ok_via(i, &["policy", "status", "-o", "json"])).unwrap()
}

/// Creates a gold volume through server `i`; its backend name.
fn gold_name_via(c: &Cluster, i: usize, name: &str) -> String {
    c.ok_via(
        i,
        &[
            "volume",
            "create",
            name,
            "--plugin",
            "hostpath",
            "--label",
            "tier=gold",
            "--wait",
        ],
    );
    let v: Value = serde_json::from_str(&c.ok_via(i, &["volume", "get", name, "-o", "json"])).unwrap();
    v["csi_name"].as_str().unwrap().to_string()
}

#[test]
fn promotion_and_rollback_are_versions_every_leader_runs() {
    let etcd = EtcdCluster::start(3);
    let mut c = Cluster::start(ClusterSpec {
        servers: 3,
        tls: true,
        agents: true,
        shadow: &["naming", "placement"],
        store: Some(format!(
            "{}lease_ttl = \"2s\"\n",
            etcd.store_config("/berth-rollout")
        )),
        ..ClusterSpec::default()
    });
    let leader = c.wait_leader(&[0, 1, 2], Duration::from_secs(30));
    assert!(gold_name_via(&c, leader, "g1").starts_with("pv-"));

    let promoted: Value = serde_json::from_str(&c.ok_via(
        leader,
        &["policy", "promote", "--decision", "naming", "-o", "json"],
    ))
    .unwrap();
    assert_eq!(promoted["version"], 2, "{promoted:#}");
    assert_eq!(promoted["promoted"], serde_json::json!(["naming"]));
    assert!(promoted["change"].as_str().unwrap().starts_with("promote naming"));
    assert!(gold_name_via(&c, leader, "g2").starts_with("gold-pv-"));
    // Placement is still only shadowed: nothing shadows naming any more.
    let again = c.berth_via(leader, &["policy", "promote", "--decision", "naming"]);
    assert!(!again.status.success());
    assert!(berth_tests::texts(&again).1.contains("no module shadows naming"));

    // Every server prepares the promoted version: the same digests wherever it runs.
    let modules = promoted["modules"].clone();
    every_server_prepared(&c, leader, 2);
    c.kill_server(leader);
    let others: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    let next = c.wait_leader(&others, Duration::from_secs(30));
    let status = status_via(&c, next);
    assert_eq!((&status["version"], &status["modules"]), (&2.into(), &modules));
    assert!(gold_name_via(&c, next, "g3").starts_with("gold-pv-"));

    let rolled: Value = serde_json::from_str(&c.ok_via(next, &["policy", "rollback", "-o", "json"])).unwrap();
    assert_eq!(rolled["version"], 3);
    assert!(
        rolled["change"]
            .as_str()
            .unwrap()
            .starts_with("rollback to version 1"),
        "{rolled:#}"
    );
    let history: Vec<u64> = rolled["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["version"].as_u64().unwrap())
        .collect();
    assert_eq!(history, [1, 2]);
    assert!(gold_name_via(&c, next, "g4").starts_with("pv-"));

    c.kill_server(next);
    let last: Vec<usize> = others.iter().copied().filter(|i| *i != next).collect();
    let third = c.wait_leader(&last, Duration::from_secs(30));
    assert_eq!(status_via(&c, third)["version"], 3);
    assert!(gold_name_via(&c, third, "g5").starts_with("pv-"));
}

#[test]
fn the_guard_rolls_back_a_promoted_module_that_starts_failing() {
    let c = Cluster::start(ClusterSpec {
        shadow: &["naming", "placement"],
        extra: "[policy_guard]\nfailure_share = 0.3\nmin_decisions = 4\nwindow = \"5m\"",
        ..ClusterSpec::default()
    });
    c.ok(&["policy", "promote", "--decision", "naming"]);
    // The promoted module names two volumes, then traps on three.
    for i in 0..2 {
        create(&c, &format!("ok-{i}"), &[]);
    }
    for i in 0..3 {
        c.ok(&[
            "volume",
            "create",
            &format!("bug-{i}"),
            "--plugin",
            "hostpath",
            "--label",
            "candidate=trap",
        ]);
    }
    let started = Instant::now();
    let status = loop {
        let s: Value = serde_json::from_str(&c.ok(&["policy", "status", "-o", "json"])).unwrap();
        if s["version"] == 3 || started.elapsed() > Duration::from_secs(20) {
            break s;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(status["version"], 3, "{status:#}\n{}", c.log());
    let change = status["change"].as_str().unwrap();
    assert!(
        change.starts_with("rollback to version 1 (guard: candidate failed"),
        "{change}"
    );
    assert!(c.log().contains("rolling the promotion back"), "{}", c.log());
    assert_eq!(
        status["promoted"],
        Value::Null,
        "nothing left for the guard to watch"
    );
    // Back on the sample: a volume the candidate could not name is named now.
    create(&c, "after", &["--label", "candidate=trap"]);
}
