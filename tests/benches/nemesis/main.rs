//! `cargo xtask nemesis [--seconds N] [--seed S]`: Berth under partitions,
//! packet loss, `kill -9` and SIGSTOP, each process in a network namespace
//! of its own, while a workload creates, publishes, moves, snapshots,
//! expands and deletes volumes; then a checker of what must never happen
//! (`check.rs`), each fault kind's recovery time, and on a violation the
//! timeline around it. Needs root (namespaces, iptables).

mod check;
mod cluster;
mod net;
mod procs;
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

use cluster::{Cluster, ETCD, NODES, SERVERS, api_socket, node_name};
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

/// What the nemesis does for a while, then undoes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    LeaderFromEtcdMajority,
    AgentFromServers,
    FollowerFromLeader,
    EtcdMemberAlone,
    PacketLoss,
    Kill,
    Stop,
}

const FAULTS: [Fault; 7] = [
    Fault::LeaderFromEtcdMajority,
    Fault::AgentFromServers,
    Fault::FollowerFromLeader,
    Fault::EtcdMemberAlone,
    Fault::PacketLoss,
    Fault::Kill,
    Fault::Stop,
];

struct Args {
    seconds: u64,
    seed: u64,
    dir: PathBuf,
}

fn args() -> anyhow::Result<Args> {
    let mut a = Args {
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
            // What cargo bench passes its benches.
            "--bench" => {}
            other => bail!("unknown argument {other} (--seconds N, --seed S, --dir DIR)"),
        }
    }
    Ok(a)
}

/// One entry of the timeline: milliseconds since the run started.
struct Timeline {
    started: Instant,
    started_epoch_ms: u64,
    events: Vec<(u64, String)>,
}

impl Timeline {
    fn note(&mut self, what: String) {
        let ms = self.started.elapsed().as_millis() as u64;
        println!("{:>8.1}s  {what}", ms as f64 / 1000.0);
        self.events.push((ms, what));
    }

    fn around(&self, at_epoch_ms: u64) -> Vec<&(u64, String)> {
        let at = at_epoch_ms.saturating_sub(self.started_epoch_ms);
        self.events
            .iter()
            .filter(|(ms, _)| ms.abs_diff(at) <= 15_000)
            .collect()
    }
}

fn main() {
    if let Err(e) = run() {
        eprintln!("nemesis: {e:#}");
        std::process::exit(1);
    }
}

fn run() -> anyhow::Result<()> {
    let args = args()?;
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

    let mut heals: Vec<(Fault, u64)> = Vec::new();
    let end = Instant::now() + Duration::from_secs(args.seconds);
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(2000 + rng.below(3000)));
        let fault = FAULTS[rng.below(FAULTS.len() as u64) as usize];
        let Some(what) = inject(&mut c, &mut rng, fault)? else {
            continue;
        };
        tl.note(format!("{fault:?}: {what}"));
        std::thread::sleep(Duration::from_millis(3000 + rng.below(7000)));
        heal(&mut c, &mut tl)?;
        heals.push((fault, tl.started.elapsed().as_millis() as u64));
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
    drain(&apis, Duration::from_secs(180))?;
    tl.note("drained".into());
    let journal = check::journal(&c.journal);
    violations.extend(check::single_node(&journal));
    violations.extend(check::created_twice(&journal));
    violations.extend(check::drained(&c.plugin_state, &dir));

    let lines: Vec<String> = history.iter().map(|r| format!("{r:?}")).collect();
    std::fs::write(dir.join("history.txt"), lines.join("\n"))?;
    report(&history, &heals, held, uncertain, &journal, &violations, &tl);
    for point in check::mounts_below(&dir) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&point)
            .status();
    }
    drop(c);
    if !violations.is_empty() {
        bail!("{} violations (seed {})", violations.len(), args.seed);
    }
    Ok(())
}

fn epoch_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn pick<'a>(rng: &mut Rng, from: &[&'a str]) -> &'a str {
    from[rng.below(from.len() as u64) as usize]
}

