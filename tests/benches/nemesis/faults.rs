//! The faults: what the nemesis does to the cluster for a while, and the
//! heal that undoes every one of them.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use berth_tests::faultfs::DiskFault;

use crate::Rng;
use crate::cluster::{Cluster, ETCD, NODES, SERVERS};
use crate::procs::Kind;
use crate::report::Timeline;

/// What the nemesis does for a while, then undoes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    LeaderFromEtcdMajority,
    AgentFromServers,
    FollowerFromLeader,
    EtcdMemberAlone,
    PacketLoss,
    Kill,
    Stop,
    /// The machine's wall clock stepped (every process shares it), and
    /// stepped back by as much at the heal.
    ClockStep,
    /// A plugin (the controller or a node's) started again misbehaving:
    /// failing calls with retryable or unexpected codes, leaving answers
    /// that never come, answering slowly ([`MISBEHAVIOURS`]).
    PluginMisbehaves,
    /// A plugin killed and started again and again for the fault's window,
    /// its answers held back after the work is done, so that calls die in
    /// the middle.
    PluginCrashLoop,
    /// The disk under an etcd member's data or an agent's directory fails
    /// fsyncs, writes, space or everything ([`DISK_FAULTS`]).
    DiskFails,
}

pub const FAULTS: [Fault; 11] = [
    Fault::DiskFails,
    Fault::PluginMisbehaves,
    Fault::PluginCrashLoop,
    Fault::LeaderFromEtcdMajority,
    Fault::AgentFromServers,
    Fault::FollowerFromLeader,
    Fault::EtcdMemberAlone,
    Fault::PacketLoss,
    Fault::Kill,
    Fault::Stop,
    Fault::ClockStep,
];

/// How a misbehaving plugin misbehaves: what the timeline says, and its flags.
pub const MISBEHAVIOURS: [(&str, &[&str]); 5] = [
    (
        "fails calls: 30% UNAVAILABLE, 20% INTERNAL",
        &["--fault", "UNAVAILABLE=0.3", "--fault", "INTERNAL=0.2"],
    ),
    (
        "answers codes CSI never names: 20% UNKNOWN, 10% DATA_LOSS",
        &["--fault", "UNKNOWN=0.2", "--fault", "DATA_LOSS=0.1"],
    ),
    ("leaves 30% of calls unanswered", &["--hang-rate", "0.3"]),
    ("answers every call 1.5 s late", &["--latency", "1500ms"]),
    (
        "answers OK for 20% of DeleteVolume and NodeUnpublishVolume without doing them",
        &["--lie-rate", "0.2"],
    ),
];

/// How a failing disk fails: what the timeline says, and the fault.
pub const DISK_FAULTS: [(&str, DiskFault); 4] = [
    ("fails every fsync (EIO)", DiskFault::FailFsync),
    ("fails every write (EIO)", DiskFault::FailWrites),
    ("is full (ENOSPC)", DiskFault::Full),
    ("went read-only (EROFS)", DiskFault::ReadOnly),
];

/// The flags a crash-looping plugin runs with: every answer held back
/// after its work is done, so that a kill lands in the middle of calls.
const CRASH_LOOP_FLAGS: [&str; 2] = ["--reply-delay", "400ms"];

/// The plugin processes, controller and nodes'.
fn plugins(c: &Cluster) -> Vec<String> {
    c.procs
        .iter()
        .filter(|p| matches!(p.kind, Kind::Controller | Kind::NodePlugin))
        .map(|p| p.name.clone())
        .collect()
}

fn pick<'a>(rng: &mut Rng, from: &[&'a str]) -> &'a str {
    from[rng.below(from.len() as u64) as usize]
}

