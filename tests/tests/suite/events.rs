//! A volume's story: its requests, steps done and steps failed, kept with
//! the volume in the store, shown by `volume events`, `volume get` and
//! `--wait`, and still there after the server is killed.

use berth_tests::{Cluster, ClusterSpec};
use serde_json::Value;

fn events(c: &Cluster, name: &str) -> Vec<Value> {
    let out: Value = serde_json::from_str(&c.ok(&["volume", "events", name, "-o", "json"])).unwrap();
    out.as_array().cloned().unwrap()
}

fn seqs(events: &[Value]) -> Vec<u64> {
    events.iter().map(|e| e["seq"].as_u64().unwrap()).collect()
}

#[test]
fn events_tell_a_volumes_story_and_survive_a_kill() {
    let mut c = Cluster::start(ClusterSpec {
        guests: false,
        // Publishing fails on the controller every time: failures pile up.
        plugin_args: vec![
            "--fault-calls",
            "ControllerPublishVolume",
            "--fault",
            "UNAVAILABLE=1.0",
        ],
        extra: "events_per_volume = 4",
        ..ClusterSpec::default()
    });

    // --wait prints the events as they happen.
    let out = c.ok(&["volume", "create", "story", "--plugin", "hostpath", "--wait"]);
    assert!(out.contains("  request  OK  create on plugin hostpath"), "{out}");
    assert!(out.contains("CreateVolume  OK  created as "), "{out}");

    c.ok(&["volume", "publish", "story", "--node", "node-a"]);
    let failing = |e: &Value| e["step"] == "ControllerPublishVolume on node-a" && e["code"] == "UNAVAILABLE";
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let before = loop {
        let now = events(&c, "story");
        if now.iter().filter(|e| failing(e)).count() >= 4 {
            break now;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no failures recorded: {now:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(before.len(), 4, "only the latest events_per_volume are kept");
    let numbers = seqs(&before);
    assert!(numbers.windows(2).all(|w| w[1] == w[0] + 1), "{numbers:?}");
    assert!(
        numbers[0] > 3,
        "older events were dropped, not renumbered: {numbers:?}"
    );
    let failure = before.iter().find(|e| failing(e)).unwrap();
    let message = failure["message"].as_str().unwrap();
    assert!(
        message.contains("injected fault") && message.contains("retrying in"),
        "{message}"
    );
    assert!(failure["at"].as_str().unwrap().ends_with('Z'));

    // `volume get` shows the tail.
    let get = c.ok(&["volume", "get", "story"]);
    assert!(get.contains("\nevents:\n"), "{get}");
    assert!(
        get.contains("  ControllerPublishVolume on node-a  UNAVAILABLE  CSI plugin at hostpath"),
        "{get}"
    );

    c.kill_serve();
    c.start_serve();
    let after = events(&c, "story");
    let kept: Vec<&Value> = after
        .iter()
        .filter(|e| e["seq"].as_u64().unwrap() <= numbers[3])
        .collect();
    assert!(
        before
            .iter()
            .rev()
            .take(kept.len())
            .rev()
            .eq(kept.iter().copied()),
        "the events before the kill are still there:\nbefore {before:?}\nafter {after:?}"
    );
    assert!(!kept.is_empty());

    // Deleting is a request like the others, and is told.
    c.ok(&["volume", "unpublish", "story", "--node", "node-a"]);
    let last = events(&c, "story").last().cloned().unwrap();
    assert_eq!(last["step"], "request");
    assert_eq!(last["message"], "unpublish from node-a");
}

/// Every node step is an event, staging included (the sample plugin
/// stages); and what was asked — size, requisite and preferred topology,
/// labels — stays visible in `volume get` and `explain` when the plugin
/// reports no topology of its own.
#[test]
fn every_node_step_is_an_event_and_what_was_asked_stays_shown() {
    let c = Cluster::start(ClusterSpec {
        guests: false,
        controller_topology: None,
        ..ClusterSpec::default()
    });
    c.ok(&[
        "volume",
        "create",
        "asked",
        "--plugin",
        "hostpath",
        "--size",
        "2GiB",
        "--limit",
        "3GiB",
        "--requisite",
        "zone=a",
        "--preferred",
        "zone=a",
        "--label",
        "team=db",
        "--wait",
    ]);
    c.ok(&["volume", "publish", "asked", "--wait"]);
    c.ok(&["volume", "unpublish", "asked", "--wait"]);
    let steps: Vec<String> = events(&c, "asked")
        .iter()
        .map(|e| e["step"].as_str().unwrap().to_string())
        .filter(|s| s != "request")
        .collect();
    let node_steps: Vec<&str> = steps
        .iter()
        .map(String::as_str)
        .filter(|s| s.ends_with(" on node-a"))
        .collect();
    assert_eq!(
        node_steps,
        [
            "ControllerPublishVolume on node-a",
            "NodeStageVolume on node-a",
            "NodePublishVolume on node-a",
            "NodeUnpublishVolume on node-a",
            "NodeUnstageVolume on node-a",
            "ControllerUnpublishVolume on node-a",
        ],
        "{steps:?}"
    );

    let v: Value = serde_json::from_str(&c.ok(&["volume", "get", "asked", "-o", "json"])).unwrap();
    assert_eq!(v["required_bytes"], 2u64 << 30, "{v}");
    assert_eq!(v["limit_bytes"], 3u64 << 30, "{v}");
    assert_eq!(v["requisite_topology"][0]["zone"], "a", "{v}");
    assert_eq!(v["preferred_topology"][0]["zone"], "a", "{v}");
    assert!(v["accessible_topology"].as_array().unwrap().is_empty(), "{v}");
    let text = c.ok(&["volume", "get", "asked"]);
    for line in [
        "size asked    at least 2GiB, at most 3GiB",
        "requisite     zone=a",
        "preferred     zone=a",
        "labels        team=db",
    ] {
        assert!(text.contains(line), "{line:?} missing from:\n{text}");
    }
    let explained = c.ok(&["volume", "explain", "asked"]);
    assert!(explained.contains("asked      requisite zone=a"), "{explained}");
    let explained: Value =
        serde_json::from_str(&c.ok(&["volume", "explain", "asked", "-o", "json"])).unwrap();
    assert_eq!(explained["requisite_topology"][0], "zone=a", "{explained}");
}
