//! `/metrics`, `/healthz` and `/readyz` as a monitoring system and a
//! supervisor see them: scraped over real HTTP, parsed by a Prometheus
//! text-format parser, and checked against what the sample plugin itself
//! logged of every call it answered.

use std::collections::BTreeMap;
use std::time::Duration;

use berth_tests::scrape::{by_labels, get, scrape, wait_ready};
use berth_tests::{Cluster, ClusterSpec, EtcdCluster, free_port};
use prometheus_parse::Value;

/// The calls that carry volumes through their lifecycle: they stop once it
/// is over, unlike the fingerprints' Identity and capability calls.
const LIFECYCLE: [&str; 8] = [
    "/csi.v1.Controller/CreateVolume",
    "/csi.v1.Controller/DeleteVolume",
    "/csi.v1.Controller/ControllerPublishVolume",
    "/csi.v1.Controller/ControllerUnpublishVolume",
    "/csi.v1.Node/NodeStageVolume",
    "/csi.v1.Node/NodeUnstageVolume",
    "/csi.v1.Node/NodePublishVolume",
    "/csi.v1.Node/NodeUnpublishVolume",
];

/// The plugin's own count: `method code-name` → calls.
fn plugin_saw(log: &std::path::Path) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in std::fs::read_to_string(log).unwrap().lines() {
        let (method, code) = line.split_once(' ').unwrap();
        let code = berth::metrics::code_name(tonic::Code::from(code.parse::<i32>().unwrap()));
        *out.entry(format!("{method} {code}")).or_insert(0.0) += 1.0;
    }
    out
}

fn only_lifecycle(counts: BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    counts
        .into_iter()
        .filter(|(k, _)| LIFECYCLE.iter().any(|m| k.starts_with(&format!("{m} "))))
        .collect()
}

