//! A storm of operations from concurrent clients, and the checks after it:
//! every acknowledged operation done, nothing made twice or leaked, every
//! publication where Berth says it is.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_proto::berth::v1 as api;
use berth_proto::berth::v1::berth_client::BerthClient;
use tonic::Code;
use tonic::transport::Channel;

use crate::Cluster;

/// A small deterministic generator (xorshift), so a failing run can be repeated.
pub struct Rng(u64);

impl Rng {
    pub fn seeded() -> Rng {
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
        Rng::new(seed)
    }

    /// The same sequence for the same seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    fn step(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.step() % n
    }
}

/// What the operator asked for one volume, in order.
#[derive(Clone, Debug)]
pub struct Script {
    pub name: String,
    pub zone: &'static str,
    pub node: &'static str,
    pub delete: bool,
}

impl Script {
    pub fn ops(&self) -> usize {
        2 + usize::from(self.delete)
    }
}

pub fn spec(s: &Script) -> api::VolumeSpec {
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
pub async fn until_answered<F, Fut, T>(what: &str, mut call: F) -> Code
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    let deadline = Instant::now() + Duration::from_secs(300);
    for attempt in 0.. {
        match call(attempt).await {
            Ok(_) => return Code::Ok,
            Err(s) if matches!(s.code(), Code::Unavailable | Code::Unknown | Code::Cancelled) => {
                assert!(Instant::now() < deadline, "{what}: no answer for 300 s: {s}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(s) => {
                eprintln!("{what}: answered {:?}: {}", s.code(), s.message());
                return s.code();
            }
        }
    }
    unreachable!("the attempts never run out")
}

/// The clients of every server's API: a call that found no answer is
/// repeated on the next one (a follower passes it on to the leader).
pub type Clients = Arc<Vec<BerthClient<Channel>>>;

pub async fn run_script(clients: Clients, s: Script) {
    let client = |attempt: usize| clients[attempt % clients.len()].clone();
    let code = until_answered(&format!("create {}", s.name), |attempt| {
        let (mut cl, spec) = (client(attempt), spec(&s));
        async move {
            cl.create_volume(api::CreateVolumeRequest { spec: Some(spec) })
                .await
        }
    })
    .await;
    assert_eq!(code, Code::Ok, "create {}", s.name);
    let code = until_answered(&format!("publish {}", s.name), |attempt| {
        let mut cl = client(attempt);
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
        let code = until_answered(&format!("delete {}", s.name), |attempt| {
            let mut cl = client(attempt);
            let request = api::DeleteVolumeRequest {
                name: s.name.clone(),
                force: true,
            };
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
/// starting them evenly over `over` (at least), against any of `apis`.
pub fn storm(
    apis: Vec<PathBuf>,
    scripts: Vec<Script>,
    parallel: usize,
    over: Duration,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let clients: Clients = Arc::new(
                apis.iter()
                    .map(|api| BerthClient::new(berth::csi::unix_channel(api)))
                    .collect(),
            );
            let limit = Arc::new(tokio::sync::Semaphore::new(parallel));
            let mut tasks = tokio::task::JoinSet::new();
            let pace = over / scripts.len().max(1) as u32;
            let started = tokio::time::Instant::now();
            for (i, s) in scripts.into_iter().enumerate() {
                tokio::time::sleep_until(started + pace * i as u32).await;
                let permit = limit.clone().acquire_owned().await.unwrap();
                let clients = clients.clone();
                tasks.spawn(async move {
                    run_script(clients, s).await;
                    drop(permit);
                });
            }
            while let Some(r) = tasks.join_next().await {
                r.expect("a script failed");
            }
        });
    })
}

/// Waits until no volume has work queued, running, waiting for a retry, or
/// waiting for something else (a plugin's fingerprint, a node): in a storm
/// every plugin comes back, so a volume still waiting has not converged.
pub fn wait_converged(c: &Cluster, within: Duration) -> api::SummaryResponse {
    let deadline = Instant::now() + within;
    loop {
        if let Some(s) = c.summary()
            && s.busy == 0
            && s.retrying == 0
            && s.waiting == 0
        {
            return s;
        }
        if Instant::now() >= deadline {
            // What each stuck volume says of itself, before the log's tail.
            let stuck: Vec<String> = c
                .volumes()
                .iter()
                .filter(|v| {
                    v["failure"].as_str().is_some_and(|f| !f.is_empty())
                        || v["waiting"].as_str().is_some_and(|w| !w.is_empty())
                })
                .map(|v| v.to_string())
                .collect();
            panic!(
                "not converged after {within:?}: {:?}\nstuck: {stuck:#?}\n{}",
                c.summary(),
                tail(&c.log())
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// The plugin's own records: volume id → (CSI name, node ids published to).
pub fn plugin_records(c: &Cluster) -> BTreeMap<String, (String, BTreeSet<String>)> {
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
pub fn check_agreement(c: &Cluster, expected: &BTreeMap<String, &'static str>) {
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
pub const TWO_NODES: [(&str, &str); 2] = [("node-a", "a"), ("node-b", "b")];

pub fn scripts(rng: &mut Rng, ops: usize) -> Vec<Script> {
    scripts_on(rng, ops, &TWO_NODES)
}

/// Scripts for volumes spread over `nodes` (name, zone).
pub fn scripts_on(rng: &mut Rng, ops: usize, nodes: &[(&'static str, &'static str)]) -> Vec<Script> {
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

pub fn expected(scripts: &[Script]) -> BTreeMap<String, &'static str> {
    scripts
        .iter()
        .filter(|s| !s.delete)
        .map(|s| (s.name.clone(), s.node))
        .collect()
}
