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

/// Starts an agent for a new node with `token`, and waits for it to exit.
fn refused_agent(c: &Cluster, name: &str, token: &str) -> String {
    let plugin = &c.nodes[0].1.endpoint();
    let node_dir = c.volumes_dir.join("nodes").join(name);
    let mut a = AgentProcess::new(
        c.dir.path(),
        name,
        "a",
        &server(c),
        &node_dir,
        plugin,
        Some(token),
    );
    a.start();
    let status = a.wait_exit();
    assert!(!status.success(), "{}", a.log_text());
    assert!(
        !node_dir.join("tls/agent.pem").exists(),
        "no certificate for a refused agent"
    );
    a.log_text()
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
    let good = c.join_token();
    // The right CA, a MAC that is not the server's.
    let mut forged = good.clone();
    let last = forged.pop().unwrap();
    forged.push(if last == '0' { '1' } else { '0' });
    let log = refused_agent(&c, "node-x", &forged);
    assert!(log.contains("join token is not valid"), "{log}");
    assert!(c.log().contains("join refused"), "{}", c.log());

    // A token naming another cluster's CA: the agent refuses the server first.
    let parts: Vec<&str> = good.split('.').collect();
    let other = format!("{}.{}.{}.{}", parts[0], "ab".repeat(32), parts[2], parts[3]);
    let log = refused_agent(&c, "node-y", &other);
    assert!(
        log.contains("not from the cluster CA the join token names"),
        "{log}"
    );

    let log = refused_agent(&c, "node-z", "not-a-token");
    assert!(log.contains("not a Berth join token"), "{log}");
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