#[test]
fn metrics_count_the_calls_the_plugin_saw() {
    let logs = berth_tests::test_dir();
    let calls = logs.path().join("calls.log");
    let calls_arg = calls.display().to_string();
    let port = free_port();
    let extra = format!("metrics = \"127.0.0.1:{port}\"");
    let c = Cluster::start(ClusterSpec {
        plugin_args: vec![
            "--call-log",
            &calls_arg,
            "--fault-calls",
            "CreateVolume,NodeStageVolume,DeleteVolume",
            "--fault",
            "UNAVAILABLE=0.3",
            "--seed",
            "7",
        ],
        extra: &extra,
        ..ClusterSpec::default()
    });
    let names: Vec<String> = (0..8).map(|i| format!("m{i}")).collect();
    for name in &names {
        c.create_in(name, "zone=a");
        c.ok(&["volume", "publish", name, "--node", "node-a", "--wait"]);
    }
    let s = scrape(port);
    assert_eq!(
        by_labels(&s, "berth_volumes", &["state"]).get("published"),
        Some(&8.0),
        "volumes by state"
    );
    for (metric, labels, want) in [
        ("berth_leader", vec![], 1.0),
        ("berth_plugin_healthy", vec!["plugin"], 1.0),
        ("berth_node_ready", vec!["node"], 1.0),
    ] {
        let got = by_labels(&s, metric, &labels);
        assert!(
            !got.is_empty() && got.values().all(|v| *v == want),
            "{metric}: {got:?}"
        );
    }

    for name in &names {
        c.ok(&["volume", "unpublish", name, "--node", "node-a", "--wait"]);
        c.ok(&["volume", "delete", name, "--wait"]);
    }
    let s = scrape(port);
    let berth_counted = only_lifecycle(by_labels(
        &s,
        "berth_csi_operations_seconds",
        &["method_name", "grpc_status_code"],
    ));
    let plugin_counted = only_lifecycle(plugin_saw(&calls));
    assert_eq!(
        berth_counted, plugin_counted,
        "Berth's histogram counts every lifecycle call the plugins answered, by code"
    );
    let failed = |method: &str| {
        plugin_counted
            .get(&format!("/csi.v1.{method} Unavailable"))
            .copied()
            .unwrap_or(0.0)
    };
    assert!(
        failed("Controller/CreateVolume") > 0.0,
        "the faults were injected: {plugin_counted:?}"
    );

    // The sidecars' names, labels and buckets.
    let create = s
        .samples
        .iter()
        .find(|x| {
            x.metric == "berth_csi_operations_seconds"
                && x.labels.get("method_name") == Some("/csi.v1.Controller/CreateVolume")
        })
        .expect("a CreateVolume histogram");
    assert_eq!(create.labels.get("driver_name"), Some("hostpath.csi.berth.dev"));
    let drivers = by_labels(&s, "berth_csi_operations_seconds", &["driver_name"]);
    assert_eq!(
        drivers.keys().collect::<Vec<_>>(),
        ["hostpath.csi.berth.dev"],
        "named from the first GetPluginInfo on"
    );
    let Value::Histogram(buckets) = &create.value else {
        panic!("not a histogram: {create:?}");
    };
    let bounds: Vec<f64> = buckets.iter().map(|b| b.less_than).collect();
    let mut want = berth::metrics::CSI_BUCKETS.to_vec();
    want.push(f64::INFINITY);
    assert_eq!(bounds, want);

    // Each failure the retry policy answered with a retry is counted once.
    let retries = by_labels(&s, "berth_retries_total", &["operation"]);
    for (operation, method) in [
        ("CreateVolume", "Controller/CreateVolume"),
        ("NodeStageVolume", "Node/NodeStageVolume"),
        ("DeleteVolume", "Controller/DeleteVolume"),
    ] {
        assert_eq!(
            retries.get(operation).copied().unwrap_or(0.0),
            failed(method),
            "{operation}: {retries:?}"
        );
    }

    // The sample guests decided, each time timed.
    let decisions = by_labels(&s, "berth_policy_decisions_total", &["decision", "outcome"]);
    assert!(
        decisions.get("naming ok").copied().unwrap_or(0.0) >= 8.0,
        "{decisions:?}"
    );
    let timed = by_labels(&s, "berth_policy_decision_seconds", &["decision"]);
    let counted = by_labels(&s, "berth_policy_decisions_total", &["decision"]);
    assert_eq!(timed, counted, "one timing per decision");
    let modules = by_labels(&s, "berth_policy_decisions_total", &["module", "decision"]);
    assert!(
        modules
            .keys()
            .any(|k| k.ends_with(" naming") && !k.starts_with("builtin ")),
        "naming is decided by the guest module: {modules:?}"
    );

    let commits = by_labels(&s, "berth_store_commit_seconds", &[]);
    let batched = by_labels(&s, "berth_store_commit_batch_size_sum", &[]);
    assert!(
        commits[""] > 0.0 && batched[""] >= commits[""],
        "{commits:?} {batched:?}"
    );
    assert_eq!(
        by_labels(&s, "berth_volumes", &["state"]).values().sum::<f64>(),
        0.0
    );

    assert_eq!(get(port, "/healthz").unwrap(), (200, "ok\n".to_string()));
    let (status, _) = get(port, "/nowhere").unwrap();
    assert_eq!(status, 404);
}

#[test]
fn readyz_follows_the_plugin_and_healthz_stays() {
    let port = free_port();
    let extra = format!("metrics = \"127.0.0.1:{port}\"");
    let mut c = Cluster::start(ClusterSpec {
        guests: false,
        extra: &extra,
        ..ClusterSpec::default()
    });
    let ready = wait_ready(port, 200, Duration::from_secs(20));
    for check in ["[+]store", "[+]api", "[+]plugins"] {
        assert!(ready.contains(check), "{ready}");
    }

    c.controller.kill();
    let not_ready = wait_ready(port, 503, Duration::from_secs(20));
    assert!(not_ready.contains("[-]plugins: hostpath"), "{not_ready}");
    assert_eq!(get(port, "/healthz").unwrap().0, 200, "alive while not ready");
    let s = scrape(port);
    assert_eq!(
        by_labels(&s, "berth_plugin_healthy", &["plugin"])["hostpath"],
        0.0
    );

    c.controller.restart();
    wait_ready(port, 200, Duration::from_secs(20));
}

