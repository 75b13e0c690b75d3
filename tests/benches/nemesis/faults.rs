//! The faults: what the nemesis does to the cluster for a while, and the
//! heal that undoes every one of them.

use std::sync::atomic::Ordering;

use crate::Rng;
use crate::cluster::{Cluster, ETCD, NODES, SERVERS};
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
}

pub const FAULTS: [Fault; 8] = [
    Fault::LeaderFromEtcdMajority,
    Fault::AgentFromServers,
    Fault::FollowerFromLeader,
    Fault::EtcdMemberAlone,
    Fault::PacketLoss,
    Fault::Kill,
    Fault::Stop,
    Fault::ClockStep,
];

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
