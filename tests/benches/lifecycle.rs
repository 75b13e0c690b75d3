//! End-to-end throughput: N volumes created and published on a node, then
//! unpublished and deleted, through `berth serve` and the sample plugin over
//! real unix sockets with the store on disk. Once with the built-in policies,
//! once with the three WASM sample guests, then across three nodes: served in
//! process (`[[node]]`) and by three `berth agent` processes over the TLS
//! cluster endpoint on loopback, in the same run; and with the store in a
//! three-member etcd on loopback against the embedded store; and through
//! the TLS API with an ACL token (`tls-acl`) against the socket; and with
//! the sample admission module asked before every request (`admission`)
//! against the WASM guests without it. The `limit`
//! row drives the same plugin processes directly, with the same calls per
//! volume and the same requests in flight: Berth's figures are also given
//! as a share of it. Each phase also counts the CPU time Berth, the plugins,
//! the driver and etcd's members spent per volume, which shows where a
//! limit comes from.
//!
//! `cargo xtask bench-e2e [--volumes N[,N...]] [--rounds R] [--policies native,tls-acl,wasm,admission,shadow,3-nodes,3-agents,etcd,metrics,no-events,no-log,limit]
//! [--volumes-dir DIR]` (release binaries; defaults: 1000 volumes, 3 rounds;
//! the plugin's volumes and the nodes' mount points on /dev/shm unless
//! `--volumes-dir` says otherwise).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "lifecycle/setups.rs"]
mod setups;
use setups::{SETUPS, Setup};

use berth::csi::PluginChannel;
use berth_proto::berth::v1 as api;
use berth_proto::berth::v1::berth_client::BerthClient;
use berth_tests::api_load::{create_and_publish, delete, each};
use berth_tests::cpu::CpuMeter;
use berth_tests::direct::{Created, Direct};
use berth_tests::{Cluster, ClusterSpec, EtcdCluster};

struct Run {
    up: Phase,
    down: Phase,
}

/// One phase's wall-clock time and the CPU time of each part (Berth, the
/// plugins, the driver) during it.
struct Phase {
    took: Duration,
    cpu: Vec<(&'static str, Duration)>,
}

impl Phase {
    /// CPU microseconds per volume of one part (in [`Timing::start`]'s order).
    fn per_volume(&self, part: usize, volumes: usize) -> f64 {
        self.cpu[part].1.as_secs_f64() * 1e6 / volumes as f64
    }
}

/// Picks one phase out of a run.
type PhaseOf = fn(&Run) -> &Phase;

/// A phase being timed.
struct Timing {
    started: Instant,
    cpu: CpuMeter,
    /// With `BERTH_BENCH_THREADS=1`: Berth's threads' CPU at the start, by name.
    threads: Option<(Vec<u32>, std::collections::BTreeMap<String, Duration>)>,
}

/// CPU time by thread name over all of `pids`.
fn threads_of(pids: &[u32]) -> std::collections::BTreeMap<String, Duration> {
    let mut all = std::collections::BTreeMap::new();
    for &pid in pids {
        for (name, t) in berth_tests::cpu::by_thread(pid) {
            *all.entry(name).or_default() += t;
        }
    }
    all
}

impl Timing {
    /// Counts Berth's processes, the plugin's, this process (the driver:
    /// API client, or CSI client without Berth) and etcd's members, if any.
    fn start(berth: &[u32], plugins: &[u32], etcd: &[u32]) -> Timing {
        Timing {
            cpu: CpuMeter::start(vec![
                ("Berth", berth.to_vec()),
                ("plugins", plugins.to_vec()),
                ("driver", vec![std::process::id()]),
                ("etcd", etcd.to_vec()),
            ]),
            threads: std::env::var_os("BERTH_BENCH_THREADS").map(|_| (berth.to_vec(), threads_of(berth))),
            started: Instant::now(),
        }
    }