#[test]
fn readyz_follows_the_store_on_etcd() {
    let mut etcd = EtcdCluster::start(1);
    let port = free_port();
    let extra = format!("metrics = \"127.0.0.1:{port}\"");
    let store = format!("{}lease_ttl = \"2s\"\n", etcd.store_config("/berth-ready"));
    let _c = Cluster::start(ClusterSpec {
        guests: false,
        extra: &extra,
        store: Some(store),
        ..ClusterSpec::default()
    });
    let ready = wait_ready(port, 200, Duration::from_secs(30));
    assert!(ready.contains("[+]store: etcd, leading"), "{ready}");

    etcd.kill(0);
    // Not ready at once (the term stops); the store check follows once the lease may be gone.
    let started = std::time::Instant::now();
    let not_ready = loop {
        let (status, body) = get(port, "/readyz").unwrap();
        if status == 503 && body.contains("[-]store: no leader known") {
            break body;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{status}: {body}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(not_ready.contains("not ready"), "{not_ready}");
    assert_eq!(by_labels(&scrape(port), "berth_leader", &[])[""], 0.0);

    etcd.restart(0);
    wait_ready(port, 200, Duration::from_secs(60));
    assert_eq!(by_labels(&scrape(port), "berth_leader", &[])[""], 1.0);
}

#[test]
fn a_refused_metrics_address_stops_the_server_with_the_key() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let dir = berth_tests::test_dir();
    let config = dir.path().join("berth.toml");
    std::fs::write(
        &config,
        format!(
            "state = \"state.redb\"\nmetrics = \"127.0.0.1:{port}\"\n[[plugin]]\nname = \"p\"\ncontroller = \"unix:///nowhere.sock\"\n"
        ),
    )
    .unwrap();
    let out = berth_tests::berth(&["serve", "--config", config.to_str().unwrap()]);
    let (_, err) = berth_tests::texts(&out);
    assert!(!out.status.success());
    assert!(
        err.contains("metrics") && err.contains(&port.to_string()),
        "{err}"
    );

    std::fs::write(&config, "metrics = \"localhost\"\n[[plugin]]\nname = \"p\"\n").unwrap();
    let out = berth_tests::berth(&["serve", "--config", config.to_str().unwrap()]);
    let (_, err) = berth_tests::texts(&out);
    assert!(!out.status.success());
    assert!(err.contains("metrics: \"localhost\" is not an address"), "{err}");
}

#[test]
fn an_agent_serves_its_own_metrics_and_readiness() {
    let mut c = Cluster::start(ClusterSpec {
        guests: false,
        agents: true,
        nodes: vec![("node-a", "a")],
        ..ClusterSpec::default()
    });
    let port = free_port();
    c.agent("node-a").serve_metrics(port);
    let ready = wait_ready(port, 200, Duration::from_secs(30));
    for check in ["[+]record", "[+]server", "[+]plugins"] {
        assert!(ready.contains(check), "{ready}");
    }
    c.create_in("on-agent", "zone=a");
    c.ok(&["volume", "publish", "on-agent", "--node", "node-a", "--wait"]);
    let s = scrape(port);
    let calls = by_labels(
        &s,
        "berth_csi_operations_seconds",
        &["method_name", "grpc_status_code"],
    );
    for method in ["NodeStageVolume", "NodePublishVolume"] {
        assert_eq!(
            calls.get(&format!("/csi.v1.Node/{method} OK")),
            Some(&1.0),
            "the agent times its own node calls: {calls:?}"
        );
    }
    assert_eq!(by_labels(&s, "berth_agent_connected", &["node"])["node-a"], 1.0);

    c.kill_serve();
    let not_ready = wait_ready(port, 503, Duration::from_secs(30));
    assert!(
        not_ready.contains("[-]server: no session with a server"),
        "{not_ready}"
    );
    assert_eq!(
        by_labels(&scrape(port), "berth_agent_connected", &["node"])["node-a"],
        0.0
    );
    c.start_serve();
    wait_ready(port, 200, Duration::from_secs(30));
    assert_eq!(
        by_labels(&scrape(port), "berth_agent_sessions_total", &["node"])["node-a"],
        2.0
    );
}

/// Slow and idle strangers on the metrics endpoint: a few held per address
/// and closed when their headers do not come in time, the rest closed at
/// once; a scraper from elsewhere is answered throughout. Bound beyond
/// loopback, the endpoint says so at start and `/readyz` names its checks
/// without their messages.
#[test]
fn the_metrics_endpoint_holds_few_strangers_and_shows_little_beyond_loopback() {
    use std::io::{Read, Write};
    // Free on every address, not just loopback.
    let port = std::net::TcpListener::bind("0.0.0.0:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let extra = format!("metrics = \"0.0.0.0:{port}\"");
    let c = Cluster::start(ClusterSpec {
        guests: false,
        extra: &extra,
        ..ClusterSpec::default()
    });
    let ready = wait_ready(port, 200, Duration::from_secs(20));
    assert!(ready.contains("[+]store\n"), "{ready}");
    assert!(!ready.contains(&c.store_path().display().to_string()), "{ready}");
    assert!(c.log().contains("beyond loopback"), "{}", c.log());

    // A hundred connections from one address, each sending half a request.
    let opened = std::time::Instant::now();
    let mut slow: Vec<std::net::TcpStream> = (0..100)
        .map(|_| {
            let socket = socket_from("127.0.0.2", port);
            let mut s = socket;
            let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n");
            s
        })
        .collect();
    assert_eq!(
        get(port, "/healthz").unwrap().0,
        200,
        "a scraper from elsewhere is answered"
    );
    let mut closed_at_once = 0;
    for s in &mut slow {
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let mut buf = [0u8; 64];
        let closed = match s.read(&mut buf) {
            Ok(0) => true,
            Err(e) => !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            Ok(_) => false,
        };
        if closed && opened.elapsed() < Duration::from_secs(4) {
            closed_at_once += 1;
        }
    }
    assert!(
        (80..100).contains(&closed_at_once),
        "{closed_at_once} closed at once"
    );
    for s in &mut slow {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = [0u8; 1024];
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                // A timeout answer (408) may come before the close.
                Ok(_) => {}
            }
        }
    }
    assert!(
        opened.elapsed() < Duration::from_secs(15),
        "slow requests held for {:?}",
        opened.elapsed()
    );
}

