//! The runs: one server with N agents, and three on etcd with a leader
//! killed under them; what each measured, and the table they make.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use berth_proto::berth::v1 as api;
use berth_proto::berth::v1::berth_client::BerthClient;
use berth_tests::{EtcdCluster, Plugin, PluginBuilder, berth_with, test_dir};

use crate::Args;
use crate::fleet::Fleet;
use crate::server::{Server, cpu_of};

/// Joins one token allows (the server's most).
const USES: usize = 1000;

pub struct Row {
    agents: usize,
    loaded: usize,
    volumes: usize,
    opened: Duration,
    joined: Duration,
    rss_before: u64,
    rss_after: u64,
    idle_cpu: f64,
    steady_cpu: f64,
    fleet_cpu: f64,
    heartbeats_per_s: f64,
    restart_api: Duration,
    reattached: Duration,
    set_bytes_loaded: f64,
    set_bytes_empty: usize,
    api_during: Vec<Duration>,
}

impl Row {
    fn per_session(&self) -> f64 {
        (self.rss_after as f64 - self.rss_before as f64) / self.agents as f64
    }

    fn per_heartbeat_us(&self) -> f64 {
        (self.steady_cpu - self.idle_cpu).max(0.0) / self.heartbeats_per_s * 1e6
    }

    pub fn print(&self) {
        println!(
            "{} agents ({} holding {} volumes each): opened in {:.1} s, joined and attached in {:.1} s",
            self.agents,
            self.loaded,
            self.volumes,
            self.opened.as_secs_f64(),
            self.joined.as_secs_f64()
        );
        println!(
            "  server memory: {:.1} MiB before, {:.1} MiB with every session: {:.1} KiB per session (goal ≤ 64 KiB)",
            mib(self.rss_before),
            mib(self.rss_after),
            self.per_session() / 1024.0
        );
        println!(
            "  server CPU at steady state: {:.2} % of a core ({:.2} % idle before), {:.0} heartbeats/s: {:.1} µs per heartbeat, {:.2} µs per node per second (goal: heartbeats within 5 % of a core); the agents' process: {:.1} % of a core",
            self.steady_cpu * 100.0,
            self.idle_cpu * 100.0,
            self.heartbeats_per_s,
            self.per_heartbeat_us(),
            (self.steady_cpu - self.idle_cpu).max(0.0) / self.agents as f64 * 1e6,
            self.fleet_cpu * 100.0
        );
        println!(
            "  kill -9 and restart: API up in {:.2} s, every session attached again in {:.2} s; desired set per reconnect: {:.0} B for a node holding {} volumes ({:.0} B each), {} B for a node holding none",
            self.restart_api.as_secs_f64(),
            self.reattached.as_secs_f64(),
            self.set_bytes_loaded,
            self.volumes,
            self.set_bytes_loaded / self.volumes.max(1) as f64,
            self.set_bytes_empty
        );
        println!(
            "  volume create (until available) during the reattach: {}",
            spread(&self.api_during)
        );
    }
}

pub struct Failover {
    agents: usize,
    ttl: u64,
    writes_per_s: f64,
    /// From the kill until another server leads.
    elected: Option<Duration>,
    reattached: Option<Duration>,
    api_during: Vec<Duration>,
}

impl Failover {
    fn goal(&self) -> Duration {
        Duration::from_secs(3 * self.ttl + 10)
    }

