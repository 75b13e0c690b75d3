//! Fleet scale: N nodes' agents in session with a real `berth serve` over
//! real mutual TLS, made with the agent's own session code (all in this
//! process: see `fleet.rs`). A few of the nodes ("loaded") have a sample
//! plugin process of their own and hold volumes; the rest hold none.
//!
//! For each N it reports, against one server on the embedded store:
//! - the server's resident memory per session (after all N attached, less
//!   before any of the N did);
//! - its CPU at steady state: per heartbeat, per node per second, and in
//!   all, against the same server idle before;
//! - the time for all N to join and attach, and, after a `kill -9` and a
//!   restart of the server, for all N to attach again (the agents' redials
//!   are jittered), with the API's answers meanwhile;
//! - the bytes of complete desired set sent per reconnect to a node holding
//!   `--volumes` volumes.
//!
//! With `--failover`, then three servers on a three-member etcd: etcd's
//! writes per second at steady state (its revision, which every write and
//! no heartbeat moves), and from a `kill -9` of the leader until all N are
//! attached to the next one (goal: 3× the lease TTL plus 10 s), with a
//! volume created through a surviving server meanwhile (goal: 2 s).
//!
//! `cargo xtask bench-nodes [--agents N[,N…]] [--loaded 4] [--volumes 50]
//! [--steady 30] [--heartbeat 5] [--lease-ttl 5] [--failover]`

mod fleet;
mod run;
mod server;

use std::time::Duration;

/// What a run is asked to do.
pub struct Args {
    pub agents: Vec<usize>,
    /// Nodes with a plugin of their own, holding volumes.
    pub loaded: usize,
    /// Volumes each loaded node holds.
    pub volumes: usize,
    /// How long steady state is measured.
    pub steady: Duration,
    /// The agents' heartbeat interval (the server's timeout is 3×).
    pub heartbeat: Duration,
    pub lease_ttl: u64,
    pub failover: bool,
}

fn args() -> Args {
    let all: Vec<String> = std::env::args().collect();
    let value = |name: &str| {
        all.iter()
            .position(|a| a == name)
            .and_then(|i| all.get(i + 1))
            .cloned()
    };
    let number = |name: &str, default: u64| {
        value(name).map_or(default, |v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} takes a number, not {v:?}"))
        })
    };
    let agents = value("--agents")
        .unwrap_or_else(|| "100,1000".into())
        .split(',')
        .map(|n| {
            n.trim()
                .parse()
                .unwrap_or_else(|_| panic!("--agents takes numbers separated by commas, not {n:?}"))
        })
        .collect();
    Args {
        agents,
        loaded: number("--loaded", 4) as usize,
        volumes: number("--volumes", 50) as usize,
        steady: Duration::from_secs(number("--steady", 30)),
        heartbeat: Duration::from_secs(number("--heartbeat", 5)),
        lease_ttl: number("--lease-ttl", 5),
        failover: all.iter().any(|a| a == "--failover"),
    }
}

/// Descriptors for this process (every agent's connection) and the
/// server it starts (every session's): 65,536 as the packaged units set,
/// where this process may raise its hard limit, else the hard limit.
fn raise_descriptors() -> u64 {
    // SAFETY: setrlimit/getrlimit write only the structs passed in.
    unsafe {
        let wanted = libc::rlimit {
            rlim_cur: 65_536,
            rlim_max: 65_536,
        };
        let mut now = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut now);
        if now.rlim_max < wanted.rlim_max && libc::setrlimit(libc::RLIMIT_NOFILE, &wanted) == 0 {
            return wanted.rlim_cur;
        }
        now.rlim_cur = now.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &now);
        now.rlim_cur
    }
}

fn main() {
    let args = args();
    let descriptors = raise_descriptors();
    let most = args.agents.iter().max().copied().unwrap_or(0) + args.loaded;
    assert!(
        descriptors as usize > most * 2 + 1024,
        "{most} sessions need more descriptors than the {descriptors} this process may open (ulimit -n)"
    );
    assert!(args.loaded >= 1, "--loaded: at least one node holds volumes");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let mut rows = Vec::new();
    for &n in &args.agents {
        let row = run::one_server(&rt, &args, n);
        row.print();
        rows.push(row);
    }
    let mut failovers = Vec::new();
    if args.failover {
        for &n in &args.agents {
            let f = run::three_servers(&rt, &args, n);
            f.print();
            failovers.push(f);
        }
    }
    println!();
    run::table(&args, &rows, &failovers);
    // The agents' tasks end with the runtime; nothing waits for them.
    rt.shutdown_timeout(Duration::from_secs(1));
}