/// A TCP connection to `127.0.0.1:port` from the loopback address `from`.
fn socket_from(from: &str, port: u16) -> std::net::TcpStream {
    berth_tests::block_on(async {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
        let tcp = socket
            .connect(format!("127.0.0.1:{port}").parse().unwrap())
            .await
            .unwrap();
        let tcp = tcp.into_std().unwrap();
        tcp.set_nonblocking(false).unwrap();
        tcp
    })
}

/// How many durable record writes a volume costs, one at a time (so no
/// batching hides any): a node step is made durable once, by the agent that
/// owns the node's state, the create request names the volume and marks
/// it sent, and the server writes the controller's progress. Printed for the README; bounded so a second write per step
/// cannot come back unnoticed. The decision log is off: its writes are the
/// log's, batched apart from the records (see the README's performance section).
#[test]
fn a_volume_costs_few_durable_writes_and_a_node_step_one() {
    const VOLUMES: usize = 10;
    let port = free_port();
    let extra = format!("metrics = \"127.0.0.1:{port}\"\ndecision_log = 0");
    let c = Cluster::start(ClusterSpec {
        guests: false,
        nodes: vec![("node-a", "a")],
        extra: &extra,
        ..ClusterSpec::default()
    });
    let per_volume = |before: (f64, f64), after: (f64, f64)| {
        (
            (after.0 - before.0) / VOLUMES as f64,
            (after.1 - before.1) / VOLUMES as f64,
        )
    };
    let start = berth_tests::scrape::record_writes(port);
    for i in 0..VOLUMES {
        let name = format!("w{i}");
        c.create_in(&name, "zone=a");
        c.ok(&["volume", "publish", &name, "--node", "node-a", "--wait"]);
    }
    let up = per_volume(start, berth_tests::scrape::record_writes(port));
    let middle = berth_tests::scrape::record_writes(port);
    for i in 0..VOLUMES {
        let name = format!("w{i}");
        c.ok(&["volume", "unpublish", &name, "--node", "node-a", "--wait"]);
        c.ok(&["volume", "delete", &name, "--wait"]);
    }
    let down = per_volume(middle, berth_tests::scrape::record_writes(port));
    eprintln!(
        "durable writes per volume: create+publish {:.1} ({:.1} commits), unpublish+delete {:.1} ({:.1} commits)",
        up.0, up.1, down.0, down.1
    );
    // 5 and 5, and a node registration's one write shared among them (8
    // and 6 when each node step was written by the agent and the server, 7
    // and 5 before the publish request marked its publication sent, 6 and
    // 5 before the create request named its volume and marked it sent).
    assert!(up.0 <= 5.5, "create+publish: {up:?}");
    assert!(down.0 <= 5.5, "unpublish+delete: {down:?}");
}

