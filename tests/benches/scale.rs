//! Scale: resident memory per tracked volume, and how long `berth serve`
//! takes after a restart until its API answers and until reconciliation has
//! looked at every volume again and the node's agent has its complete desired
//! set, with 10,000 and 100,000 volumes in the store; then the API once more
//! after a `kill -9` of that server (a crash: the store's recovery counts).
//!
//! The store is filled directly with published volumes (each with a backend,
//! contexts and a publication), which is what a restart of a large site finds.
//! The plugin does not hold them; Berth believes them converged and the
//! node's record and paths show them (its agent checks them on start), so the restart does
//! no CSI calls and measures Berth alone.
//!
//! With `--etcd N`, N of the same records are also written to a real etcd
//! (one member) through Berth's etcd store, and the bench reports what a
//! record costs in etcd's database file and so how many volumes its quota
//! (2 GiB by default, 8 GiB at most suggested) holds; then each record is
//! written once more, as a step would, to show what history costs until
//! the next compaction.
//!
//! `cargo xtask bench-scale [--volumes N[,N...]] [--etcd N]` (release
//! binaries; default 10000,100000, no etcd).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use berth::agent::record::{Held, Level, NodeRecord, RecordPlace};
use berth::model::{
    Backend, DecisionNote, NodeLevel, NodeVerdict, Origin, Publication, VecMap, VolumeRecord, VolumeSpec,
};
use berth::store::{RedbStore, Store};
use berth_tests::{Cluster, ClusterSpec, EtcdCluster, summary};

/// A published volume as `berth serve` would have stored it.
fn record(i: usize) -> VolumeRecord {
    let spec = VolumeSpec {
        name: format!("vol-{i:07}"),
        plugin: "hostpath".into(),
        required_bytes: 1 << 30,
        fs_type: "ext4".into(),
        parameters: VecMap::from([("tier".into(), "fast".into())]),
        labels: VecMap::from([("app".into(), format!("app-{}", i % 100))]),
        ..Default::default()
    };
    let mut r = VolumeRecord::new(format!("{:032x}", 0x5ca1e_u128 << 64 | i as u128), spec);
    r.csi_name = Some(format!("pv-vol-{i:07}"));
    r.create_sent = true;
    r.backend = Some(std::sync::Arc::new(Backend {
        volume_id: format!("hp-{:032x}", i),
        capacity_bytes: 1 << 30,
        sized_for: None,
        context: VecMap::from([("hostpath.csi.berth.dev/path".into(), format!("data/hp-{i:032x}"))]),
        accessible_topology: vec![VecMap::from([("zone".into(), "a".into())])],
        node_expansion_required: false,
        mutable_parameters: Default::default(),
    }));
    r.publications.insert(
        "node-a".into(),
        Publication {
            wanted: true,
            readonly: false,
            controller_published: true,
            node: NodeLevel::Published,
            publish_context: VecMap::from([("hostpath.csi.berth.dev/node".into(), "node-a".into())]),
            sent: true,
            expand_pending: false,
            by: Origin::Api,
            round: 0,
        },
    );
    r.generation = 5;
    // The decisions that named and placed it, as `berth volume explain` reads them.
    let note = |answer: String| DecisionNote {
        at_ms: 1_790_000_000_000 + i as u64,
        module: "berth_naming_guest".into(),
        digest: Some(format!("sha256:{:064x}", 0xfeed_u128).into()),
        answer,
        ..Default::default()
    };
    let explanation = r.explain_mut();
    explanation.naming = Some(note(format!("pv-vol-{i:07}")).into());
    explanation.placement = Some(
        DecisionNote {
            module: "berth_placement_guest".into(),
            nodes: vec![NodeVerdict {
                node: "node-a".into(),
                eligible: true,
                score: 100,
                reason: String::new(),
            }],
            nodes_judged: 1,
            ..note("node-a (1 of 1 nodes eligible)".into())
        }
        .into(),
    );
    r
}