    fn end(self) -> Phase {
        if let Some((pids, then)) = &self.threads {
            let spent: Vec<String> = threads_of(pids)
                .into_iter()
                .map(|(name, now)| {
                    let ms = now
                        .saturating_sub(then.get(&name).copied().unwrap_or_default())
                        .as_millis();
                    format!("{name} {ms} ms")
                })
                .collect();
            eprintln!("Berth's threads over the phase: {}", spent.join(", "));
        }
        Phase {
            took: self.started.elapsed(),
            cpu: self.cpu.since(),
        }
    }
}

async fn summary(client: &mut BerthClient<PluginChannel>) -> api::SummaryResponse {
    let answer = client.summary(api::SummaryRequest {}).await;
    answer.expect("Berth's summary").into_inner()
}

/// Polls the summary (cheap at any scale) until `done` holds. Every 5 ms:
/// a phase of 1,000 volumes lasts about half a second, and the direct run
/// it is compared with has no poll, so a coarser one would add its own
/// granularity to Berth's time (20 ms added 2 % on average).
async fn wait_for(
    client: &mut BerthClient<PluginChannel>,
    what: &str,
    done: impl Fn(&api::SummaryResponse) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(1800);
    loop {
        let s = summary(client).await;
        if done(&s) {
            return;
        }
        if s.states.get("failed").is_some_and(|n| *n > 0) {
            let list = client
                .list_volumes(api::ListVolumesRequest::default())
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
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The plugin processes alone, driven as Berth drives them.
fn run_direct(n: usize, setup: &Setup, volumes_dir: Option<&Path>) -> Run {
    let rt = runtime();
    // The clients' channels are made on the runtime.
    let _entered = rt.enter();
    let d = Arc::new(Direct::start(ClusterSpec {
        nodes: setup.nodes.iter().map(|n| (*n, "a")).collect(),
        plugin_args: vec!["--capacity", &(1u64 << 50).to_string()],
        volumes_dir,
        ..Default::default()
    }));
    rt.block_on(async {
        let nodes = setup.nodes.len();
        let timing = Timing::start(&[], &d.pids(), &[]);
        let created = each(n, |i| {
            let d = d.clone();
            tokio::spawn(async move { d.create_and_publish(i, i % nodes).await.expect("create+publish") })
        })
        .await;
        let up = timing.end();
        let mut created: Vec<Option<Created>> = created.into_iter().map(Some).collect();
        let timing = Timing::start(&[], &d.pids(), &[]);
        each(n, |i| {
            let (d, c) = (d.clone(), created[i].take().expect("created once"));
            tokio::spawn(async move { d.unpublish_and_delete(c).await.expect("unpublish+delete") })
        })
        .await;
        let down = timing.end();
        assert_eq!(d.plugin_volumes(), 0);
        Run { up, down }
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn run(n: usize, setup: &Setup, volumes_dir: Option<&Path>) -> Run {
    if setup.direct {
        return run_direct(n, setup, volumes_dir);
    }
    let etcd = setup.etcd.then(|| EtcdCluster::start(3));
    let port = berth_tests::free_port();
    let api_port = berth_tests::free_port();
    let mut extra = match setup.metrics {
        true => format!("metrics = \"127.0.0.1:{port}\"\n{}", setup.extra),
        false => setup.extra.to_string(),
    };
    if setup.remote {
        extra.push_str(&format!("\napi_address = \"127.0.0.1:{api_port}\"\n"));
    }
    let admission = format!(
        "[[policy]]\nmodule = \"{}\"\ndecisions = [\"admission\"]\n",
        berth_tests::guest("berth_admission_guest").display()
    );
    let c = Cluster::start(ClusterSpec {
        extra: &extra,
        server_tables: match setup.admission {
            true => vec![(0, admission.as_str())],
            false => Vec::new(),
        },
        store: etcd.as_ref().map(|e| e.store_config("/berth-bench")),
        guests: setup.guests,
        shadow: setup.shadow,
        nodes: setup.nodes.iter().map(|n| (*n, "a")).collect(),
        agents: setup.agents,
        // Agents on other machines speak TLS: so do these.
        tls: setup.agents,
        plugin_args: vec!["--capacity", &(1u64 << 50).to_string()],
        workers: 256,
        volumes_dir,
        ..Default::default()
    });
    let rt = runtime();
    // Far more often than Prometheus would (15 s is usual): the cost of
    // scraping is in the figure, not left out.
    let scraping = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(setup.metrics));
    let scraper = {
        let scraping = scraping.clone();
        std::thread::spawn(move || {
            while scraping.load(std::sync::atomic::Ordering::Relaxed) {
                let (status, _) = berth_tests::scrape::get(port, "/metrics").expect("scraping");
                assert_eq!(status, 200);
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
        })
    };
    let run = rt.block_on(async {
        // The API client speaks HTTP/2 over the same channel as the direct
        // driver's CSI calls: the two drivers cost alike per call.
        let mut client = BerthClient::new(PluginChannel::new(&c.api));
        let nodes = setup.nodes;
        let (berth, plugins) = c.pids();
        let etcd_pids = etcd.as_ref().map(EtcdCluster::pids).unwrap_or_default();
        // The API socket takes connections from the start, but answers once
        // the policy modules are compiled: timing starts after a first answer,
        // so no module's compile is counted as the volumes' work.
        summary(&mut client).await;
        // The TLS API with a token of a policy that grants these calls in
        // the default namespace: every call authenticated and checked.
        let remote = match setup.remote {
            true => Some(
                berth_tests::api_load::remote(
                    api_port,
                    &c.dir.path().join("state/api-ca.pem"),
                    &berth_tests::api_load::volume_token(&c),
                )
                .await,
            ),
            false => None,
        };
        let writes = setup.metrics.then(|| berth_tests::scrape::record_writes(port));
        let timing = Timing::start(&berth, &plugins, &etcd_pids);
        match &remote {
            Some(remote) => create_and_publish(remote, n, nodes).await,
            None => create_and_publish(&client, n, nodes).await,
        }
        wait_for(&mut client, "published", |s| {
            s.states.get("published") == Some(&(n as u64))
        })
        .await;
        let up = timing.end();
        let writes = writes.map(|then| print_writes("create+publish", n, then, port));
        let timing = Timing::start(&berth, &plugins, &etcd_pids);
        // Deleting with force unpublishes first.
        match &remote {
            Some(remote) => delete(remote, n).await,
            None => delete(&client, n).await,
        }
        wait_for(&mut client, "deleted", |s| s.volumes == 0).await;
        let down = timing.end();
        if let Some(then) = writes {
            print_writes("unpublish+delete", n, then, port);
        }
        assert_eq!(c.plugin_volumes(), 0);
        Run { up, down }
    });
    scraping.store(false, std::sync::atomic::Ordering::Relaxed);
    scraper.join().expect("the scraper");
    run
}

/// Prints the durable record writes and commits per volume since `then`;
/// the counts now.
fn print_writes(phase: &str, volumes: usize, then: (f64, f64), port: u16) -> (f64, f64) {
    let now = berth_tests::scrape::record_writes(port);
    let per = |a: f64, b: f64| (a - b) / volumes as f64;
    eprintln!(
        "{phase}: {:.2} record writes and {:.2} commits per volume",
        per(now.0, then.0),
        per(now.1, then.1)
    );
    now
}

fn arg<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1).map(String::as_str)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let sizes: Vec<usize> = arg(&args, "--volumes")
        .unwrap_or("1000")
        .split(',')
        .map(|v| v.parse().expect("--volumes takes N or N,N,..."))
        .collect();
    let rounds: usize = arg(&args, "--rounds").map_or(3, |v| v.parse().expect("--rounds takes a number"));
    // The plugin's volumes and the nodes' mount points stand for the storage
    // backend and the nodes' file systems, not for Berth: on tmpfs by default,
    // so the figures are Berth's. Berth's store is on disk either way.
    let volumes_dir = match arg(&args, "--volumes-dir") {
        Some(d) => Some(std::path::PathBuf::from(d)),
        None => Some("/dev/shm".into()).filter(|d: &std::path::PathBuf| d.is_dir()),
    };
    let only = arg(&args, "--policies");
    let sets: Vec<&Setup> = SETUPS
        .iter()
        .filter(|s| only.is_none_or(|o| o.split(',').any(|o| o == s.label)))
        .collect();
    println!(
        "volumes of the plugin and nodes in {}; Berth's store on disk; {rounds} rounds, policies interleaved (every other round in reverse)\n",
        volumes_dir
            .as_deref()
            .map_or("the cluster directory".into(), |d| d.display().to_string())
    );
    println!("| policies | volumes | round | create+publish | per second | unpublish+delete | per second |");
    println!("|----------|--------:|------:|---------------:|-----------:|-----------------:|-----------:|");
    let mut summary = Vec::new();
    let mut paired = Vec::new();
    let mut cpu_rows = Vec::new();
    for &n in &sizes {
        let mut up: Vec<Vec<f64>> = vec![Vec::new(); sets.len()];
        let mut down: Vec<Vec<f64>> = vec![Vec::new(); sets.len()];
        let mut runs: Vec<Vec<Run>> = (0..sets.len()).map(|_| Vec::new()).collect();
        for round in 1..=rounds {
            // The later runs of a round tend to be the slower ones on this
            // kind of machine: every other round goes in reverse, so no setup
            // always runs last.
            let mut order: Vec<usize> = (0..sets.len()).collect();
            if round % 2 == 0 {
                order.reverse();
            }
            for i in order {
                let setup = sets[i];
                let label = setup.label;
                let r = run(n, setup, volumes_dir.as_deref());
                let (u, d) = (
                    n as f64 / r.up.took.as_secs_f64(),
                    n as f64 / r.down.took.as_secs_f64(),
                );
                println!(
                    "| {label:<8} | {n:>7} | {round:>5} | {:>12.2} s | {u:>10.0} | {:>14.2} s | {d:>10.0} |",
                    r.up.took.as_secs_f64(),
                    r.down.took.as_secs_f64(),
                );
                up[i].push(u);
                down[i].push(d);
                runs[i].push(r);
            }
        }
        for (i, setup) in sets.iter().enumerate() {
            summary.push((n, setup.label, median(up[i].clone()), median(down[i].clone())));
            let phases: [(&str, PhaseOf); 2] =
                [("create+publish", |r| &r.up), ("unpublish+delete", |r| &r.down)];
            for (phase, of) in phases {
                let per_volume =
                    |part: usize| median(runs[i].iter().map(|r| of(r).per_volume(part, n)).collect());
                cpu_rows.push((
                    n,
                    setup.label,
                    phase,
                    [per_volume(0), per_volume(1), per_volume(2), per_volume(3)],
                ));
            }
        }
        let of = |label: &str| sets.iter().position(|s| s.label == label).map(|i| &up[i]);
        for (what, over, under) in [
            ("WASM create+publish throughput is {}× native", "wasm", "native"),
            (
                "create+publish throughput through the TLS API with an ACL token is {}× the API socket without",
                "tls-acl",
                "native",
            ),
            (
                "create+publish throughput with a Rust admission module asked before every request is {}× without (WASM)",
                "admission",
                "wasm",
            ),
            (
                "create+publish throughput with every decision shadowed by a second module is {}× without (WASM)",
                "shadow",
                "wasm",
            ),
            (
                "create+publish throughput through three agents is {}× three in-process nodes",
                "3-agents",
                "3-nodes",
            ),
            (
                "create+publish throughput through three agents is {}× one in-process node",
                "3-agents",
                "native",
            ),
            (
                "create+publish throughput with the store in etcd (three members) is {}× the embedded store",
                "etcd",
                "native",
            ),
            (
                "create+publish throughput with metrics on (scraped every second) is {}× metrics off",
                "metrics",
                "native",
            ),
            (
                "create+publish throughput keeping volume events (10 a volume, the default) is {}× keeping none",
                "native",
                "no-events",
            ),
            (
                "create+publish throughput keeping the decision log (1,000 a kind, the default) is {}× keeping none",
                "native",
                "no-log",
            ),
            (
                "Berth (native) creates+publishes at {}× the plugin driven directly",
                "native",
                "limit",
            ),
            (
                "Berth (WASM) creates+publishes at {}× the plugin driven directly",
                "wasm",
                "limit",
            ),
        ] {
            if let (Some(a), Some(b)) = (of(over), of(under)) {
                paired.push((n, what, a.iter().zip(b).map(|(a, b)| a / b).collect::<Vec<f64>>()));
            }
        }
        let of_down = |label: &str| sets.iter().position(|s| s.label == label).map(|i| &down[i]);
        for (what, over, under) in [
            (
                "unpublish+delete throughput through the TLS API with an ACL token is {}× the API socket without",
                "tls-acl",
                "native",
            ),
            (
                "unpublish+delete throughput with metrics on (scraped every second) is {}× metrics off",
                "metrics",
                "native",
            ),
            (
                "Berth (native) unpublishes+deletes at {}× the plugin driven directly",
                "native",
                "limit",
            ),
            (
                "Berth (WASM) unpublishes+deletes at {}× the plugin driven directly",
                "wasm",
                "limit",
            ),
        ] {
            if let (Some(a), Some(b)) = (of_down(over), of_down(under)) {
                paired.push((n, what, a.iter().zip(b).map(|(a, b)| a / b).collect()));
            }
        }
    }
    println!("\nMedians:\n");
    println!("| policies | volumes | created+published per second | unpublished+deleted per second |");
    println!("|----------|--------:|-----------------------------:|-------------------------------:|");
    for (n, label, u, d) in &summary {
        println!("| {label:<8} | {n:>7} | {u:>28.0} | {d:>30.0} |");
    }
    println!("\nCPU time per volume (µs, medians; the machine's cores give 1,000,000 µs a second each):\n");
    println!("| policies | volumes | phase | Berth | plugins | driver | etcd | all |");
    println!("|----------|--------:|-------|------:|--------:|-------:|-----:|----:|");
    for (n, label, phase, [berth, plugins, driver, etcd]) in &cpu_rows {
        let all = berth + plugins + driver + etcd;
        println!(
            "| {label:<8} | {n:>7} | {phase} | {berth:.0} | {plugins:.0} | {driver:.0} | {etcd:.0} | {all:.0} |"
        );
    }
    for (n, what, ratios) in &paired {
        if ratios.is_empty() {
            continue;
        }
        // Each round runs the two back to back, so a round's ratio sees one
        // machine state; their geometric mean is steadier than a ratio of medians.
        let mean = (ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64).exp();
        let each: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
        println!(
            "\n{n} volumes: {} (geometric mean of the rounds: {}).",
            what.replace("{}", &format!("{mean:.2}")),
            each.join(", ")
        );
    }
}
