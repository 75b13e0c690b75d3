//! `cargo xtask nemesis [--seconds N] [--seed S]`: Berth under partitions,
//! packet loss, `kill -9` and SIGSTOP, each process in a network namespace
//! of its own, while a workload creates, publishes, moves, snapshots,
//! expands and deletes volumes; then a checker of what must never happen
//! (`check.rs`), each fault kind's recovery time, and on a violation the
//! timeline around it. Needs root (namespaces, iptables).

mod cluster;
mod faults;
mod net;
mod procs;
mod report;
mod workload;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use berth_proto::berth::v1 as api;
use berth_proto::berth::v1::berth_client::BerthClient;
pub use berth_tests::storm::Rng;
use tonic::transport::Channel;

use berth_tests::nemesis::check;
use cluster::{Cluster, NODES, SERVERS, api_socket, node_name};
use faults::{FAULTS, Fault, STEPPED_MS, heal, inject, step_clock};
use report::{Timeline, report};
use workload::Workload;

pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(f)
}

pub fn client(socket: &Path) -> BerthClient<Channel> {
    BerthClient::new(berth::csi::unix_channel(socket))
}

struct Args {
    /// Only check the journal of an earlier run (`--check-journal FILE`).
    journal: Option<PathBuf>,
    seconds: u64,
    seed: u64,
    dir: PathBuf,
}

fn args() -> anyhow::Result<Args> {
    let mut a = Args {
        journal: None,
        seconds: 60,
        seed: 1,
        dir: Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("the workspace")
            .join("target/nemesis"),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--seconds" => a.seconds = value()?.parse().context("--seconds")?,
            "--seed" => a.seed = value()?.parse().context("--seed")?,
            "--dir" => a.dir = value()?.into(),
            "--check-journal" => a.journal = Some(value()?.into()),
            // What cargo bench passes its benches.
            "--bench" => {}
            other => bail!("unknown argument {other} (--seconds N, --seed S, --dir DIR)"),
        }
    }
    Ok(a)
}

fn main() {
    let outcome = run();
    // A run that failed mid-fault leaves no step of the machine's clock behind.
    let stepped = STEPPED_MS.swap(0, Ordering::SeqCst);
    if stepped != 0 {
        let _ = step_clock(-stepped);
    }
    if let Err(e) = outcome {
        eprintln!("nemesis: {e:#}");
        std::process::exit(1);
    }
}

fn run() -> anyhow::Result<()> {
    let args = args()?;
    if let Some(path) = &args.journal {
        return check_journal(path);
    }
    // Agents refuse paths with `..`: the run's directory is made absolute and plain.
    std::fs::create_dir_all(&args.dir)?;
    let dir = args.dir.canonicalize()?.join(format!("seed-{}", args.seed));
    // Odd seeds: the plugins offer ControllerPublish (which refuses a second
    // node for a single-node volume); even seeds: they do not, and only
    // Berth's order keeps such a volume on one node.
    let controller_publish = args.seed % 2 == 1;
    println!(
        "nemesis: seed {}, {} s of faults, ControllerPublish {}, in {}",
        args.seed,
        args.seconds,
        if controller_publish {
            "offered"
        } else {
            "not offered"
        },
        dir.display()
    );
    let mut c = Cluster::start(&dir, controller_publish)?;
    let mut rng = Rng::new(args.seed);
    let mut tl = Timeline {
        started: Instant::now(),
        started_epoch_ms: epoch_ms(),
        events: Vec::new(),
    };
    wait_ready(&c, Duration::from_secs(120))?;
    tl.note("cluster ready: 3 etcd members, 3 servers, 3 agents".into());

    let apis: Vec<PathBuf> = SERVERS.iter().map(|s| api_socket(&dir, s)).collect();
    let nodes: Vec<String> = NODES.iter().map(|n| node_name(n)).collect();
    let work = Workload::new(apis.clone(), nodes, tl.started, args.seed);
    let stop = Arc::new(AtomicBool::new(false));
    let runner = {
        let (work, stop) = (work.clone(), stop.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("a runtime");
            rt.block_on(async move {
                let clients: Vec<_> = (0..3)
                    .map(|_| tokio::spawn(work.clone().client(stop.clone())))
                    .collect();
                for c in clients {
                    let _ = c.await;
                }
            });
        })
    };

    // Each fault: its kind, when it began and when it was healed (ms).
    let mut heals: Vec<(Fault, u64, u64)> = Vec::new();
    let end = Instant::now() + Duration::from_secs(args.seconds);
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(2000 + rng.below(3000)));
        let fault = FAULTS[rng.below(FAULTS.len() as u64) as usize];
        let Some(what) = inject(&mut c, &mut rng, fault)? else {
            continue;
        };
        tl.note(format!("{fault:?}: {what}"));
        let began = tl.started.elapsed().as_millis() as u64;
        std::thread::sleep(Duration::from_millis(3000 + rng.below(7000)));
        heal(&mut c, &mut tl)?;
        heals.push((fault, began, tl.started.elapsed().as_millis() as u64));
    }
    heal(&mut c, &mut tl)?;
    stop.store(true, Ordering::Relaxed);
    runner.join().expect("the workload's thread");
    tl.note("workload stopped; waiting for Berth to converge".into());
    let history = std::mem::take(&mut *work.history.lock().unwrap());

    let mut violations = Vec::new();
    let volumes = match converge(&apis, Duration::from_secs(180)) {
        Ok(v) => v,
        Err(e) => {
            violations.push(check::Violation {
                rule: "Berth converges once the faults heal",
                what: format!("{e:#}"),
                at_ms: None,
            });
            list(&apis).unwrap_or_default()
        }
    };
    tl.note(format!("converged: {} volumes", volumes.len()));
    let shown: Vec<String> = volumes.iter().map(|v| format!("{v:?}")).collect();
    std::fs::write(dir.join("volumes-after-heal.txt"), shown.join("\n"))?;
    let snapshots = list_snapshots(&apis).unwrap_or_default();
    let (ack, held, uncertain) = check::acknowledged(&history, &volumes, &snapshots);
    violations.extend(ack);
    match drain(&apis, Duration::from_secs(180)) {
        Ok(()) => tl.note("drained".into()),
        Err(e) => violations.push(check::Violation {
            rule: "after the final drain nothing is left",
            what: format!("{e:#}"),
            at_ms: None,
        }),
    }
    let journal = check::journal(&c.journal);
    violations.extend(check::single_node(&journal));
    violations.extend(check::created_twice(&journal));
    violations.extend(check::drained(&c.plugin_state, &dir));

    let lines: Vec<String> = history.iter().map(|r| format!("{r:?}")).collect();
    std::fs::write(dir.join("history.txt"), lines.join("\n"))?;
    report(&history, &heals, held, uncertain, &journal, &violations, &tl);
    drop(c);
    if !violations.is_empty() {
        bail!("{} violations (seed {})", violations.len(), args.seed);
    }
    // A run that passed keeps its logs, history and journal; the copies of
    // the binaries and etcd's data (about 1 GB a run) go.
    for bulky in cluster::ETCD.iter().chain(&["bin"]) {
        let _ = std::fs::remove_dir_all(dir.join(bulky));
    }
    Ok(())
}

