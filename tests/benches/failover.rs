//! Failover: three `berth serve` on a three-member etcd with one agent per
//! node; the leader is killed with SIGKILL again and again, and each time
//! the clock runs from the kill until a volume is created and published
//! through a surviving server's API (a follower passing it on to the new
//! leader, its agent back). The goal is a median of at most twice the lease TTL.
//!
//! `cargo xtask bench-failover [--kills N] [--lease-ttl SECONDS]`
//! (release binaries; default 10 kills, a 2 s lease).

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

/// Creates and publishes `name` through `api`, repeating what found no leader.
async fn create_and_publish(api: &std::path::Path, name: &str) {
    let mut client = BerthClient::new(berth::csi::unix_channel(api));
    let spec = api::VolumeSpec {
        name: name.into(),
        plugin: "hostpath".into(),
        required_bytes: 1 << 20,
        ..Default::default()
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(Instant::now() < deadline, "{name}: no answer for 120 s");
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
            Ok(v) if v.get_ref().state == "published" => return,
            _ => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

fn main() {
    let kills = arg("--kills", 10) as usize;
    let ttl = arg("--lease-ttl", 2);
    let etcd = EtcdCluster::start(3);
    let mut c = Cluster::start(ClusterSpec {
        guests: false,
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
    for k in 0..kills {
        let l = c.wait_leader(&[0, 1, 2], Duration::from_secs(60));
        // Warm: the leader has served a volume before it dies.
        rt.block_on(create_and_publish(&c.serves[l].api, &format!("warm-{k}")));
        let via = (l + 1) % 3;
        let killed = Instant::now();
        c.kill_server(l);
        rt.block_on(create_and_publish(&c.serves[via].api, &format!("after-{k}")));
        let took = killed.elapsed();
        eprintln!(
            "kill {}: server-{l} → served again in {:.2} s",
            k + 1,
            took.as_secs_f64()
        );
        times.push(took);
        c.start_server(l);
    }
    times.sort();
    let median = times[times.len() / 2];
    let goal = Duration::from_secs(2 * ttl);
    println!(
        "failover over {kills} leader kills, lease TTL {ttl} s: median {:.2} s, min {:.2} s, max {:.2} s; goal (median ≤ 2× TTL = {} s): {}",
        median.as_secs_f64(),
        times[0].as_secs_f64(),
        times[times.len() - 1].as_secs_f64(),
        goal.as_secs(),
        if median <= goal { "met" } else { "NOT met" }
    );
}
