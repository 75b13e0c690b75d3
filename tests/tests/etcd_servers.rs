//! Several `berth serve` on one real three-member etcd: one leads, the
//! others pass the API on; the leader killed, frozen past its lease, and an
//! etcd member lost mid-storm; a deposed leader's write refused by etcd.
//!
//! Short by default; `BERTH_RELIABILITY=long` kills the leader ten times
//! during 2,000 operations.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use berth::leadership::{Election, Role, ServerInfo};
use berth::store::{DEPOSED, EtcdSettings, EtcdStore, Store};
use berth_tests::storm::{Rng, check_agreement, expected, scripts_on, storm, tail, wait_converged};
use berth_tests::{Cluster, ClusterSpec, EtcdCluster};

const NODES: [(&str, &str); 2] = [("node-a", "a"), ("node-b", "b")];
const LEASE_TTL: Duration = Duration::from_secs(2);

fn long() -> bool {
    std::env::var("BERTH_RELIABILITY").is_ok_and(|v| v == "long")
}

fn three_servers(etcd: &EtcdCluster) -> Cluster {
    Cluster::start(ClusterSpec {
        guests: false,
        workers: 64,
        nodes: NODES.to_vec(),
        agents: true,
        tls: true,
        servers: 3,
        store: Some(format!(
            "{}lease_ttl = \"{}s\"\n",
            etcd.store_config("/berth-ha"),
            LEASE_TTL.as_secs()
        )),
        ..ClusterSpec::default()
    })
}

#[test]
fn followers_pass_the_api_on_and_status_shows_every_server() {
    let etcd = EtcdCluster::start(3);
    let c = three_servers(&etcd);
    let l = c.wait_leader(&[0, 1, 2], Duration::from_secs(30));
    let follower = (l + 1) % 3;
    // The CLI on a follower's socket: the leader answers.
    let run = |args: &[&str]| c.ok_via(follower, args);
    run(&[
        "volume",
        "create",
        "via-follower",
        "--plugin",
        "hostpath",
        "--requisite",
        "zone=a",
        "--wait",
    ]);
    run(&["volume", "publish", "via-follower", "--node", "node-a", "--wait"]);
    let status: serde_json::Value = serde_json::from_str(&run(&["status", "-o", "json"])).unwrap();
    let servers = status["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 3, "{status:#}");
    let leaders: Vec<&str> = servers
        .iter()
        .filter(|s| s["leader"] == true)
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(leaders, [format!("server-{l}")], "exactly one leader: {status:#}");
    let text = run(&["status"]);
    assert!(text.contains(&format!("server    server-{l} (leader")), "{text}");

    // Several sockets on the CLI: a missing one is passed over.
    let both = format!(
        "{}/gone.sock,{}",
        c.dir.path().display(),
        c.serves[follower].api.display()
    );
    let out = std::process::Command::new(berth_tests::bin("berth"))
        .args(["volume", "get", "via-follower", "-o", "json"])
        .env("BERTH_API", &both)
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}", berth_tests::texts(&out));
    assert_eq!(c.plugin_volumes(), 1);
}

/// Kills the leader `kills` times during a storm of creates, publishes and
/// deletes sent to any server, with an etcd member down and back in the
/// middle; then everything acknowledged is there exactly once.
#[test]
fn leader_killed_during_a_storm_loses_and_duplicates_nothing() {
    let (ops, kills) = if long() { (2000, 10) } else { (1000, 3) };
    let mut rng = Rng::seeded();
    let scripts = scripts_on(&mut rng, ops, &NODES);
    let expected = expected(&scripts);
    let mut etcd = EtcdCluster::start(3);
    let mut c = three_servers(&etcd);
    let done = Arc::new(AtomicBool::new(false));
    let driver = {
        let done = done.clone();
        // Each failover takes about the lease's TTL: spread the work over them.
        let handle = storm(c.apis(), scripts, 32, (LEASE_TTL * 2) * kills as u32);
        std::thread::spawn(move || {
            let r = handle.join();
            done.store(true, Ordering::SeqCst);
            r
        })
    };
    let mut killed = 0;
    let mut etcd_down = false;
    while killed < kills && !done.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(200 + rng.below(600)));
        let l = c.wait_leader(&[0, 1, 2], Duration::from_secs(30));
        c.kill_server(l);
        killed += 1;
        if killed == 1 {
            // An etcd member lost while a new leader is chosen.
            etcd.kill(rng.below(3) as usize);
            etcd_down = true;
        }
        let others: Vec<usize> = (0..3).filter(|&i| i != l).collect();
        let next = c.wait_leader(&others, Duration::from_secs(30));
        assert_ne!(next, l, "a follower took over");
        c.start_server(l);
        if etcd_down && killed == 2 {
            for i in 0..3 {
                if !etcd.healthy(i) {
                    etcd.restart(i);
                }
            }
            etcd_down = false;
        }
    }
    driver.join().unwrap().expect("every operation got its answer");
    eprintln!("killed the leader {killed} times during {ops} operations");
    assert_eq!(killed, kills, "the storm ended too soon; make it longer");
    etcd.wait_healthy(Duration::from_secs(30));
    c.wait_nodes(&["node-a", "node-b"], "ready", Duration::from_secs(60));
    wait_converged(&c, Duration::from_secs(120));
    check_agreement(&c, &expected);
}