/// The journal's checks alone, on an earlier run's journal (one that ended
/// before its own checks, say).
fn check_journal(path: &Path) -> anyhow::Result<()> {
    let journal = check::journal(path);
    anyhow::ensure!(!journal.is_empty(), "no journal entries in {}", path.display());
    let mut found = check::single_node(&journal);
    found.extend(check::created_twice(&journal));
    println!(
        "{}: {} plugin calls, {} violations",
        path.display(),
        journal.len(),
        found.len()
    );
    for v in &found {
        println!("VIOLATION: {}\n  {}", v.rule, v.what);
    }
    anyhow::ensure!(found.is_empty(), "{} violations", found.len());
    Ok(())
}

fn epoch_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn summary(apis: &[PathBuf]) -> Option<api::SummaryResponse> {
    apis.iter().find_map(|socket| {
        block_on(async {
            let mut cl = client(socket);
            tokio::time::timeout(Duration::from_secs(3), cl.summary(api::SummaryRequest {})).await
        })
        .ok()?
        .ok()
        .map(tonic::Response::into_inner)
    })
}

fn list(apis: &[PathBuf]) -> Option<Vec<api::Volume>> {
    apis.iter().find_map(|socket| {
        block_on(async {
            let mut cl = client(socket);
            tokio::time::timeout(
                Duration::from_secs(5),
                cl.list_volumes(api::ListVolumesRequest::default()),
            )
            .await
        })
        .ok()?
        .ok()
        .map(|r| r.into_inner().volumes)
    })
}

fn list_snapshots(apis: &[PathBuf]) -> Option<Vec<api::Snapshot>> {
    apis.iter().find_map(|socket| {
        block_on(async {
            let mut cl = client(socket);
            let request = api::ListSnapshotsRequest::default();
            tokio::time::timeout(Duration::from_secs(5), cl.list_snapshots(request)).await
        })
        .ok()?
        .ok()
        .map(|r| r.into_inner().snapshots)
    })
}

fn wait_ready(c: &Cluster, within: Duration) -> anyhow::Result<()> {
    let apis: Vec<PathBuf> = SERVERS.iter().map(|s| api_socket(&c.dir, s)).collect();
    let deadline = Instant::now() + within;
    loop {
        let nodes = apis.iter().find_map(|socket| {
            block_on(async {
                let mut cl = client(socket);
                tokio::time::timeout(Duration::from_secs(3), cl.list_nodes(api::ListNodesRequest {})).await
            })
            .ok()?
            .ok()
            .map(|r| r.into_inner().nodes)
        });
        let ready = nodes.is_some_and(|n| n.iter().filter(|n| n.state == "ready").count() == NODES.len());
        if ready && c.leader().is_some() {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the cluster was not ready within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until no volume has work queued, retrying or waiting; the volumes then.
fn converge(apis: &[PathBuf], within: Duration) -> anyhow::Result<Vec<api::Volume>> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(s) = summary(apis)
            && s.busy == 0
            && s.retrying == 0
            && s.waiting == 0
            && let Some(v) = list(apis)
        {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            bail!(
                "not converged {within:?} after the last heal: {:?}",
                summary(apis)
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Deletes every snapshot and every volume, and waits until Berth has none.
fn drain(apis: &[PathBuf], within: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    loop {
        let volumes = list(apis).unwrap_or_default();
        let snapshots = list_snapshots(apis).unwrap_or_default();
        if volumes.is_empty() && snapshots.is_empty() && summary(apis).is_some_and(|s| s.busy == 0) {
            return Ok(());
        }
        block_on(async {
            let mut cl = client(&apis[0]);
            for s in snapshots {
                let _ = cl
                    .delete_snapshot(api::DeleteSnapshotRequest { name: s.name })
                    .await;
            }
            for v in volumes {
                let name = v.spec.map(|s| s.name).unwrap_or_default();
                let _ = cl
                    .delete_volume(api::DeleteVolumeRequest { name, force: true })
                    .await;
            }
        });
        anyhow::ensure!(Instant::now() < deadline, "not drained within {within:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
}
