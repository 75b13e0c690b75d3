//! A driver deployed the common way: one controller process and one process
//! per node, each serving only its own service while every process reports
//! the driver's capabilities (CONTROLLER_SERVICE included), as third-party
//! drivers do. The sample plugin's `--mode` reproduces it.

use std::time::{Duration, Instant};

use berth_tests::{Cluster, ClusterSpec, texts};
use serde_json::Value;

fn split() -> Cluster {
    Cluster::start(ClusterSpec {
        guests: false,
        // Every node process reports CONTROLLER_SERVICE and answers
        // UNIMPLEMENTED to the Controller service.
        node_args: vec!["--controller", "true", "--mode", "node"],
        ..ClusterSpec::default()
    })
}

/// A cluster whose node plugins never get through a fingerprint, with a
/// controller of `topology` (`None`: one without accessibility constraints).
fn unfingerprinted_nodes(topology: Option<&'static str>) -> Cluster {
    Cluster::start(ClusterSpec {
        guests: false,
        controller_topology: topology,
        node_args: vec!["--fault", "UNAVAILABLE=1.0", "--fault-calls", "GetPluginInfo"],
        ..ClusterSpec::default()
    })
}

#[test]
fn node_processes_that_serve_only_the_node_service_are_healthy_and_work() {
    let c = split();
    let started = Instant::now();
    loop {
        let nodes: Vec<Value> = serde_json::from_str(&c.ok(&["node", "list", "-o", "json"])).unwrap();
        let health: Vec<&str> = nodes
            .iter()
            .map(|n| n["plugins"][0]["health"].as_str().unwrap())
            .collect();
        assert!(!health.contains(&"unhealthy"), "{nodes:#?}");
        if health.iter().all(|h| *h == "healthy") {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "{nodes:#?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    c.create_in("v", "zone=a");
    c.ok(&["volume", "publish", "v", "--node", "node-a", "--wait"]);
    c.ok(&["volume", "delete", "--force", "v", "--wait"]);
    assert_eq!(c.plugin_volumes(), 0);
}

#[test]
fn probe_says_what_a_node_process_serves_and_what_it_does_not() {
    let c = split();
    let node = c.nodes[0].1.endpoint();
    let out = c.ok(&["plugin", "probe", &node]);
    assert!(out.contains("offered by the driver, not served here"), "{out}");
    assert!(out.contains("node id") && out.contains("node-a"), "{out}");
    let refused = c.berth(&["plugin", "probe", &node, "--role", "controller"]);
    let (_, stderr) = texts(&refused);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("does not serve the Controller service"),
        "{stderr}"
    );
    c.ok(&["plugin", "probe", &node, "--role", "node"]);
}

#[test]
fn a_volume_never_created_is_deleted_without_waiting_for_a_node_that_never_answers() {
    // The node plugins never get through a fingerprint, so placement finds
    // no node for CreateVolume: the volume is never created, and its
    // publication never carried out.
    let c = unfingerprinted_nodes(Some("zone=a"));
    c.ok(&["volume", "create", "never", "--plugin", "hostpath"]);
    c.ok(&["volume", "publish", "never", "--node", "node-a"]);
    // Until CreateVolume has been tried (and refused) since the publish was asked for.
    let get = || -> Value { serde_json::from_str(&c.ok(&["volume", "get", "never", "-o", "json"])).unwrap() };
    let tried_since_publish = |v: &Value| {
        let events = v["events"].as_array().cloned().unwrap_or_default();
        let asked = events.iter().position(|e| {
            e["step"] == "request" && e["message"].as_str().unwrap_or("").starts_with("publish")
        });
        asked.is_some_and(|i| events[i..].iter().any(|e| e["step"] == "CreateVolume"))
    };
    let started = Instant::now();
    while !tried_since_publish(&get()) {
        assert!(started.elapsed() < Duration::from_secs(20), "{}", get());
        std::thread::sleep(Duration::from_millis(50));
    }
    let v = get();
    assert_eq!(v["volume_id"], "", "never created: {v}");
    // Deleting it contacts nothing: no node plugin, no CreateVolume.
    c.ok(&[
        "volume",
        "delete",
        "--force",
        "never",
        "--wait",
        "--timeout",
        "20s",
    ]);
    assert_eq!(c.plugin_volumes(), 0);
}

#[test]
fn creating_a_volume_without_topology_needs_no_healthy_node() {
    // A controller without VOLUME_ACCESSIBILITY_CONSTRAINTS, and node plugins
    // that never get through a fingerprint: CreateVolume needs no placement.
    let c = unfingerprinted_nodes(None);
    c.ok(&[
        "volume",
        "create",
        "d1",
        "--plugin",
        "hostpath",
        "--wait",
        "--timeout",
        "20s",
    ]);
    assert_eq!(c.plugin_volumes(), 1);
    c.ok(&["volume", "delete", "d1", "--wait", "--timeout", "20s"]);
    assert_eq!(c.plugin_volumes(), 0);
}

#[test]
fn a_volume_waiting_for_a_node_plugin_says_so_and_is_counted() {
    let c = unfingerprinted_nodes(None);
    c.ok(&["volume", "create", "w", "--plugin", "hostpath", "--wait"]);
    c.ok(&["volume", "publish", "w", "--node", "node-a"]);
    let started = Instant::now();
    let v = loop {
        let v: Value = serde_json::from_str(&c.ok(&["volume", "get", "w", "-o", "json"])).unwrap();
        if !v["waiting"].as_str().unwrap().is_empty() {
            break v;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "{v}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        v["waiting"]
            .as_str()
            .unwrap()
            .contains("node plugin of hostpath on node-a to be fingerprinted"),
        "{v}"
    );
    assert!(c.ok(&["volume", "list"]).contains("waiting for the node plugin"));
    let status: Value = serde_json::from_str(&c.ok(&["status", "-o", "json"])).unwrap();
    assert_eq!(status["waiting"], 1, "{status}");
    assert!(c.ok(&["status"]).contains("waiting   1"));

    // The publication was never carried out: undoing it needs no node.
    c.ok(&[
        "volume",
        "unpublish",
        "w",
        "--node",
        "node-a",
        "--wait",
        "--timeout",
        "20s",
    ]);
    let v: Value = serde_json::from_str(&c.ok(&["volume", "get", "w", "-o", "json"])).unwrap();
    assert_eq!(v["publications"].as_array().map(Vec::len), Some(0), "{v}");
    assert_eq!(v["waiting"], "", "{v}");
    c.ok(&["volume", "publish", "w", "--node", "node-a"]);
    c.ok(&["volume", "delete", "--force", "w", "--wait", "--timeout", "20s"]);
    assert_eq!(c.plugin_volumes(), 0);
}