/// Starts `fault`; what it did, or `None` when it cannot be made now (no leader).
fn inject(c: &mut Cluster, rng: &mut Rng, fault: Fault) -> anyhow::Result<Option<String>> {
    let leader = || c.leader();
    Ok(Some(match fault {
        Fault::LeaderFromEtcdMajority => {
            let Some(l) = leader() else { return Ok(None) };
            let kept = pick(rng, &ETCD);
            let cut: Vec<&str> = ETCD.iter().copied().filter(|e| *e != kept).collect();
            c.net.partition(&[&l], &cut)?;
            format!("leader {l} cut from etcd {cut:?}")
        }
        Fault::AgentFromServers => {
            let n = pick(rng, &NODES);
            c.net.partition(&[n], &SERVERS)?;
            format!("{n} cut from every server")
        }
        Fault::FollowerFromLeader => {
            let Some(l) = leader() else { return Ok(None) };
            let others: Vec<&str> = SERVERS.iter().copied().filter(|s| *s != l).collect();
            let f = pick(rng, &others);
            c.net.partition(&[f], &[&l])?;
            format!("follower {f} cut from leader {l}")
        }
        Fault::EtcdMemberAlone => {
            let e = pick(rng, &ETCD);
            let others: Vec<&str> = ETCD.iter().copied().filter(|x| *x != e).collect();
            c.net.partition(&[e], &others)?;
            format!("etcd {e} cut from the other members")
        }
        Fault::PacketLoss => {
            let hosts: Vec<&str> = ETCD.iter().chain(&SERVERS).chain(&NODES).copied().collect();
            let h = pick(rng, &hosts);
            c.net.lose(h, 0.5)?;
            format!("{h} loses half its packets")
        }
        Fault::Kill | Fault::Stop => {
            let names: Vec<String> = c.procs.iter().map(|p| p.name.clone()).collect();
            let name = names[rng.below(names.len() as u64) as usize].clone();
            let p = c.proc(&name);
            let kind = p.kind;
            if fault == Fault::Kill {
                p.kill();
                format!("kill -9 {name} ({kind:?})")
            } else {
                p.stop();
                format!("SIGSTOP {name} ({kind:?})")
            }
        }
    }))
}

fn heal(c: &mut Cluster, tl: &mut Timeline) -> anyhow::Result<()> {
    c.net.heal()?;
    for p in &mut c.procs {
        p.cont();
    }
    let started = c.restart_dead()?;
    tl.note(match started.is_empty() {
        true => "healed".into(),
        false => format!("healed; started again: {}", started.join(", ")),
    });
    Ok(())
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
                cl.list_volumes(api::ListVolumesRequest {}),
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

/// Recovery: from a heal to the first request acknowledged after it.
fn recoveries(history: &[workload::Record], heals: &[(Fault, u64)]) -> Vec<(Fault, Vec<u64>)> {
    let mut by: std::collections::BTreeMap<Fault, Vec<u64>> = Default::default();
    for (fault, at) in heals {
        let first = history
            .iter()
            .filter(|r| r.outcome == workload::Outcome::Ok && r.completed >= *at)
            .map(|r| r.completed)
            .min();
        if let Some(done) = first {
            by.entry(*fault).or_default().push(done - at);
        }
    }
    by.into_iter().collect()
}

fn report(
    history: &[workload::Record],
    heals: &[(Fault, u64)],
    held: usize,
    uncertain: usize,
    journal: &[serde_json::Value],
    violations: &[check::Violation],
    tl: &Timeline,
) {
    let count = |o: fn(&workload::Outcome) -> bool| history.iter().filter(|r| o(&r.outcome)).count();
    println!("\nnemesis summary");
    println!(
        "  operations: {} ({} acknowledged, {} refused, {} uncertain)",
        history.len(),
        count(|o| *o == workload::Outcome::Ok),
        count(|o| matches!(o, workload::Outcome::Refused(_))),
        count(|o| *o == workload::Outcome::Unknown),
    );
    let mut refused: std::collections::BTreeMap<String, usize> = Default::default();
    for r in history {
        if let workload::Outcome::Refused(code) = r.outcome {
            let op = format!("{:?}", r.op);
            let op = op.split([' ', '{']).next().unwrap_or_default().to_string();
            *refused.entry(format!("{op} {code:?}")).or_default() += 1;
        }
    }
    println!("  refused: {refused:?}");
    println!("  volumes held to their acknowledged state: {held} ({uncertain} with an uncertain answer)");
    println!("  plugin calls journaled: {}", journal.len());
    println!("  faults: {}", heals.len());
    println!(
        "  {:<24} {:>6} {:>10} {:>10}",
        "recovery after", "faults", "median ms", "max ms"
    );
    for (fault, mut times) in recoveries(history, heals) {
        times.sort_unstable();
        let median = times[times.len() / 2];
        let max = times.last().copied().unwrap_or_default();
        println!(
            "  {:<24} {:>6} {:>10} {:>10}",
            format!("{fault:?}"),
            times.len(),
            median,
            max
        );
    }
    println!("  violations: {}", violations.len());
    for v in violations {
        println!("\nVIOLATION: {}\n  {}", v.rule, v.what);
        if let Some(at) = v.at_ms {
            println!("  timeline around it:");
            for (ms, what) in tl.around(at) {
                println!("    {:>8.1}s  {what}", *ms as f64 / 1000.0);
            }
        }
    }
}
