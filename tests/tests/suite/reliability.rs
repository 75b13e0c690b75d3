//! Reliability under crashes and plugin faults: real `berth serve` and sample
//! plugin processes, killed and restarted for real. Each test stops by itself.
//!
//! Short by default (CI); `BERTH_RELIABILITY=long` (or `cargo xtask
//! reliability`) runs the long versions: 2,000 operations and 20 kills, and
//! 400 volumes through a faulty plugin.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use berth_tests::storm::{Rng, Script, check_agreement, expected, scripts, storm, wait_converged};
use berth_tests::{Cluster, ClusterSpec};

fn long() -> bool {
    std::env::var("BERTH_RELIABILITY").is_ok_and(|v| v == "long")
}

#[test]
fn kill_9_during_a_storm_loses_and_duplicates_nothing() {
    let (ops, kills) = if long() { (2000, 20) } else { (300, 3) };
    let mut rng = Rng::seeded();
    let scripts = scripts(&mut rng, ops);
    let expected = expected(&scripts);
    let mut c = Cluster::start(ClusterSpec {
        workers: 64,
        ..Default::default()
    });
    let done = Arc::new(AtomicBool::new(false));
    let driver = {
        let done = done.clone();
        // Spread over enough time for every kill and restart.
        let handle = storm(
            vec![c.api.clone()],
            scripts,
            32,
            Duration::from_millis(800) * kills,
        );
        std::thread::spawn(move || {
            let r = handle.join();
            done.store(true, Ordering::SeqCst);
            r
        })
    };
    let mut killed = 0;
    while killed < kills && !done.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(50 + rng.below(250)));
        c.kill_serve();
        killed += 1;
        c.start_serve();
    }
    driver.join().unwrap().expect("every operation got its answer");
    eprintln!("killed berth serve {killed} times during {ops} operations");
    assert_eq!(killed, kills, "the storm ended too soon; make it longer");
    wait_converged(&c, Duration::from_secs(120));
    check_agreement(&c, &expected);
    // And once more from a cold start: the store alone says the same.
    c.kill_serve();
    c.start_serve();
    wait_converged(&c, Duration::from_secs(60));
    check_agreement(&c, &expected);
}

#[test]
fn kill_9_of_an_agent_and_the_server_during_a_storm_loses_and_duplicates_nothing() {
    const NODES: [(&str, &str); 3] = [("node-a", "a"), ("node-b", "b"), ("node-c", "c")];
    let (volumes, rounds) = if long() { (1000, 6) } else { (300, 2) };
    let mut rng = Rng::seeded();
    // Only creates and publishes: every volume ends published somewhere.
    let scripts: Vec<Script> = (0..volumes)
        .map(|i| {
            let (node, zone) = NODES[rng.below(3) as usize];
            Script {
                name: format!("vol-{i:05}"),
                zone,
                node,
                delete: false,
            }
        })
        .collect();
    let expected = expected(&scripts);
    let mut c = Cluster::start(ClusterSpec {
        workers: 64,
        nodes: NODES.to_vec(),
        agents: true,
        tls: true,
        ..Default::default()
    });
    let done = Arc::new(AtomicBool::new(false));
    let driver = {
        let done = done.clone();
        let handle = storm(
            vec![c.api.clone()],
            scripts,
            32,
            Duration::from_millis(1500) * rounds,
        );
        std::thread::spawn(move || {
            let r = handle.join();
            done.store(true, Ordering::SeqCst);
            r
        })
    };
    let mut rounds_done = 0;
    while rounds_done < rounds && !done.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100 + rng.below(300)));
        let (agent, _) = NODES[rng.below(3) as usize];
        c.agent(agent).kill();
        std::thread::sleep(Duration::from_millis(rng.below(300)));
        c.kill_serve();
        c.agent(agent).start();
        c.start_serve();
        rounds_done += 1;
    }
    driver.join().unwrap().expect("every operation got its answer");
    assert_eq!(rounds_done, rounds, "the storm ended too soon; make it longer");
    c.wait_nodes(&["node-a", "node-b", "node-c"], "ready", Duration::from_secs(30));
    wait_converged(&c, Duration::from_secs(120));
    c.wait_until("every volume published", |v| {
        v.iter().all(|x| x["state"] == "published")
    });
    check_agreement(&c, &expected);
}

#[test]
fn a_faulty_restarting_plugin_converges_without_giving_up() {
    let volumes = if long() { 400 } else { 60 };
    let mut rng = Rng::seeded();
    let scripts = scripts(&mut rng, volumes * 5 / 2);
    let expected = expected(&scripts);
    let mut c = Cluster::start(ClusterSpec {
        plugin_args: vec![
            "--fault",
            "UNAVAILABLE=0.3",
            "--fault",
            "DEADLINE_EXCEEDED=0.05",
            "--hang-rate",
            "0.02",
        ],
        // Hung calls end at the deadline; the retry policy retries those
        // codes with backoff and gives up only after max-attempts.
        plugin_extra: "deadline = \"300ms\"",
        retry_settings: "base-ms = \"10\", max-ms = \"100\", max-attempts = \"40\"",
        workers: 64,
        ..Default::default()
    });
    let started = Instant::now();
    let driver = storm(vec![c.api.clone()], scripts, 32, Duration::from_secs(2));
    // The controller plugin dies and comes back mid-run.
    std::thread::sleep(Duration::from_millis(700));
    c.controller.kill();
    std::thread::sleep(Duration::from_millis(300));
    c.controller.restart();
    driver.join().expect("every operation got its answer");
    let s = wait_converged(&c, Duration::from_secs(if long() { 600 } else { 180 }));
    eprintln!("converged after {:?}: {s:?}", started.elapsed());
    let failed: Vec<String> = c
        .volumes()
        .iter()
        .filter(|v| v["state"] == "failed")
        .map(|v| format!("{}: {}", v["name"], v["failure"]))
        .collect();
    assert!(failed.is_empty(), "no give-ups: {failed:#?}\n{s:?}");
    let log = c.log();
    let failures = log.matches("step failed").count();
    assert!(
        failures > volumes / 2,
        "faults were injected and retried ({failures})"
    );
    assert!(
        log.contains("DEADLINE_EXCEEDED"),
        "some calls hung past the deadline"
    );
    check_agreement(&c, &expected);
}
