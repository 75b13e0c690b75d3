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