/// The node's side of `n` published volumes: its agent's record (in the
/// store, as an in-process node keeps it), and staging and target paths that
/// show a volume, as the agent checks on start.
fn mount(store: &std::path::Path, node_dir: &std::path::Path, n: usize) {
    let _ = std::fs::remove_file(node_dir.join("agent.redb"));
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = RedbStore::open(store).expect("store");
        let place = RecordPlace::Store {
            committer: store.committer(),
            store: PathBuf::new(),
            node: "node-a".into(),
            file: node_dir.join("agent.redb"),
        };
        let held = std::sync::Arc::new(NodeRecord::open_at(&place).await.expect("node record").0);
        for chunk in (0..n).collect::<Vec<_>>().chunks(4096) {
            let mut puts = tokio::task::JoinSet::new();
            for &i in chunk {
                let held = held.clone();
                puts.spawn(async move {
                    let r = record(i);
                    let h = Held {
                        plugin: r.spec.plugin.as_str().into(),
                        volume_id: r.backend.as_ref().expect("created").volume_id.clone(),
                        level: Level::Published,
                        staged: true,
                    };
                    held.put(&r.id, &h).await
                });
            }
            while let Some(r) = puts.join_next().await {
                r.unwrap().expect("node record put");
            }
        }
    });
    for dir in ["staging", "publish"] {
        let parent = node_dir.join(dir);
        let _ = std::fs::remove_dir_all(&parent);
        std::fs::create_dir_all(&parent).expect("node directory");
        for i in 0..n {
            std::os::unix::fs::symlink(node_dir, parent.join(&record(i).id)).expect("node path");
        }
    }
}

fn fill(store: &std::path::Path, n: usize) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = std::sync::Arc::new(RedbStore::open(store).expect("store"));
        for chunk in (0..n).collect::<Vec<_>>().chunks(4096) {
            let mut puts = tokio::task::JoinSet::new();
            for &i in chunk {
                let store = store.clone();
                puts.spawn(async move { store.put(&record(i)).await });
            }
            while let Some(r) = puts.join_next().await {
                r.unwrap().expect("put");
            }
        }
    });
}

/// Resident set size of a process, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("process status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kb * 1024
}

async fn node_ready(
    client: &mut berth_proto::berth::v1::berth_client::BerthClient<tonic::transport::Channel>,
) -> bool {
    let nodes = client
        .list_nodes(berth_proto::berth::v1::ListNodesRequest {})
        .await
        .expect("list nodes")
        .into_inner()
        .nodes;
    nodes.iter().all(|n| n.state == "ready")
}

struct Restart {
    api: Duration,
    reconciled: Duration,
    rss: u64,
}

/// Restarts `berth serve` on the cluster's store and times it.
fn restart(c: &mut Cluster, expect: u64) -> Restart {
    c.kill_serve();
    let started = Instant::now();
    c.start_serve();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut client = c.client();
        let first = summary(&mut client).await.expect("summary");
        let api = started.elapsed();
        assert_eq!(first.volumes, expect, "every stored volume is tracked");
        loop {
            let s = summary(&mut client).await.expect("summary");
            if s.busy == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // And the node's agent has its complete desired set again.
        while !node_ready(&mut client).await {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let reconciled = started.elapsed();
        // The resident size at rest: what was sent and queued for the
        // restart is freed and given back over the next moments.
        let pid = c.serve_pid().expect("serve runs");
        let mut last = rss(pid);
        for _ in 0..30 {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let now = rss(pid);
            let settled = now.abs_diff(last) * 200 < last;
            last = now;
            if settled {
                break;
            }
        }
        let s = summary(&mut client).await.expect("summary");
        let published = s.states.get("published").copied().unwrap_or(0);
        assert_eq!(published, expect, "nothing changed state: {s:?}");
        Restart {
            api,
            reconciled,
            rss: last,
        }
    })
}

/// The median of five runs of `f`.
fn median(mut f: impl FnMut() -> Duration) -> Duration {
    let mut times: Vec<Duration> = (0..5).map(|_| f()).collect();
    times.sort();
    times[2]
}

