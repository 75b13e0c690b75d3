//! End-to-end throughput: N volumes created and published on a node, then
//! unpublished and deleted, through `berth serve` and the sample plugin over
//! real unix sockets with the store on disk. Once with the built-in policies,
//! once with the three WASM sample guests, in the same run.
//!
//! `cargo xtask bench-e2e [--volumes N] [--policies native|wasm] [--volumes-dir DIR]`
//! (release binaries; default N = 1000; the plugin's volumes and the nodes'
//! mount points on /dev/shm unless `--volumes-dir` says otherwise).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_proto::berth::v1 as api;
use berth_proto::berth::v1::berth_client::BerthClient;
use berth_tests::{Cluster, ClusterSpec};
use tokio::sync::Semaphore;

/// Requests in flight at once from the driver.
const IN_FLIGHT: usize = 64;

struct Run {
    up: Duration,
    down: Duration,
}

/// Polls the summary (cheap at any scale) until `done` holds.
async fn wait_for(
    client: &mut BerthClient<tonic::transport::Channel>,
    what: &str,
    done: impl Fn(&api::SummaryResponse) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(1800);
    loop {
        let s = client
            .summary(api::SummaryRequest {})
            .await
            .expect("summary")
            .into_inner();
        if done(&s) {
            return;
        }
        if s.states.get("failed").is_some_and(|n| *n > 0) {
            let list = client
                .list_volumes(api::ListVolumesRequest {})
                .await
                .expect("list")
                .into_inner();
            let f = list
                .volumes
                .iter()
                .find(|v| !v.failure.is_empty())
                .expect("a failed volume");
            panic!("{what}: {} failed: {}", f.id, f.failure);
        }
        assert!(Instant::now() < deadline, "{what}: timed out");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn each(
    client: &BerthClient<tonic::transport::Channel>,
    n: usize,
    f: impl Fn(BerthClient<tonic::transport::Channel>, usize) -> tokio::task::JoinHandle<()>,
) {
    let limit = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let permit = limit.clone().acquire_owned().await.unwrap();
        let handle = f(client.clone(), i);
        tasks.push(tokio::spawn(async move {
            handle.await.unwrap();
            drop(permit);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

fn run(n: usize, guests: bool, volumes_dir: Option<&Path>) -> Run {
    let c = Cluster::start(ClusterSpec {
        guests,
        nodes: vec![("node-a", "a")],
        plugin_args: vec!["--capacity", &(1u64 << 50).to_string()],
        workers: 256,
        volumes_dir,
        ..Default::default()
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut client = BerthClient::new(berth::csi::unix_channel(&c.api));
        let started = Instant::now();
        each(&client, n, |mut cl, i| {
            tokio::spawn(async move {
                let spec = api::VolumeSpec {
                    name: format!("vol-{i:06}"),
                    plugin: "hostpath".into(),
                    required_bytes: 1 << 20,
                    ..Default::default()
                };
                cl.create_volume(api::CreateVolumeRequest { spec: Some(spec) })
                    .await
                    .expect("create");
                cl.publish_volume(api::PublishVolumeRequest {
                    name: format!("vol-{i:06}"),
                    node: "node-a".into(),
                    readonly: false,
                })
                .await
                .expect("publish");
            })
        })
        .await;
        wait_for(&mut client, "published", |s| {
            s.states.get("published") == Some(&(n as u64))
        })
        .await;
        let up = started.elapsed();
        let started = Instant::now();
        each(&client, n, |mut cl, i| {
            tokio::spawn(async move {
                // Deleting unpublishes first.
                cl.delete_volume(api::DeleteVolumeRequest {
                    name: format!("vol-{i:06}"),
                })
                .await
                .expect("delete");
            })
        })
        .await;
        wait_for(&mut client, "deleted", |s| s.volumes == 0).await;
        let down = started.elapsed();
        assert_eq!(c.plugin_volumes(), 0);
        Run { up, down }
    })
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args
        .iter()
        .position(|a| a == "--volumes")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    // The plugin's volumes and the nodes' mount points stand for the storage
    // backend and the nodes' file systems, not for Berth: on tmpfs by default,
    // so the figures are Berth's. Berth's store is on disk either way.
    let volumes_dir = match args.iter().position(|a| a == "--volumes-dir") {
        Some(i) => args.get(i + 1).map(std::path::PathBuf::from),
        None => Some("/dev/shm".into()).filter(|d: &std::path::PathBuf| d.is_dir()),
    };
    let only = args
        .iter()
        .position(|a| a == "--policies")
        .and_then(|i| args.get(i + 1))
        .map(String::as_str);
    println!("| policies | volumes | create+publish | per second | unpublish+delete | per second |");
    println!("|----------|--------:|---------------:|-----------:|-----------------:|-----------:|");
    let mut rates = Vec::new();
    for (label, guests) in [("native", false), ("wasm", true)] {
        if only.is_some_and(|o| o != label) {
            continue;
        }
        let r = run(n, guests, volumes_dir.as_deref());
        let up_rate = n as f64 / r.up.as_secs_f64();
        println!(
            "| {label:<8} | {n:>7} | {:>12.2} s | {:>10.0} | {:>14.2} s | {:>10.0} |",
            r.up.as_secs_f64(),
            up_rate,
            r.down.as_secs_f64(),
            n as f64 / r.down.as_secs_f64()
        );
        rates.push(up_rate);
    }
    if let [native, wasm] = rates[..] {
        println!(
            "\nWASM throughput is {:.2}× native (create+publish).",
            wasm / native
        );
    }
}