/// After a restart the server holds each volume as its stored text until
/// something changes it: reads answer as before, and a change decodes it.
#[test]
fn after_a_restart_volumes_are_held_as_stored_until_one_changes() {
    let port = free_port();
    let extra = format!("metrics = \"127.0.0.1:{port}\"");
    let mut c = Cluster::start(ClusterSpec {
        guests: false,
        nodes: vec![("node-a", "a")],
        extra: &extra,
        ..ClusterSpec::default()
    });
    for name in ["s0", "s1", "s2"] {
        c.create_in(name, "zone=a");
    }
    c.ok(&["volume", "publish", "s0", "--node", "node-a", "--wait"]);
    let before = c.ok(&["volume", "list", "-o", "json"]);
    let held = || by_labels(&scrape(port), "berth_volumes_held_as_stored", &[])[""];
    assert_eq!(held(), 0.0, "volumes made by this server are held decoded");

    c.kill_serve();
    c.start_serve();
    wait_ready(port, 200, Duration::from_secs(30));
    assert_eq!(held(), 3.0, "{}", c.log());
    assert_eq!(
        c.ok(&["volume", "list", "-o", "json"]),
        before,
        "read as they were written"
    );
    let got: serde_json::Value = serde_json::from_str(&c.ok(&["volume", "get", "s0", "-o", "json"])).unwrap();
    assert_eq!(got["state"], "published", "{got}");
    assert_eq!(held(), 3.0, "reads decode without keeping");

    c.ok(&["volume", "publish", "s1", "--node", "node-a", "--wait"]);
    c.ok(&["volume", "delete", "s2", "--wait"]);
    assert_eq!(
        held(),
        1.0,
        "a change holds its volume decoded; a delete drops it"
    );
    let after: serde_json::Value = serde_json::from_str(&c.ok(&["volume", "list", "-o", "json"])).unwrap();
    let states: Vec<(&str, &str)> = after
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["name"].as_str().unwrap(), v["state"].as_str().unwrap()))
        .collect();
    assert_eq!(states, [("s0", "published"), ("s1", "published")]);
}
