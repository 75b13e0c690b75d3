//! `cargo xtask nemesis [--seconds N] [--seed S]`: Berth under partitions,
//! packet loss, `kill -9`, SIGSTOP, clock steps, failing disks (under the
//! etcd members and the agents) and misbehaving, lying or crash-looping
//! plugins, each process in a network namespace
//! of its own, while a workload creates, publishes, moves, snapshots,
//! expands and deletes volumes; then a checker of what must never happen
//! (`check.rs`), each fault kind's recovery time, and on a violation the
//! timeline around it. Needs root (namespaces, iptables).

mod cluster;
mod faults;
mod net;
mod procs;
mod report;
mod stuck;
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
use faults::{FAULTS, Fault, STEPPED_MS, heal, hold, inject, step_clock};
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
    // The kinds in a shuffled bag: every kind once before any comes again,
    // so that a short run meets each one.
    let mut bag: Vec<Fault> = Vec::new();
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(2000 + rng.below(3000)));
        if bag.is_empty() {
            bag = FAULTS.to_vec();
            for i in (1..bag.len()).rev() {
                bag.swap(i, rng.below(i as u64 + 1) as usize);
            }
        }
        let Some(fault) = bag.pop() else { continue };
        let Some(what) = inject(&mut c, &mut rng, fault)? else {
            continue;
        };
        tl.note(format!("{fault:?}: {what}"));
        let began = tl.started.elapsed().as_millis() as u64;
        let window = Duration::from_millis(3000 + rng.below(7000));
        hold(&mut c, &mut rng, window)?;
        heal(&mut c, &mut tl)?;
        heals.push((fault, began, tl.started.elapsed().as_millis() as u64));
    }
    heal(&mut c, &mut tl)?;
    stop.store(true, Ordering::Relaxed);
    runner.join().expect("the workload's thread");
    tl.note("workload stopped; waiting for Berth to converge".into());
    let history = std::mem::take(&mut *work.history.lock().unwrap());

    // The operator's part: a volume the retry policy gave up on (a plugin
    // that answered DATA_LOSS, say) waits for `berth volume retry`. Only
    // the faults the plugins were told to inject may have caused one.
    let mut violations = Vec::new();
    let mut retried = Vec::new();
    let converged = converge(&apis, Duration::from_secs(180), &mut retried);
    retried.sort();
    retried.dedup();
    for (name, failure) in &retried {
        if !failure.contains("injected fault") {
            violations.push(check::Violation {
                rule: "a volume gives up only on a fault the plugins injected",
                what: format!("volume {name}: {failure}"),
                at_ms: None,
            });
        }
    }
    if !retried.is_empty() {
        let volumes: std::collections::BTreeSet<&str> =
            retried.iter().map(|(name, _)| name.as_str()).collect();
        tl.note(format!(
            "retried {} volumes given up on ({} retries), as an operator would",
            volumes.len(),
            retried.len()
        ));
    }
    let volumes = match converged {
        Ok(v) => v,
        Err(e) => {
            violations.push(check::Violation {
                rule: "Berth converges once the faults heal",
                what: format!("{e:#}\n{}", stuck::berth_side(&apis)),
                at_ms: None,
            });
            list(&apis).unwrap_or_default()
        }
    };
    tl.note(format!("converged: {} volumes", volumes.len()));
    let shown: Vec<String> = volumes.iter().map(|v| format!("{v:?}")).collect();
    std::fs::write(dir.join("volumes-after-heal.txt"), shown.join("\n"))?;
    let snapshots = list_snapshots(&apis).unwrap_or_default();
    let (ack, held, uncertain) =
        check::acknowledged(&history, &volumes, &snapshots, &|name| events(&apis, name));
    violations.extend(ack);
    match drain(&apis, Duration::from_secs(180)) {
        Ok(()) => tl.note("drained".into()),
        Err(e) => violations.push(check::Violation {
            rule: "after the final drain nothing is left",
            what: format!("{e:#}\n{}", stuck::berth_side(&apis)),
            at_ms: None,
        }),
    }
    violations.extend(berth_tests::nemesis::linear::linearizable(&history));
    let journal = check::journal(&c.journal);
    let left_on_plugins = stuck::plugin_side(&c.plugin_state, &journal);
    if !left_on_plugins.is_empty() {
        println!("what the plugins still hold:\n{left_on_plugins}");
    }
    let (on_two_nodes, mut lies) = check::single_node_and_lies(&journal);
    violations.extend(on_two_nodes);
    violations.extend(check::created_twice(&journal));
    violations.extend(check::drained(&c.plugin_state, &dir, &mut lies));
    if lies.calls > 0 {
        println!(
            "the plugins answered OK without doing the work {} times; what that left (theirs, not Berth's):",
            lies.calls
        );
        for said in &lies.consequences {
            println!("  {said}");
        }
    }

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

/// A volume's latest events as Berth recorded them, a line each.
fn events(apis: &[PathBuf], name: &str) -> String {
    let volume = apis.iter().find_map(|socket| {
        block_on(async {
            let request = api::GetVolumeRequest {
                name: name.to_string(),
            };
            tokio::time::timeout(Duration::from_secs(5), client(socket).get_volume(request)).await
        })
        .ok()?
        .ok()
    });
    let Some(volume) = volume else {
        return "\n  (its events: no server answered)".into();
    };
    let lines: Vec<String> = volume
        .into_inner()
        .events
        .iter()
        .map(|e| {
            format!(
                "\n    event {} at {} ms: {} {} {}",
                e.seq, e.at_ms, e.step, e.code, e.message
            )
        })
        .collect();
    format!("\n  its events, as Berth recorded them:{}", lines.concat())
}

/// The volumes that failed for good: each one's name and its failure.
fn failed_of(volumes: &[api::Volume]) -> Vec<(String, String)> {
    volumes
        .iter()
        .filter(|v| v.state == "failed")
        .map(|v| {
            (
                v.spec.as_ref().map(|s| s.name.clone()).unwrap_or_default(),
                v.failure.clone(),
            )
        })
        .collect()
}

/// Asks again for each volume (`berth volume retry`), through the first
/// server that answers.
fn retry(apis: &[PathBuf], failed: &[(String, String)]) {
    for (name, _) in failed {
        for socket in apis {
            let retried = block_on(async {
                let request = api::RetryVolumeRequest { name: name.clone() };
                tokio::time::timeout(Duration::from_secs(5), client(socket).retry_volume(request)).await
            });
            if matches!(retried, Ok(Ok(_))) {
                break;
            }
        }
    }
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

/// Waits until nothing is busy, retrying or waiting. A volume given up on
/// is retried, as an operator would, and noted in `retried`.
fn converge(
    apis: &[PathBuf],
    within: Duration,
    retried: &mut Vec<(String, String)>,
) -> anyhow::Result<Vec<api::Volume>> {
    let deadline = Instant::now() + within;
    loop {
        // A failed volume is neither busy, retrying nor waiting: Berth
        // has not converged while one is left (its retry may have been
        // lost with a leader, or it failed again since it was retried).
        if let Some(v) = list(apis) {
            let failed = failed_of(&v);
            if failed.is_empty() {
                if summary(apis).is_some_and(|s| s.busy == 0 && s.retrying == 0 && s.waiting == 0)
                    && let Some(v) = list(apis)
                    && failed_of(&v).is_empty()
                {
                    return Ok(v);
                }
            } else {
                retry(apis, &failed);
                retried.extend(failed);
            }
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