/// A leader frozen past its lease: another leads meanwhile; thawed, the
/// old one steps down before acting, and the state stays whole.
#[test]
fn a_leader_frozen_past_its_lease_steps_down_when_thawed() {
    let etcd = EtcdCluster::start(3);
    let mut c = three_servers(&etcd);
    let l = c.wait_leader(&[0, 1, 2], Duration::from_secs(30));
    let others: Vec<usize> = (0..3).filter(|&i| i != l).collect();
    // Work in flight on the leader as it freezes.
    let scripts = scripts_on(&mut Rng::seeded(), 150, &NODES);
    let expected = expected(&scripts);
    let driver = storm(
        vec![c.serves[others[0]].api.clone()],
        scripts,
        16,
        Duration::from_secs(4),
    );
    std::thread::sleep(Duration::from_millis(500));
    c.freeze_server(l, true);
    let next = c.wait_leader(&others, Duration::from_secs(30));
    assert_ne!(next, l);
    std::thread::sleep(LEASE_TTL);
    c.freeze_server(l, false);
    driver.join().expect("every operation got its answer");
    let log = || std::fs::read_to_string(&c.serves[l].log).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !log().contains(&format!("server=server-{l} leader=server-{next}")) {
        assert!(
            Instant::now() < deadline,
            "the thawed leader never followed:\n{}",
            tail(&log())
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        log().contains("stepping down") || log().contains("stepped down"),
        "{}",
        tail(&log())
    );
    assert_eq!(
        c.leader(&[l]),
        Some(next),
        "asked through the old leader, the new one answers"
    );
    c.wait_nodes(&["node-a", "node-b"], "ready", Duration::from_secs(60));
    wait_converged(&c, Duration::from_secs(120));
    check_agreement(&c, &expected);
    c.kill_server(l);
}

/// The fence itself: a store opened by a leader refuses to write once
/// another server has won, whatever the first one believes.
#[test]
fn a_deposed_leaders_write_is_refused_by_etcd() {
    let etcd = EtcdCluster::start(3);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let settings = |name: &str| {
            EtcdSettings::new(etcd.endpoints(), Some("/berth-fence".into()))
                .and_then(|s| s.server(Some(name.into()), Some(LEASE_TTL)))
                .unwrap()
        };
        let me = |name: &str| ServerInfo {
            name: name.into(),
            api: format!("/tmp/{name}.sock"),
            forward: None,
        };
        let a = Election::join(settings("a"), me("a")).await.unwrap();
        let fence = leading(&a).await;
        let store = EtcdStore::connect(settings("a"), Some(fence)).await.unwrap();
        let node = |n: &str| berth::store::NodeRecord {
            name: n.into(),
            labels: Default::default(),
            plugins: Default::default(),
            draining: false,
            forgotten: false,
            cert: None,
            paths: None,
        };
        store
            .put_node(&node("while-leading"))
            .await
            .expect("the leader writes");
        // Another server wins while `a` still holds its store.
        let b = Election::join(settings("b"), me("b")).await.unwrap();
        a.resign().await;
        let b_fence = leading(&b).await;
        let refused = store.put_node(&node("after")).await.unwrap_err().to_string();
        assert!(refused.contains(DEPOSED), "{refused}");
        let fresh = EtcdStore::connect(settings("b"), Some(b_fence)).await.unwrap();
        let names: Vec<String> = fresh.load_nodes().unwrap().into_iter().map(|n| n.name).collect();
        assert_eq!(names, ["while-leading"], "the deposed write left nothing");
        fresh
            .put_node(&node("b-writes"))
            .await
            .expect("the new leader writes");
    });
}

async fn leading(e: &Election) -> berth::store::Fence {
    let mut role = e.role();
    let found = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if let Role::Leader { fence } = &*role.borrow_and_update() {
                return fence.clone();
            }
            role.changed().await.unwrap();
        }
    })
    .await;
    found.expect("elected within 20 s")
}

/// A prefix written before servers were elected (no leader, servers or CA
/// keys; writes unfenced) is served as it was by an elected server.
#[test]
fn a_prefix_written_without_an_election_is_served_as_it_was() {
    use berth::model::{VolumeRecord, VolumeSpec};
    let etcd = EtcdCluster::start(3);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let settings = EtcdSettings::new(etcd.endpoints(), Some("/berth-before".into())).unwrap();
        let store = EtcdStore::connect(settings, None).await.unwrap();
        let mut record = VolumeRecord::new("00000000000000000000000000000001".into(), VolumeSpec::default());
        record.spec = VolumeSpec {
            name: "kept".into(),
            plugin: "hostpath".into(),
            required_bytes: 1 << 20,
            ..Default::default()
        };
        store.put(&record).await.unwrap();
    });
    let c = Cluster::start(ClusterSpec {
        guests: false,
        store: Some(etcd.store_config("/berth-before")),
        ..ClusterSpec::default()
    });
    c.wait_until("the kept volume created", |v| {
        v.iter().any(|x| x["name"] == "kept" && x["state"] == "available")
    });
    assert_eq!(c.plugin_volumes(), 1);
}

/// Without a TLS cluster endpoint a follower cannot reach the leader: it
/// says who leads and where, and the leader's own socket answers.
#[test]
fn without_a_tls_endpoint_a_follower_names_the_leader() {
    let etcd = EtcdCluster::start(3);
    let c = Cluster::start(ClusterSpec {
        guests: false,
        servers: 2,
        store: Some(etcd.store_config("/berth-local")),
        ..ClusterSpec::default()
    });
    let l = (0..2)
        .find(|&i| c.berth_via(i, &["status"]).status.success())
        .expect("the leader answers on its own socket");
    let out = c.berth_via(1 - l, &["status"]);
    let (_, stderr) = berth_tests::texts(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains("UNAVAILABLE")
            && stderr.contains(&format!("follows server-{l}"))
            && stderr.contains("cluster_address"),
        "{stderr}"
    );
}
