//! Failover: three `berth serve` on a three-member etcd with one agent per
//! node; the leader is killed with SIGKILL again and again, and each time
//! the clock runs from the kill until a volume is created and published
//! through a surviving server's API (a follower passing it on to the new
//! leader, its agent back). The goal is a median of at most twice the lease TTL.
//!
//! With `--volumes N`, the prefix holds N volumes of realistic size before
//! the servers start (4 KiB of parameters and 10 events each, created and
//! converged, so the new leader has nothing to call a plugin about): the
//! goal is the same median as with an empty store.
//!
//! With `--python`, the cluster's policy set is the three Python sample
//! guests (naming, placement, retry: 18 MB each, seconds to compile): each
//! follower keeps them prepared and compiled, and the clock includes the new
//! leader's first decisions. The goal is the same.
//!
//! `cargo xtask bench-failover [--kills N] [--lease-ttl SECONDS] [--volumes N] [--python]`
//! (release binaries; default 10 kills, a 2 s lease, no volumes, no modules).

use std::time::{Duration, Instant};

use berth_proto::berth::v1 as api;
use berth_proto::berth::v1::berth_client::BerthClient;
use berth_tests::{Cluster, ClusterSpec, EtcdCluster};

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().unwrap_or_else(|_| panic!("{name} takes a number")))
        .unwrap_or(default)
}

