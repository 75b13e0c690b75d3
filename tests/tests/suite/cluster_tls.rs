//! The cluster's TLS endpoint on loopback: agents join with a token that
//! pins the cluster CA, get their own certificate, and are refused with a
//! clear error on both sides when the token or the certificate is wrong.

use berth_tests::{AgentProcess, Cluster, ClusterSpec};

fn tls_cluster() -> Cluster {
    Cluster::start(ClusterSpec {
        nodes: vec![("node-a", "a"), ("node-b", "a")],
        agents: true,
        tls: true,
        ..ClusterSpec::default()
    })
}

/// The TLS endpoint's address, from the server's config.
fn server(c: &Cluster) -> String {
    let config = std::fs::read_to_string(&c.config).unwrap();
    let line = config.lines().find(|l| l.starts_with("cluster_address")).unwrap();
    format!("https://{}", line.split('"').nth(1).unwrap())
}

/// An agent for node `name` with `token`, its own directory, started.
fn started_agent(c: &Cluster, name: &str, dir_name: &str, token: &str) -> AgentProcess {
    let plugin = &c.nodes[0].1.endpoint();
    let node_dir = c.volumes_dir.join("nodes").join(dir_name);
    let mut a = AgentProcess::new(
        c.dir.path(),
        dir_name,
        "a",
        &server(c),
        &node_dir,
        plugin,
        Some(token),
    );
    // The config names the directory; the node is `name`.
    let config = std::fs::read_to_string(&a.config).unwrap();
    std::fs::write(
        a.config.clone(),
        config.replace(&format!("node = \"{dir_name}\""), &format!("node = \"{name}\"")),
    )
    .unwrap();
    a.start();
    a
}

/// Starts an agent for node `name` with `token`, and waits for it to exit.
fn refused_agent(c: &Cluster, name: &str, token: &str) -> String {
    refused_agent_in(c, name, name, token)
}

fn refused_agent_in(c: &Cluster, name: &str, dir_name: &str, token: &str) -> String {
    let mut a = started_agent(c, name, dir_name, token);
    let status = a.wait_exit();
    assert!(!status.success(), "{}", a.log_text());
    let node_dir = c.volumes_dir.join("nodes").join(dir_name);
    assert!(
        !node_dir.join("tls/agent.pem").exists(),
        "no certificate for a refused agent"
    );
    a.log_text()
}

fn token(c: &Cluster, args: &[&str]) -> String {
    let mut all = vec!["cluster", "token", "--ttl", "10m"];
    all.extend_from_slice(args);
    c.ok(&all).trim().to_string()
}