/// How long the console takes to answer its pages with `n` volumes in the
/// store (curl over TLS on loopback, a new connection each, as a browser's
/// first load), against the API's own answer of the same page (the
/// reference: gRPC on the socket, connection kept).
fn console_pages(c: &Cluster, port: u16, n: usize) {
    let root: serde_json::Value = serde_json::from_str(&c.ok(&["acl", "bootstrap", "-o", "json"])).unwrap();
    let token = root["secret"].as_str().unwrap();
    let jar = c.dir.path().join("console-cookies");
    let base = format!("https://127.0.0.1:{port}");
    let curl = |args: &[&str]| -> Duration {
        let started = Instant::now();
        let out = std::process::Command::new("curl")
            .args(["-k", "-s", "-f", "-o", "/dev/null", "-b"])
            .arg(&jar)
            .args(args)
            .output()
            .expect("curl");
        assert!(
            out.status.success(),
            "curl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        started.elapsed()
    };
    let sign_in = std::process::Command::new("curl")
        .args(["-k", "-s", "-f", "-o", "/dev/null", "-c"])
        .arg(&jar)
        .args([
            "--data-urlencode",
            &format!("token={token}"),
            &format!("{base}/sign-in"),
        ])
        .status()
        .expect("curl");
    assert!(sign_in.success(), "signing in to the console");
    // What a browser downloads for the list's first page: the page and
    // every asset it names, as sent (the console does not compress).
    let weight: usize = ["/", "/assets/console.css", "/assets/console.js", "/favicon.ico"]
        .iter()
        .map(|path| {
            let out = std::process::Command::new("curl")
                .args([
                    "-k",
                    "-s",
                    "-f",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{size_download}",
                    "-b",
                ])
                .arg(&jar)
                .arg(format!("{base}{path}"))
                .output()
                .expect("curl");
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse::<usize>()
                .unwrap_or(0)
        })
        .sum();
    let first = median(|| curl(&[&format!("{base}/")]));
    let none = median(|| curl(&[&format!("{base}/?q=no-such-name")]));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let api = rt.block_on(async {
        let mut client = c.client();
        let mut times = Vec::new();
        for _ in 0..5 {
            let started = Instant::now();
            let request = berth_proto::berth::v1::ListVolumesRequest {
                max_entries: 50,
                ..Default::default()
            };
            client.list_volumes(request).await.expect("list");
            times.push(started.elapsed());
        }
        times.sort();
        times[2]
    });
    println!("\nThe console with {n} volumes (median of 5; goal: the list's first page within 1 s):\n");
    println!("| page | time | against the API's page |");
    println!("|------|-----:|-----------------------:|");
    println!(
        "| API `ListVolumes`, 50 (reference) | {:.1} ms | 1.0× |",
        api.as_secs_f64() * 1e3
    );
    for (what, t) in [
        ("volumes list, first page", first),
        ("search matching none", none),
    ] {
        println!(
            "| {what} | {:.1} ms | {:.1}× |",
            t.as_secs_f64() * 1e3,
            t.as_secs_f64() / api.as_secs_f64()
        );
    }
    println!(
        "\nThe list's first page weighs {:.1} KB with its assets, uncompressed (goal: at most 300 KB compressed)",
        weight as f64 / 1000.0
    );
}

/// What `n` records cost in etcd's database, and where its quota puts the ceiling.
fn etcd_cost(n: usize) {
    const MIB: f64 = 1048576.0;
    let etcd = EtcdCluster::start(1);
    let (empty, _) = etcd.db_size(0).expect("etcd metrics");
    let took = etcd.fill("/berth-scale", n, record);
    let json = serde_json::to_vec(&record(n / 2)).expect("record").len();
    let (total, in_use) = etcd.db_size(0).expect("etcd metrics");
    let per_volume = total.saturating_sub(empty) as f64 / n as f64;
    println!(
        "\netcd, {n} volumes of {json} B of JSON each (written in {:.1} s): database {:.0} MiB ({:.0} MiB in use), {per_volume:.0} B a volume",
        took.as_secs_f64(),
        total as f64 / MIB,
        in_use as f64 / MIB
    );
    for quota_gib in [2u64, 8] {
        println!(
            "  a {quota_gib} GiB quota holds about {:.0} volumes with no history",
            (quota_gib << 30) as f64 / per_volume
        );
    }
    let took = etcd.fill("/berth-scale", n, record);
    let (again, _) = etcd.db_size(0).expect("etcd metrics");
    println!(
        "  each written once more (in {:.1} s), before a compaction: database {:.0} MiB, {:.0} B a volume more",
        took.as_secs_f64(),
        again as f64 / MIB,
        again.saturating_sub(total) as f64 / n as f64
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let etcd: Option<usize> = args
        .iter()
        .position(|a| a == "--etcd")
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().expect("--etcd takes N"));
    let sizes: Vec<usize> = args
        .iter()
        .position(|a| a == "--volumes")
        .and_then(|i| args.get(i + 1))
        .map_or("10000,100000", String::as_str)
        .split(',')
        .map(|v| v.parse().expect("--volumes takes N or N,N,..."))
        .collect();
    let (api_port, console_port) = (berth_tests::free_port(), berth_tests::free_port());
    let extra = format!("api_address = \"127.0.0.1:{api_port}\"");
    let console = format!("[console]\naddress = \"127.0.0.1:{console_port}\"\n");
    let mut c = Cluster::start(ClusterSpec {
        guests: true,
        nodes: vec![("node-a", "a")],
        extra: &extra,
        server_tables: vec![(0, &console)],
        ..Default::default()
    });
    let empty = restart(&mut c, 0);
    println!(
        "empty store: API after {:.0} ms, resident {:.1} MiB; per-volume figures are beyond these\n",
        empty.api.as_secs_f64() * 1e3,
        empty.rss as f64 / 1048576.0
    );
    println!(
        "| volumes | API answers | reconciliation done | resident | memory per volume | restart time per volume | API answers after a kill -9 |"
    );
    println!(
        "|--------:|------------:|--------------------:|---------:|------------------:|------------------------:|----------------------------:|"
    );
    let mut per_volume_time = Vec::new();
    for &n in &sizes {
        c.kill_serve();
        let _ = std::fs::remove_file(c.store_path());
        fill(&c.store_path(), n);
        mount(&c.store_path(), &c.volumes_dir.join("nodes/node-a"), n);
        let r = restart(&mut c, n as u64);
        // Again, after killing the server that has run on the store: what
        // a crash leaves the next start (redb's recovery) is in this one.
        let crashed = restart(&mut c, n as u64);
        let per_volume = r.rss.saturating_sub(empty.rss) as f64 / n as f64;
        // Beyond what an empty store costs, so the fixed start-up does not hide the growth.
        let per_volume_us = r.reconciled.saturating_sub(empty.reconciled).as_secs_f64() * 1e6 / n as f64;
        println!(
            "| {n:>7} | {:>8.0} ms | {:>16.0} ms | {:>4.0} MiB | {:>15.0} B | {:>20.1} µs | {:>24.0} ms |",
            r.api.as_secs_f64() * 1e3,
            r.reconciled.as_secs_f64() * 1e3,
            r.rss as f64 / 1048576.0,
            per_volume,
            per_volume_us,
            crashed.api.as_secs_f64() * 1e3,
        );
        per_volume_time.push((n, per_volume_us));
    }
    match per_volume_time[..] {
        [(a, ta), .., (b, tb)] if ta > 0.0 => println!(
            "\nRestart time per volume at {b} is {:.2}× that at {a} (1.00 is linear growth).",
            tb / ta
        ),
        [(a, _), _, ..] => {
            println!("\nAt {a} volumes the restart is within the start-up's noise; compare larger sizes.")
        }
        _ => {}
    }
    console_pages(&c, console_port, sizes.last().copied().unwrap_or(0));
    drop(c);
    if let Some(n) = etcd {
        etcd_cost(n);
    }
}