/// Creates and publishes `name` through `api`, repeating what found no
/// leader; false when nothing answered for 120 s.
async fn create_and_publish(api: &std::path::Path, name: &str) -> bool {
    let mut client = BerthClient::new(berth::csi::unix_channel(api));
    let spec = api::VolumeSpec {
        name: name.into(),
        plugin: "hostpath".into(),
        required_bytes: 1 << 20,
        ..Default::default()
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if Instant::now() >= deadline {
            eprintln!("{name}: no answer for 120 s");
            return false;
        }
        let created = client
            .create_volume(api::CreateVolumeRequest {
                spec: Some(spec.clone()),
            })
            .await;
        if created.is_err() {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        }
        let published = client
            .publish_volume(api::PublishVolumeRequest {
                name: name.into(),
                node: "node-a".into(),
                readonly: false,
            })
            .await;
        match published {
            Ok(v) if v.get_ref().state == "published" => return true,
            _ => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

/// A created volume as a busy site's store holds it: 4 KiB of parameters,
/// a backend, and its latest 10 events.
fn realistic(i: usize) -> berth::model::VolumeRecord {
    use berth::model::{Backend, VecMap, VolumeRecord, VolumeSpec};
    let spec = VolumeSpec {
        name: format!("stored-{i:07}"),
        plugin: "hostpath".into(),
        required_bytes: 1 << 30,
        parameters: VecMap::from([("profile".into(), "p".repeat(4096))]),
        labels: VecMap::from([("app".into(), format!("app-{}", i % 100))]),
        ..Default::default()
    };
    let mut r = VolumeRecord::new(format!("{:032x}", 0xfa11_u128 << 64 | i as u128), spec);
    r.csi_name = Some(format!("pv-stored-{i:07}"));
    r.create_sent = true;
    r.backend = Some(std::sync::Arc::new(Backend {
        volume_id: format!("hp-{i:032x}"),
        capacity_bytes: 1 << 30,
        sized_for: None,
        context: VecMap::new(),
        accessible_topology: vec![VecMap::from([("zone".into(), "a".into())])],
        node_expansion_required: false,
        mutable_parameters: Default::default(),
    }));
    for e in 0..10u64 {
        r.note(
            10,
            1_700_000_000_000 + e,
            "CreateVolume".into(),
            "UNAVAILABLE",
            format!("attempt {e}; the backend was busy, retrying in 2s (a message of ordinary length)"),
        );
    }
    r.generation = 12;
    r
}

/// Writes `n` realistic volumes below `prefix`.
fn fill(etcd: &EtcdCluster, prefix: &str, n: usize) {
    let took = etcd.fill(prefix, n, realistic);
    let bytes = serde_json::to_vec(&realistic(0)).unwrap().len();
    eprintln!(
        "{n} volumes of {bytes} bytes each written to etcd in {:.1} s",
        took.as_secs_f64()
    );
}

/// Waits until every server but `leader` says its warm copy was read since
/// it last started (`reads_before`: its count of reads then).
fn wait_warm(c: &Cluster, leader: usize, reads_before: &[usize]) {
    let deadline = Instant::now() + Duration::from_secs(600);
    for i in (0..3).filter(|&i| i != leader) {
        loop {
            let log = std::fs::read_to_string(&c.serves[i].log).unwrap_or_default();
            if log.matches("warm copy of the store read").count() > reads_before[i] {
                break;
            }
            assert!(Instant::now() < deadline, "server-{i} never read its warm copy");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn warm_reads(c: &Cluster) -> Vec<usize> {
    (0..3)
        .map(|i| {
            std::fs::read_to_string(&c.serves[i].log)
                .unwrap_or_default()
                .matches("warm copy of the store read")
                .count()
        })
        .collect()
}

fn main() {
    let kills = arg("--kills", 10) as usize;
    let ttl = arg("--lease-ttl", 2);
    let volumes = arg("--volumes", 0) as usize;
    let python = std::env::args().any(|a| a == "--python");
    let python_tables = python.then(|| {
        ["berth_naming_py", "berth_placement_py", "berth_retry_py"]
            .iter()
            .map(|name| {
                let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join(format!("../target/guests/python/{name}.wasm"));
                assert!(
                    path.exists(),
                    "{} is not built (cargo xtask guests)",
                    path.display()
                );
                format!("[[policy]]\nmodule = \"{}\"\n", path.display())
            })
            .collect::<String>()
    });
    let etcd = EtcdCluster::start(3);
    if volumes > 0 {
        fill(&etcd, "/berth-failover", volumes);
    }
    let mut c = Cluster::start(ClusterSpec {
        guests: false,
        policy_tables: python_tables.as_deref(),
        nodes: vec![("node-a", "a")],
        agents: true,
        tls: true,
        servers: 3,
        store: Some(format!(
            "{}lease_ttl = \"{ttl}s\"\n",
            etcd.store_config("/berth-failover")
        )),
        ..ClusterSpec::default()
    });
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut times = Vec::new();
    let mut reads = vec![0; 3];
    for k in 0..kills {
        let l = c.wait_leader(&[0, 1, 2], Duration::from_secs(600));
        // The followers have their warm copies, as they would long after a start.
        wait_warm(&c, l, &reads);
        // Warm: the leader has served a volume before it dies.
        assert!(rt.block_on(create_and_publish(&c.serves[l].api, &format!("warm-{k}"))));
        let via = (l + 1) % 3;
        let killed = Instant::now();
        c.kill_server(l);
        if !rt.block_on(create_and_publish(&c.serves[via].api, &format!("after-{k}"))) {
            for (i, s) in c.serves.iter().enumerate() {
                let log = std::fs::read_to_string(&s.log).unwrap_or_default();
                eprintln!("server-{i}:\n{}", berth_tests::storm::tail(&log));
            }
            panic!("no failover within 120 s");
        }
        let took = killed.elapsed();
        if std::env::var_os("BERTH_BENCH_TERM_LOG").is_some() {
            // The new leader's term start, line by line, for where the time goes.
            for s in c.serves.iter() {
                let log = std::fs::read_to_string(&s.log).unwrap_or_default();
                let start = log.rfind("elected:").unwrap_or(log.len());
                if start < log.len() {
                    eprintln!("{}", berth_tests::storm::tail(&log[start..]));
                }
            }
        }
        eprintln!(
            "kill {}: server-{l} → served again in {:.2} s",
            k + 1,
            took.as_secs_f64()
        );
        times.push(took);
        // Restarted, it reads its copy again: a read counts from here.
        reads[l] = warm_reads(&c)[l];
        c.start_server(l);
    }
    times.sort();
    let median = times[times.len() / 2];
    let goal = Duration::from_secs(2 * ttl);
    println!(
        "failover over {kills} leader kills, lease TTL {ttl} s, {volumes} volumes in the store{}: median {:.2} s, min {:.2} s, max {:.2} s; goal (median ≤ 2× TTL = {} s): {}",
        if python {
            ", three Python policy modules"
        } else {
            ""
        },
        median.as_secs_f64(),
        times[0].as_secs_f64(),
        times[times.len() - 1].as_secs_f64(),
        goal.as_secs(),
        if median <= goal { "met" } else { "NOT met" }
    );
}