#[test]
fn agents_join_with_a_token_and_work_over_tls() {
    let c = tls_cluster();
    c.create_in("v", "zone=a");
    c.ok(&["volume", "publish", "v", "--node", "node-b", "--wait"]);
    let v: serde_json::Value = serde_json::from_str(&c.ok(&["volume", "get", "v", "-o", "json"])).unwrap();
    assert_eq!(v["state"], "published");
    use std::os::unix::fs::PermissionsExt;
    for node in ["node-a", "node-b"] {
        let tls = c.volumes_dir.join("nodes").join(node).join("tls");
        for f in ["agent.key", "agent.pem", "ca.pem"] {
            let mode = std::fs::metadata(tls.join(f)).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{node}/{f}");
        }
    }
    let ca_key = c.dir.path().join("state/cluster/ca.key");
    assert_eq!(
        std::fs::metadata(ca_key).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(c.log().contains("agent joined"), "{}", c.log());
}

#[test]
fn a_wrong_token_is_refused_on_both_sides() {
    let c = tls_cluster();
    let good = token(&c, &["--node", "node-x"]);
    // The right CA and id, a secret that is not the token's.
    let mut forged = good.clone();
    let last = forged.pop().unwrap();
    forged.push(if last == '0' { '1' } else { '0' });
    let log = refused_agent(&c, "node-x", &forged);
    assert!(log.contains("join token is not valid"), "{log}");
    assert!(c.log().contains("join refused"), "{}", c.log());
    assert!(c.log().contains("peer"), "refusals name the peer: {}", c.log());

    // Not a token at all: the agent says so itself, and never dials.
    let log = refused_agent(&c, "node-z", "not-a-token");
    assert!(
        log.contains("malformed") && log.contains("not a Berth join token"),
        "{log}"
    );
    assert!(!log.contains("refused this agent"), "{log}");
    // A token of the earlier, unstored kind is refused with what to do.
    let parts: Vec<&str> = good.split('.').collect();
    let old = format!("berth1.{}.4102444800.{}", parts[1], "ab".repeat(32));
    let log = refused_agent(&c, "node-z", &old);
    assert!(log.contains("earlier release"), "{log}");
}

#[test]
fn a_server_that_is_not_the_tokens_cluster_is_retried_never_trusted() {
    let c = tls_cluster();
    let good = token(&c, &["--node", "node-y"]);
    // A token naming another cluster's CA: the agent refuses the server
    // before sending anything, and keeps trying rather than giving up (the
    // endpoint may be a server mid-restart, or one bad endpoint of several).
    let parts: Vec<&str> = good.split('.').collect();
    let other = format!("{}.{}.{}.{}", parts[0], "ab".repeat(32), parts[2], parts[3]);
    let mut a = started_agent(&c, "node-y", "node-y", &other);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while a
        .log_text()
        .matches("not from the cluster CA the join token names")
        .count()
        < 2
    {
        assert!(std::time::Instant::now() < deadline, "{}", a.log_text());
        assert!(a.exited().is_none(), "the agent gave up: {}", a.log_text());
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(a.exited().is_none(), "{}", a.log_text());
    a.kill();
    assert!(
        !c.log()
            .lines()
            .any(|l| l.contains("node-y") && (l.contains("joined") || l.contains("refused"))),
        "no join reached the server: {}",
        c.log()
    );
    // The token was not spent.
    let listed = c.ok(&["cluster", "token", "list"]);
    assert!(listed.contains("node-y"), "{listed}");
}

#[test]
fn a_token_joins_its_one_node_once() {
    let c = tls_cluster();
    let t = token(&c, &["--node", "node-c"]);
    let log = refused_agent(&c, "node-d", &t);
    assert!(log.contains("is for node \"node-c\""), "{log}");
    let mut joined = started_agent(&c, "node-c", "node-c", &t);
    c.wait_nodes(&["node-c"], "ready", std::time::Duration::from_secs(20));
    assert!(c.log().contains("agent joined"), "{}", c.log());
    let log = refused_agent_in(&c, "node-c", "node-c2", &t);
    assert!(log.contains("join token is used up"), "{log}");
    assert_eq!(c.node_state("node-c").as_deref(), Some("ready"));
    joined.kill();
}

#[test]
fn a_join_cannot_take_over_a_node_without_a_replacing_token() {
    let mut c = tls_cluster();
    c.create_in("v", "zone=a");
    // A token for a node that is connected now: refused, the real agent untouched.
    let t = token(&c, &["--node", "node-a"]);
    let log = refused_agent_in(&c, "node-a", "intruder", &t);
    assert!(log.contains("has joined already"), "{log}");
    assert!(c.agent("node-a").exited().is_none());
    c.ok(&["volume", "publish", "v", "--node", "node-a", "--wait"]);
    c.ok(&["volume", "unpublish", "v", "--node", "node-a", "--wait"]);

    // The operator's explicit replacement: the old agent is told and stops.
    let t = token(&c, &["--node", "node-a", "--replace"]);
    let mut replacement = started_agent(&c, "node-a", "node-a-new", &t);
    c.agent("node-a").wait_exit();
    let old = c.agents[0].log_text();
    assert!(old.contains("replacing token"), "{old}");
    c.wait_nodes(&["node-a"], "ready", std::time::Duration::from_secs(20));
    c.ok(&["volume", "publish", "v", "--node", "node-a", "--wait"]);
    replacement.kill();
}

#[test]
fn tokens_are_listed_revoked_bounded_and_outlive_a_restart() {
    let mut c = tls_cluster();
    let many = token(&c, &["--uses", "2"]);
    let json: serde_json::Value =
        serde_json::from_str(&c.ok(&["cluster", "token", "list", "-o", "json"])).unwrap();
    let listed = json.as_array().unwrap();
    assert_eq!(listed.len(), 1, "{json}");
    assert_eq!(listed[0]["uses_left"], 2);
    assert!(listed[0]["node"].is_null());
    let id = listed[0]["id"].as_str().unwrap().to_string();
    assert!(many.contains(&id));
    // The secret is never shown again nor stored.
    let secret = many.rsplit('.').next().unwrap();
    assert!(!json.to_string().contains(secret));
    let store = std::fs::read(c.store_path()).unwrap();
    assert!(!store.windows(secret.len()).any(|w| w == secret.as_bytes()));

    // Kept across a restart: one use left after the first join.
    c.kill_serve();
    c.start_serve();
    let mut e = started_agent(&c, "node-e", "node-e", &many);
    c.wait_nodes(&["node-e"], "ready", std::time::Duration::from_secs(20));
    let listed = c.ok(&["cluster", "token", "list"]);
    assert!(
        listed.contains(&id) && listed.contains("(any new node)"),
        "{listed}"
    );
    c.ok(&["cluster", "token", "revoke", &id]);
    let log = refused_agent(&c, "node-f", &many);
    assert!(log.contains("join token was revoked"), "{log}");
    let again = c.berth(&["cluster", "token", "revoke", &id]);
    assert!(!again.status.success());

    // Past the server's maximum lifetime, and without saying for whom: refused.
    let long = c.berth(&["cluster", "token", "--node", "n", "--ttl", "48h"]);
    assert!(
        String::from_utf8_lossy(&long.stderr).contains("at most 1day"),
        "{long:?}"
    );
    let anyone = c.berth(&["cluster", "token"]);
    assert!(
        String::from_utf8_lossy(&anyone.stderr).contains("--uses"),
        "{anyone:?}"
    );
    e.kill();
}

#[test]
fn a_removed_nodes_certificate_is_refused() {
    let mut c = tls_cluster();
    let removed = c.ok(&["node", "remove", "node-b"]);
    assert!(removed.contains("node-b"), "{removed}");
    // The live agent is told, and stops.
    c.agent("node-b").wait_exit();
    assert!(
        c.agents[1].log_text().contains("removed"),
        "{}",
        c.agents[1].log_text()
    );
    // Started again with its old certificate: refused.
    c.agent("node-b").start();
    c.agent("node-b").wait_exit();
    let log = c.agents[1].log_text();
    assert!(log.contains("unknown or revoked"), "{log}");
    assert!(
        c.log().contains("its certificate is unknown or revoked"),
        "{}",
        c.log()
    );
    assert_eq!(c.node_state("node-b"), None, "the node is gone");
    assert_eq!(c.node_state("node-a").as_deref(), Some("ready"));
}

/// Resident memory of process `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb * 1024
}

/// An agent made by hand with a real certificate: joins with `token` as
/// `node` (its files in `dir`), registers with `plugins`; the queue of what
/// it sends (`queue` deep) and the server's stream.
async fn hand_made_agent(
    (host, port): (&str, u16),
    token: &str,
    node: &str,
    dir: &std::path::Path,
    plugins: Vec<berth_proto::berth::v1::NodePluginReport>,
    queue: usize,
) -> (
    tokio::sync::mpsc::Sender<berth_proto::berth::v1::AgentMessage>,
    tonic::Streaming<berth_proto::berth::v1::ServerMessage>,
) {
    use berth_proto::berth::v1 as wire;
    let creds = berth::agent::tls::join(host, port, token, node, dir)
        .await
        .unwrap();
    let channel = berth::agent::tls::session_channel(host, port, &creds).unwrap();
    let (up, up_rx) = tokio::sync::mpsc::channel(queue);
    up.send(wire::AgentMessage {
        message: Some(wire::agent_message::Message::Register(wire::Register {
            node: node.into(),
            plugins,
            staging_dir: dir.join("staging").display().to_string(),
            publish_dir: dir.join("publish").display().to_string(),
            ..Default::default()
        })),
    })
    .await
    .unwrap();
    let down = wire::cluster_client::ClusterClient::new(channel)
        .attach(tokio_stream::wrappers::ReceiverStream::new(up_rx))
        .await
        .unwrap()
        .into_inner();
    (up, down)
}

/// Strangers hold thousands of idle connections to the TLS endpoint and an
/// agent with a valid certificate floods heartbeats without reading its
/// session: the API and the other agents go on, idle peers are dropped
/// when their handshake time runs out, the flooding session is closed, and
/// the server's memory stays bounded.
#[test]
fn idle_strangers_and_a_flooding_agent_cannot_knock_the_endpoint_over() {
    use berth_proto::berth::v1 as wire;
    use wire::agent_message::Message as Up;
    const IDLE: usize = 5000;
    // The test holds every idle connection itself.
    berth::metrics::listener::raise_descriptor_limit();
    let c = tls_cluster();
    let address = server(&c).trim_start_matches("https://").to_string();
    let (host, port) = address.rsplit_once(':').unwrap();
    let port: u16 = port.parse().unwrap();
    let pid = c.serve_pid().unwrap();
    let token = token(&c, &["--node", "flooder"]);
    let dir = c.dir.path().join("flooder");
    // Idle TCP connections from another loopback address, saying nothing.
    let target: std::net::SocketAddr = address.parse().unwrap();
    let idle = berth_tests::block_on(async {
        let mut idle = Vec::new();
        for _ in 0..IDLE {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
            idle.push(socket.connect(target).await.unwrap());
        }
        idle
    });
    let opened = std::time::Instant::now();

    // Work goes on: the API, and agents on their sessions.
    let started = std::time::Instant::now();
    c.create_in("v", "zone=a");
    let created = started.elapsed();
    c.ok(&["volume", "publish", "v", "--node", "node-b", "--wait"]);

    // An authenticated agent that sends heartbeats as fast as it can and
    // never reads what comes back.
    let before = rss(pid);
    let sent = berth_tests::block_on(async {
        let (up, _unread) = hand_made_agent((host, port), &token, "flooder", &dir, vec![], 1024).await;
        let flood_until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut sent = 0u64;
        while std::time::Instant::now() < flood_until {
            let beat = wire::AgentMessage {
                message: Some(Up::Heartbeat(wire::Heartbeat { sent_unix_ms: sent })),
            };
            match tokio::time::timeout(std::time::Duration::from_secs(1), up.send(beat)).await {
                Ok(Ok(())) => sent += 1,
                // The server stopped reading the session, or closed it.
                Ok(Err(_)) | Err(_) => break,
            }
        }
        sent
    });
    let grown = rss(pid).saturating_sub(before);
    assert!(
        c.log().contains("agent is not reading its session"),
        "{sent} heartbeats sent: {}",
        c.log()
    );
    assert!(grown < 100 << 20, "the server grew by {grown} bytes");
    // Figures for the README (timing is reported, not asserted).
    eprintln!(
        "strangers: {IDLE} idle connections, `volume create --wait` took {created:?}; {sent} heartbeats flooded, the server grew {:.1} MiB",
        grown as f64 / f64::from(1 << 20)
    );
    assert_eq!(c.node_state("node-a").as_deref(), Some("ready"));

    // Idle peers are dropped once their handshake time is up.
    berth_tests::block_on(async {
        for mut tcp in idle {
            use tokio::io::AsyncReadExt;
            let left = std::time::Duration::from_secs(20).saturating_sub(opened.elapsed());
            let mut byte = [0u8; 1];
            let read = tokio::time::timeout(left, tcp.read(&mut byte)).await;
            assert!(
                matches!(read, Ok(Ok(0)) | Ok(Err(_))),
                "an idle stranger's connection is still open after {:?}",
                opened.elapsed()
            );
        }
    });
}

/// An agent with a valid certificate is held to what a node may claim: a
/// registration with more plugins than a node runs is refused, and a CSI
/// node id another node already has leaves the claimant's plugin unhealthy
/// while the owner's stays healthy.
#[test]
fn an_agent_is_held_to_what_a_node_may_claim() {
    use berth_proto::berth::v1 as wire;
    use wire::server_message::Message as Down;
    let c = tls_cluster();
    let address = server(&c).trim_start_matches("https://").to_string();
    let (host, port) = address.rsplit_once(':').unwrap();
    let port: u16 = port.parse().unwrap();
    let token = token(&c, &["--uses", "2"]);
    let plugin = |name: &str, node_id: &str| wire::NodePluginReport {
        plugin: name.into(),
        health: "healthy".into(),
        reason: String::new(),
        fingerprint: Some(wire::NodeFingerprint {
            driver: "hostpath.csi.berth.dev".into(),
            node_id: node_id.into(),
            ..Default::default()
        }),
    };
    // Joins as `node`, registers with `plugins`; the session and the first
    // message the server sends.
    let register = |node: &str, plugins: Vec<wire::NodePluginReport>| {
        let dir = c.dir.path().join(node);
        berth_tests::block_on(async {
            let (up, mut down) = hand_made_agent((host, port), &token, node, &dir, plugins, 16).await;
            let first = down.message().await.unwrap().and_then(|m| m.message);
            (up, down, first)
        })
    };

    let many = (0..100)
        .map(|i| plugin(&format!("p{i}"), &format!("many-{i}")))
        .collect();
    let (_up, _down, first) = register("rogue-many", many);
    match first {
        Some(Down::Refusal(r)) => assert!(
            r.reason.contains("claims too much") && r.reason.contains("100 of them"),
            "{}",
            r.reason
        ),
        other => panic!("a node with 100 plugins was not refused: {other:?}"),
    }

    let (_up, _down, first) = register("rogue-id", vec![plugin("hostpath", "node-a")]);
    assert!(matches!(first, Some(Down::Desired(_))), "{first:?}");
    let plugins_of = |node: &str| {
        c.node_list()
            .into_iter()
            .find(|n| n.name == node)
            .map(|n| n.plugins)
            .unwrap_or_default()
    };
    let rogue = plugins_of("rogue-id");
    assert_eq!(rogue.len(), 1, "{rogue:?}");
    assert_eq!(rogue[0].health, "unhealthy", "{rogue:?}");
    assert!(rogue[0].reason.contains("\"node-a\"'s"), "{rogue:?}");
    assert!(
        plugins_of("node-a").iter().all(|p| p.health == "healthy"),
        "{:?}",
        plugins_of("node-a")
    );
    assert!(
        c.log().contains("claims another node's CSI node id"),
        "{}",
        c.log()
    );
}
