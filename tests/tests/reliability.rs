//! Reliability under crashes and plugin faults: real `berth serve` and sample
//! plugin processes, killed and restarted for real. Each test stops by itself.
//!
//! Short by default (CI); `BERTH_RELIABILITY=long` (or `cargo xtask
//! reliability`) runs the long versions: 2,000 operations and 20 kills, and
//! 400 volumes through a faulty plugin.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use berth_proto::berth::v1 as api;
use berth_proto::berth::v1::berth_client::BerthClient;
use berth_tests::{Cluster, ClusterSpec};
use tonic::Code;
use tonic::transport::Channel;

fn long() -> bool {
    std::env::var("BERTH_RELIABILITY").is_ok_and(|v| v == "long")
}

/// A small deterministic generator (xorshift), so a failing run can be repeated.
struct Rng(u64);

impl Rng {
    fn seeded() -> Rng {
        let seed = std::env::var("BERTH_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            });
        eprintln!("seed {seed} (set BERTH_SEED to repeat)");
        Rng(seed | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What the operator asked for one volume, in order.
#[derive(Clone, Debug)]
struct Script {
    name: String,
    zone: &'static str,
    node: &'static str,
    delete: bool,
}

impl Script {
    fn ops(&self) -> usize {
        2 + usize::from(self.delete)
    }
}

fn spec(s: &Script) -> api::VolumeSpec {
    api::VolumeSpec {
        name: s.name.clone(),
        plugin: "hostpath".into(),
        required_bytes: 1 << 20,
        requisite_topology: vec![api::Topology {
            segments: [("zone".to_string(), s.zone.to_string())].into(),
        }],
        ..Default::default()
    }
}

/// Sends a request until Berth gives a definite answer: an outcome lost
/// with a crashed host is unknown, so the request is repeated; every
/// request is idempotent. Returns the final status code.
async fn until_answered<F, Fut, T>(what: &str, mut call: F) -> Code
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        match call().await {
            Ok(_) => return Code::Ok,
            Err(s) if matches!(s.code(), Code::Unavailable | Code::Unknown | Code::Cancelled) => {
                assert!(Instant::now() < deadline, "{what}: no answer for 300 s: {s}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(s) => return s.code(),
        }
    }
}

async fn run_script(client: BerthClient<Channel>, s: Script) {
    let code = until_answered(&format!("create {}", s.name), || {
        let (mut cl, spec) = (client.clone(), spec(&s));
        async move {
            cl.create_volume(api::CreateVolumeRequest { spec: Some(spec) })
                .await
        }
    })
    .await;
    assert_eq!(code, Code::Ok, "create {}", s.name);
    let code = until_answered(&format!("publish {}", s.name), || {
        let mut cl = client.clone();
        let request = api::PublishVolumeRequest {
            name: s.name.clone(),
            node: s.node.into(),
            readonly: false,
        };
        async move { cl.publish_volume(request).await }
    })
    .await;
    assert_eq!(code, Code::Ok, "publish {}", s.name);
    if s.delete {
        let code = until_answered(&format!("delete {}", s.name), || {
            let mut cl = client.clone();
            let request = api::DeleteVolumeRequest { name: s.name.clone() };
            async move { cl.delete_volume(request).await }
        })
        .await;
        // NotFound: an earlier attempt deleted it, and its answer was lost.
        assert!(
            matches!(code, Code::Ok | Code::NotFound),
            "delete {}: {code:?}",
            s.name
        );
    }
}

/// Runs every script, `parallel` at a time, on a runtime of its own thread,
/// starting them evenly over `over` (at least).
fn storm(api: PathBuf, scripts: Vec<Script>, parallel: usize, over: Duration) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let client = BerthClient::new(berth::csi::unix_channel(&api));
            let limit = Arc::new(tokio::sync::Semaphore::new(parallel));
            let mut tasks = tokio::task::JoinSet::new();
            let pace = over / scripts.len().max(1) as u32;
            let started = tokio::time::Instant::now();
            for (i, s) in scripts.into_iter().enumerate() {
                tokio::time::sleep_until(started + pace * i as u32).await;
                let permit = limit.clone().acquire_owned().await.unwrap();
                let client = client.clone();
                tasks.spawn(async move {
                    run_script(client, s).await;
                    drop(permit);
                });
            }
            while let Some(r) = tasks.join_next().await {
                r.expect("a script failed");
            }
        });
    })
}