/// Starts `fault`; what it did, or `None` when it cannot be made now (no leader).
pub fn inject(c: &mut Cluster, rng: &mut Rng, fault: Fault) -> anyhow::Result<Option<String>> {
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
        Fault::ClockStep => {
            let seconds = 10 + rng.below(110) as i64;
            let delta = if rng.below(2) == 0 { seconds } else { -seconds } * 1000;
            if let Err(e) = step_clock(delta) {
                // Not permitted here (no CAP_SYS_TIME): said once per try, skipped.
                return Ok(Some(format!("no wall-clock step: {e}")));
            }
            STEPPED_MS.store(delta, Ordering::SeqCst);
            format!("wall clock stepped {:+} s", delta / 1000)
        }
        Fault::PluginMisbehaves => {
            let names = plugins(c);
            let name = names[rng.below(names.len() as u64) as usize].clone();
            let (what, flags) = MISBEHAVIOURS[rng.below(MISBEHAVIOURS.len() as u64) as usize];
            let mut extra: Vec<String> = flags.iter().map(|f| f.to_string()).collect();
            extra.extend(["--seed".to_string(), rng.below(1 << 32).to_string()]);
            c.proc(&name).restart_with(extra)?;
            format!("{name} {what}")
        }
        Fault::PluginCrashLoop => {
            let names = plugins(c);
            let name = names[rng.below(names.len() as u64) as usize].clone();
            c.proc(&name)
                .restart_with(CRASH_LOOP_FLAGS.iter().map(|f| f.to_string()).collect())?;
            *CRASH_LOOPING.lock().unwrap() = Some(name.clone());
            format!("{name} crash-looping, answers held back 400 ms")
        }
        Fault::DiskFails => {
            if c.disks.is_empty() {
                return Ok(None);
            }
            let (owner, disk) = &c.disks[rng.below(c.disks.len() as u64) as usize];
            let (what, fault) = DISK_FAULTS[rng.below(DISK_FAULTS.len() as u64) as usize];
            disk.set(fault);
            format!("{owner}'s disk {what}")
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

/// The plugin a [`Fault::PluginCrashLoop`] keeps killing, until the heal.
static CRASH_LOOPING: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// Holds the fault in force for `window`: a crash-looping plugin is killed
/// after 0.2 to 1.5 s up and started again after 0.1 to 0.5 s down, the
/// rest wait.
pub fn hold(c: &mut Cluster, rng: &mut Rng, window: Duration) -> anyhow::Result<()> {
    let ends = Instant::now() + window;
    let Some(name) = CRASH_LOOPING.lock().unwrap().clone() else {
        std::thread::sleep(window);
        return Ok(());
    };
    while Instant::now() < ends {
        std::thread::sleep(Duration::from_millis(200 + rng.below(1300)).min(ends - Instant::now()));
        c.proc(&name).kill();
        std::thread::sleep(Duration::from_millis(100 + rng.below(400)));
        c.proc(&name).start()?;
    }
    Ok(())
}

/// Steps the machine's wall clock by `delta_ms` (CLOCK_REALTIME; the
/// monotonic clock, which every delay of Berth's uses, does not move).
pub fn step_clock(delta_ms: i64) -> std::io::Result<()> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime and clock_settime on a timespec we own.
    unsafe {
        if libc::clock_gettime(libc::CLOCK_REALTIME, &mut now) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let total = now.tv_sec * 1000 + now.tv_nsec / 1_000_000 + delta_ms;
        let to = libc::timespec {
            tv_sec: total.div_euclid(1000) as libc::time_t,
            tv_nsec: (total.rem_euclid(1000) * 1_000_000) as libc::c_long,
        };
        if libc::clock_settime(libc::CLOCK_REALTIME, &to) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The wall-clock step in force, undone at the heal.
pub static STEPPED_MS: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

pub fn heal(c: &mut Cluster, tl: &mut Timeline) -> anyhow::Result<()> {
    let stepped = STEPPED_MS.swap(0, Ordering::SeqCst);
    if stepped != 0 {
        step_clock(-stepped)?;
    }
    c.net.heal()?;
    *CRASH_LOOPING.lock().unwrap() = None;
    for (_, disk) in &c.disks {
        disk.set(DiskFault::None);
    }
    let mut behaving = Vec::new();
    for p in &mut c.procs {
        p.cont();
        if p.behave()? {
            behaving.push(p.name.clone());
        }
    }
    let (started, by_hand) = c.restart_dead()?;
    let mut said = String::from("healed");
    if !behaving.is_empty() {
        said.push_str(&format!("; behaving again: {}", behaving.join(", ")));
    }
    if !by_hand.is_empty() {
        said.push_str(&format!("; unmounted by hand: {}", by_hand.join(", ")));
    }
    if !started.is_empty() {
        said.push_str(&format!("; started again: {}", started.join(", ")));
    }
    tl.note(said);
    Ok(())
}