    pub fn print(&self) {
        println!(
            "three servers on etcd, {} agents: etcd writes at steady state {:.2}/s; leader killed → the next leads after {}, every session attached to it after {} (goal ≤ {} s); volume create from then until all are attached: {}",
            self.agents,
            self.writes_per_s,
            self.elected
                .map_or("NEVER (2 min)".into(), |d| format!("{:.2} s", d.as_secs_f64())),
            self.reattached
                .map_or("NEVER (10 min)".into(), |d| format!("{:.2} s", d.as_secs_f64())),
            self.goal().as_secs(),
            spread(&self.api_during)
        );
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn spread(times: &[Duration]) -> String {
    if times.is_empty() {
        return "none answered".into();
    }
    let mut t = times.to_vec();
    t.sort();
    format!(
        "{} answers, p50 {:.2} s, max {:.2} s (goal ≤ 2 s)",
        t.len(),
        t[t.len() / 2].as_secs_f64(),
        t[t.len() - 1].as_secs_f64()
    )
}

/// Tokens enough for `nodes` joins, made through `api`.
fn tokens(api: &Path, nodes: usize) -> Vec<String> {
    let api = api.display().to_string();
    (0..nodes.div_ceil(USES))
        .map(|_| {
            let out = berth_with(
                &[("BERTH_API", api.as_str())],
                &["cluster", "token", "--uses", &USES.to_string(), "--ttl", "1h"],
            );
            let (stdout, stderr) = berth_tests::texts(&out);
            assert!(out.status.success(), "berth cluster token: {stderr}");
            stdout.trim().to_string()
        })
        .collect()
}

/// Waits until a server in `servers` leads with `want` nodes ready; its index.
fn wait_ready(servers: &[Server], want: usize, within: Duration, fleet: &Fleet) -> Option<usize> {
    let deadline = Instant::now() + within;
    loop {
        for (i, s) in servers.iter().enumerate().filter(|(_, s)| s.running()) {
            if s.ready_nodes() == Some(want) && s.leads() {
                return Some(i);
            }
        }
        if let Some(why) = fleet.refused() {
            panic!("{why}");
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Creates `name` through `api` and waits until it is available: how long
/// that took, or `None` after 60 s.
async fn create_available(api: &Path, name: &str) -> Option<Duration> {
    let started = Instant::now();
    let mut client = BerthClient::new(berth::csi::unix_channel(api));
    let spec = api::VolumeSpec {
        name: name.into(),
        plugin: "hostpath".into(),
        required_bytes: 1 << 20,
        ..Default::default()
    };
    while started.elapsed() < Duration::from_secs(60) {
        let created = client
            .create_volume(api::CreateVolumeRequest {
                spec: Some(spec.clone()),
            })
            .await;
        if created.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    while started.elapsed() < Duration::from_secs(60) {
        let got = client
            .get_volume(api::GetVolumeRequest { name: name.into() })
            .await;
        if got.is_ok_and(|v| v.get_ref().state == "available") {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// Volumes created through `api` and published on `node`.
async fn hold(api: &Path, node: &str, count: usize) {
    let mut client = BerthClient::new(berth::csi::unix_channel(api));
    for v in 0..count {
        let name = format!("{node}-v{v}");
        assert!(
            create_available(api, &name).await.is_some(),
            "{name} never became available"
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let published = client
                .publish_volume(api::PublishVolumeRequest {
                    name: name.clone(),
                    node: node.into(),
                    readonly: false,
                })
                .await;
            if published.is_ok_and(|v| v.get_ref().state == "published") {
                break;
            }
            assert!(Instant::now() < deadline, "{name} was never published on {node}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Volume creates through `api`, one after another, until `done` says so.
fn probe_api(rt: &tokio::runtime::Runtime, api: &Path, tag: &str, done: impl Fn() -> bool) -> Vec<Duration> {
    let mut took = Vec::new();
    let mut k = 0;
    while !done() {
        k += 1;
        match rt.block_on(create_available(api, &format!("{tag}-{k}"))) {
            Some(t) => took.push(t),
            None => {
                took.push(Duration::from_secs(60));
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    took
}

/// The sample plugin's controller, and a node plugin for each loaded node.
fn plugins(dir: &Path, loaded: usize) -> (Plugin, Vec<(String, Plugin)>) {
    let controller = PluginBuilder::new(dir, "controller")
        .args(&["--node", "false"])
        .spawn();
    let nodes = (0..loaded)
        .map(|i| {
            let name = format!("loaded-{i}");
            let p = PluginBuilder::new(dir, &name)
                .args(&["--controller", "false", "--node-id", &name])
                .spawn();
            (name, p)
        })
        .collect();
    (controller, nodes)
}

fn endpoints(p: &Plugin) -> BTreeMap<String, berth::csi::Endpoint> {
    BTreeMap::from([(
        "hostpath".to_string(),
        berth::csi::Endpoint::parse(&p.endpoint()).expect("the plugin's endpoint"),
    )])
}

/// The encoded size of a complete set with no volume in it.
fn empty_set() -> usize {
    use berth_proto::berth::v1 as wire;
    prost::Message::encoded_len(&wire::ServerMessage {
        message: Some(wire::server_message::Message::Desired(wire::DesiredSet {
            version: 1,
            volumes: Vec::new(),
        })),
    })
}

/// Opens `n` agents without plugins in `fleet`; how long that took.
fn open_light(rt: &tokio::runtime::Runtime, fleet: &mut Fleet, n: usize) -> Duration {
    let started = Instant::now();
    rt.block_on(async {
        for i in 0..n {
            fleet.open(&format!("node-{i:05}"), BTreeMap::new()).await;
        }
    });
    started.elapsed()
}

pub fn one_server(rt: &tokio::runtime::Runtime, a: &Args, n: usize) -> Row {
    let dir = test_dir();
    let (controller, loaded) = plugins(dir.path(), a.loaded);
    let mut server = Server::new(dir.path(), 0, &controller.endpoint(), None);
    server.start();
    let servers = std::slice::from_ref(&server);
    let tokens = tokens(&server.api, n + a.loaded);
    let _guard = rt.enter();
    let mut fleet = Fleet::new(dir.path(), a.heartbeat);
    rt.block_on(async {
        for (name, p) in &loaded {
            fleet.open(name, endpoints(p)).await;
        }
    });
    fleet.dial(&[server.cluster_port], &tokens, USES);
    wait_ready(servers, a.loaded, Duration::from_secs(60), &fleet).expect("the loaded nodes attached");
    rt.block_on(async {
        for (name, _) in &loaded {
            hold(&server.api, name, a.volumes).await;
        }
    });
    // Settled: the volumes converged, every loaded node heard from again.
    std::thread::sleep(a.heartbeat * 2);
    let rss_before = server.rss();
    let cpu = server.cpu();
    std::thread::sleep(a.steady);
    let idle_cpu = (server.cpu() - cpu).as_secs_f64() / a.steady.as_secs_f64();

    let opened = open_light(rt, &mut fleet, n);
    let started = Instant::now();
    fleet.dial(&[server.cluster_port], &tokens, USES);
    wait_ready(servers, n + a.loaded, Duration::from_secs(1200), &fleet)
        .unwrap_or_else(|| panic!("not every agent attached in 20 min:\n{}", server.log_tail()));
    let joined = started.elapsed();
    std::thread::sleep(a.heartbeat * 2);
    let rss_after = server.rss();

    let me = std::process::id();
    let (cpu, own, beats) = (server.cpu(), cpu_of(me), server.heartbeats());
    std::thread::sleep(a.steady);
    let steady_cpu = (server.cpu() - cpu).as_secs_f64() / a.steady.as_secs_f64();
    let fleet_cpu = (cpu_of(me) - own).as_secs_f64() / a.steady.as_secs_f64();
    let heartbeats_per_s = (server.heartbeats() - beats) / a.steady.as_secs_f64();

    server.kill();
    let restarted = Instant::now();
    server.start();
    let restart_api = restarted.elapsed();
    let servers = std::slice::from_ref(&server);
    let want = n + a.loaded;
    let all_back = std::sync::atomic::AtomicBool::new(false);
    let (reattached, api_during) = std::thread::scope(|s| {
        let waiting = s.spawn(|| {
            let back = wait_ready(servers, want, Duration::from_secs(600), &fleet);
            all_back.store(true, std::sync::atomic::Ordering::SeqCst);
            back.map(|_| restarted.elapsed())
        });
        let api_during = probe_api(rt, &servers[0].api, "storm", || {
            all_back.load(std::sync::atomic::Ordering::SeqCst)
        });
        (waiting.join().expect("the waiting thread"), api_during)
    });
    let reattached = reattached
        .unwrap_or_else(|| panic!("not every agent attached again in 10 min:\n{}", server.log_tail()));
    let (sets, bytes) = server.desired_sets();
    let empty = empty_set();
    let set_bytes_loaded = (bytes - (sets - a.loaded as f64) * empty as f64) / a.loaded as f64;
    drop(fleet);
    Row {
        agents: n,
        loaded: a.loaded,
        volumes: a.volumes,
        opened,
        joined,
        rss_before,
        rss_after,
        idle_cpu,
        steady_cpu,
        fleet_cpu,
        heartbeats_per_s,
        restart_api,
        reattached,
        set_bytes_loaded,
        set_bytes_empty: empty,
        api_during,
    }
}

/// etcd's revision now: every write moves it, a lease's renewal does not.
fn etcd_revision(etcd: &EtcdCluster) -> u64 {
    let url = format!("{}/v3/kv/range", etcd.endpoints()[0]);
    let mut answer = ureq::post(&url)
        .send("{\"key\":\"AA==\"}")
        .expect("etcd's JSON gateway answers");
    let body: serde_json::Value =
        serde_json::from_str(&answer.body_mut().read_to_string().expect("a body")).expect("JSON");
    body["header"]["revision"]
        .as_str()
        .and_then(|r| r.parse().ok())
        .expect("a revision in the header")
}

pub fn three_servers(rt: &tokio::runtime::Runtime, a: &Args, n: usize) -> Failover {
    let dir = test_dir();
    let etcd = EtcdCluster::start(3);
    let store = format!(
        "{}lease_ttl = \"{}s\"\n",
        etcd.store_config("/berth-nodes"),
        a.lease_ttl
    );
    let (controller, loaded) = plugins(dir.path(), a.loaded);
    let mut servers: Vec<Server> = (0..3)
        .map(|i| Server::new(dir.path(), i, &controller.endpoint(), Some(&store)))
        .collect();
    servers[0].start();
    share_kek(dir.path());
    servers[1].start();
    servers[2].start();
    let _guard = rt.enter();
    let mut fleet = Fleet::new(dir.path(), a.heartbeat);
    let ports: Vec<u16> = servers.iter().map(|s| s.cluster_port).collect();
    let tokens = (0..60)
        .find_map(|_| {
            let leader = servers.iter().position(Server::leads);
            if leader.is_none() {
                std::thread::sleep(Duration::from_secs(1));
            }
            leader
        })
        .map(|l| tokens(&servers[l].api, n + a.loaded))
        .expect("a leader within a minute");
    rt.block_on(async {
        for (name, p) in &loaded {
            fleet.open(name, endpoints(p)).await;
        }
    });
    open_light(rt, &mut fleet, n);
    fleet.dial(&ports, &tokens, USES);
    let want = n + a.loaded;
    let leader = wait_ready(&servers, want, Duration::from_secs(1200), &fleet)
        .unwrap_or_else(|| panic!("not every agent attached in 20 min"));
    rt.block_on(async {
        for (name, _) in &loaded {
            hold(&servers[leader].api, name, a.volumes.min(10)).await;
        }
    });
    std::thread::sleep(a.heartbeat * 2);
    let revision = etcd_revision(&etcd);
    std::thread::sleep(a.steady);
    let writes_per_s = (etcd_revision(&etcd) - revision) as f64 / a.steady.as_secs_f64();

    let killed = Instant::now();
    servers[leader].kill();
    let via = (leader + 1) % 3;
    // No server leads for about a lease's TTL: the API answers once one does.
    let elected = (0..1200).find_map(|_| {
        let leads = servers.iter().any(|s| s.running() && s.leads());
        if !leads {
            std::thread::sleep(Duration::from_millis(100));
        }
        leads.then(|| killed.elapsed())
    });
    let all_back = std::sync::atomic::AtomicBool::new(false);
    let (reattached, api_during) = std::thread::scope(|s| {
        let servers = &servers;
        let (fleet, all_back) = (&fleet, &all_back);
        let waiting = s.spawn(move || {
            let back = wait_ready(servers, want, Duration::from_secs(600), fleet);
            all_back.store(true, std::sync::atomic::Ordering::SeqCst);
            back.map(|_| killed.elapsed())
        });
        let api_during = probe_api(rt, &servers[via].api, "failover", || {
            all_back.load(std::sync::atomic::Ordering::SeqCst)
        });
        (waiting.join().expect("the waiting thread"), api_during)
    });
    drop(fleet);
    Failover {
        agents: n,
        ttl: a.lease_ttl,
        writes_per_s,
        elected,
        reattached,
        api_during,
    }
}

/// The key-encryption key the first server made, given to the others (as
/// an operator does when a cluster of servers starts).
fn share_kek(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let made = std::fs::read(dir.join("state-0/cluster/kek")).expect("the first server's key");
    for i in 1..3 {
        let cluster = dir.join(format!("state-{i}/cluster"));
        std::fs::create_dir_all(&cluster).expect("a cluster directory");
        std::fs::set_permissions(&cluster, std::fs::Permissions::from_mode(0o700)).expect("its mode");
        std::fs::write(cluster.join("kek"), &made).expect("the key");
        std::fs::set_permissions(cluster.join("kek"), std::fs::Permissions::from_mode(0o600))
            .expect("its mode");
    }
}

/// The book's table: one line per N.
pub fn table(a: &Args, rows: &[Row], failovers: &[Failover]) {
    println!(
        "| agents | memory per session | CPU per heartbeat | heartbeats' CPU (% of a core) | join and attach | reattach after a restart | desired set per reconnect ({} volumes) |",
        a.volumes
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        println!(
            "| {} | {:.1} KiB | {:.1} µs | {:.2} % | {:.1} s | {:.1} s | {:.0} B |",
            r.agents,
            r.per_session() / 1024.0,
            r.per_heartbeat_us(),
            (r.steady_cpu - r.idle_cpu).max(0.0) * 100.0,
            r.joined.as_secs_f64(),
            r.reattached.as_secs_f64(),
            r.set_bytes_loaded
        );
    }
    if !failovers.is_empty() {
        println!();
        println!(
            "| agents | etcd writes/s at steady state | leader kill → next leads | → all attached | volume create meanwhile (max) |"
        );
        println!("|---:|---:|---:|---:|---:|");
        for f in failovers {
            println!(
                "| {} | {:.2} | {} | {} | {} |",
                f.agents,
                f.writes_per_s,
                f.elected
                    .map_or("never".into(), |d| format!("{:.1} s", d.as_secs_f64())),
                f.reattached
                    .map_or("never".into(), |d| format!("{:.1} s", d.as_secs_f64())),
                f.api_during
                    .iter()
                    .max()
                    .map_or("none".into(), |d| format!("{:.2} s", d.as_secs_f64()))
            );
        }
    }
}