/// Waits until no volume has work queued, running or waiting for a retry.
fn wait_converged(c: &Cluster, within: Duration) -> api::SummaryResponse {
    let deadline = Instant::now() + within;
    loop {
        if let Some(s) = c.summary()
            && s.busy == 0
            && s.retrying == 0
        {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "not converged after {within:?}: {:?}\n{}",
            c.summary(),
            tail(&c.log())
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// The plugin's own records: volume id → (CSI name, node ids published to).
fn plugin_records(c: &Cluster) -> BTreeMap<String, (String, BTreeSet<String>)> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(c.volumes_dir.join("hostpath/volumes")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let rec: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let nodes = rec["published_nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap().to_string())
            .collect();
        out.insert(
            rec["id"].as_str().unwrap().to_string(),
            (rec["name"].as_str().unwrap().to_string(), nodes),
        );
    }
    out
}

/// Berth's volumes equal the plugin's, none leaked and none twice, and every
/// publication is where Berth says it is, on the plugin and on the node.
fn check_agreement(c: &Cluster, expected: &BTreeMap<String, &'static str>) {
    let volumes = c.volumes();
    let names: BTreeSet<String> = volumes
        .iter()
        .map(|v| v["name"].as_str().unwrap().to_string())
        .collect();
    let wanted: BTreeSet<String> = expected.keys().cloned().collect();
    let extra: Vec<&serde_json::Value> = volumes
        .iter()
        .filter(|v| !wanted.contains(v["name"].as_str().unwrap()))
        .collect();
    assert_eq!(
        names,
        wanted,
        "Berth's volumes are the ones asked for; not asked for: {extra:#?}\n{}",
        c.log()
            .lines()
            .filter(|l| extra.iter().any(|v| {
                l.contains(v["name"].as_str().unwrap()) || l.contains(v["id"].as_str().unwrap())
            }))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let plugin = plugin_records(c);
    let mut published_dirs = BTreeSet::new();
    let mut targets = BTreeSet::new();
    for v in &volumes {
        let name = v["name"].as_str().unwrap();
        assert_eq!(v["state"], "published", "{name}: {v:#}");
        let id = v["volume_id"].as_str().unwrap();
        let (csi_name, nodes) = plugin
            .get(id)
            .unwrap_or_else(|| panic!("{name}: volume {id} is not on the plugin"));
        assert_eq!(csi_name, v["csi_name"].as_str().unwrap(), "{name}");
        let pubs = v["publications"].as_array().unwrap();
        assert_eq!(pubs.len(), 1, "{name}: {v:#}");
        let node = pubs[0]["node"].as_str().unwrap();
        assert_eq!(node, expected[name], "{name}");
        assert_eq!(
            nodes,
            &BTreeSet::from([node.to_string()]),
            "{name}: the plugin has it published exactly there"
        );
        let target = PathBuf::from(pubs[0]["target_path"].as_str().unwrap());
        assert_eq!(
            std::fs::canonicalize(&target).unwrap_or_else(|e| panic!("{name}: {}: {e}", target.display())),
            std::fs::canonicalize(c.volume_data(id)).unwrap(),
            "{name}: the node shows the volume's data"
        );
        published_dirs.insert(target.parent().unwrap().to_path_buf());
        targets.insert(target);
    }
    assert_eq!(plugin.len(), volumes.len(), "the plugin holds no other volumes");
    for dir in published_dirs {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            assert!(
                targets.contains(&path),
                "{} is published but Berth does not know it",
                path.display()
            );
        }
    }
}

/// The nodes of the default cluster, each in its own zone.
const TWO_NODES: [(&str, &str); 2] = [("node-a", "a"), ("node-b", "b")];

fn scripts(rng: &mut Rng, ops: usize) -> Vec<Script> {
    scripts_on(rng, ops, &TWO_NODES)
}

/// Scripts for volumes spread over `nodes` (name, zone).
fn scripts_on(rng: &mut Rng, ops: usize, nodes: &[(&'static str, &'static str)]) -> Vec<Script> {
    let mut out = Vec::new();
    let mut total = 0;
    while total < ops {
        let (node, zone) = nodes[rng.below(nodes.len() as u64) as usize];
        let s = Script {
            name: format!("vol-{:05}", out.len()),
            zone,
            node,
            delete: rng.below(2) == 0,
        };
        total += s.ops();
        out.push(s);
    }
    out
}

fn expected(scripts: &[Script]) -> BTreeMap<String, &'static str> {
    scripts
        .iter()
        .filter(|s| !s.delete)
        .map(|s| (s.name.clone(), s.node))
        .collect()
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
        let handle = storm(c.api.clone(), scripts, 32, Duration::from_millis(800) * kills);
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
        let handle = storm(c.api.clone(), scripts, 32, Duration::from_millis(1500) * rounds);
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
    let driver = storm(c.api.clone(), scripts, 32, Duration::from_secs(2));
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
