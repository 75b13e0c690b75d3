//! Tokens, client certificates and quotas through three servers on etcd.

use super::certificates::{TestCa, as_holder};
use super::*;

/// The TLS API's port of server `i`, from its log (each binds port 0).
fn api_port(c: &Cluster, i: usize) -> u16 {
    let mut port = None;
    wait_for(
        "the TLS API",
        Duration::from_secs(30),
        || {
            let log = std::fs::read_to_string(&c.serves[i].log).unwrap_or_default();
            port = log
                .split("api_address=127.0.0.1:")
                .nth(1)
                .and_then(|rest| rest.split(|ch: char| !ch.is_ascii_digit()).next())
                .and_then(|p| p.parse().ok());
            port.is_some()
        },
        || c.log(),
    );
    port.unwrap()
}

/// Three servers on etcd, each with its TLS API: a token works through
/// every one of them (followers pass the call and the token on to the
/// leader); revoked through one server, it is refused by all three at the
/// next call; tokens outlive the leader's death. A client certificate's
/// subject is passed on with the call as a token is.
#[test]
fn a_token_holds_on_every_server_and_its_revocation_at_once() {
    let etcd = EtcdCluster::start(3);
    let pki = tempfile::tempdir().unwrap();
    let carol = TestCa::new(pki.path(), "clients-ca").issue(pki.path(), "carol", "carol");
    let extra = format!(
        "api_address = \"127.0.0.1:0\"\napi_client_ca = \"{}\"\n",
        pki.path().join("clients-ca.pem").display()
    );
    let mut c = Cluster::start(ClusterSpec {
        guests: false,
        agents: true,
        tls: true,
        servers: 3,
        extra: &extra,
        store: Some(format!(
            "{}lease_ttl = \"2s\"\n",
            etcd.store_config("/berth-teams")
        )),
        ..ClusterSpec::default()
    });
    let leader = c.wait_leader(&[0, 1, 2], Duration::from_secs(30));
    let follower = (leader + 1) % 3;
    let ports: Vec<u16> = (0..3).map(|i| api_port(&c, i)).collect();
    c.ok_via(follower, &["acl", "bootstrap"]);
    let rules = c.dir.path().join("team-a.toml");
    std::fs::write(
        &rules,
        "[namespace.team-a]\ncapabilities = [\"list\", \"read\", \"write\"]\n",
    )
    .unwrap();
    c.ok_via(
        follower,
        &["acl", "policy", "apply", "team-a", rules.to_str().unwrap()],
    );
    let made = |name: &str| {
        let args = [
            "acl",
            "token",
            "create",
            "--name",
            name,
            "--policy",
            "team-a",
            "--secret-only",
        ];
        c.ok_via(follower, &args).trim().to_string()
    };
    let (alice, ci) = (made("alice"), made("ci"));
    c.ok_via(
        follower,
        &["acl", "certificate", "bind", "carol", "--policy", "team-a"],
    );
    for (i, port) in ports.iter().enumerate() {
        let out = as_holder(&c, *port, &carol, &["volume", "-n", "team-a", "list"]);
        assert!(out.status.success(), "server {i}: {}", texts(&out).1);
        let out = as_holder(&c, *port, &carol, &["volume", "-n", "team-b", "list"]);
        assert!(
            texts(&out).1.contains("certificate subject \"carol\""),
            "server {i}: {}",
            texts(&out).1
        );
        let name = format!("via-{i}");
        remote_ok(
            &c,
            *port,
            &alice,
            &[
                "volume",
                "-n",
                "team-a",
                "create",
                &name,
                "--plugin",
                "hostpath",
                "--requisite",
                "zone=a",
            ],
        );
        let e = refused(&c, *port, &alice, &["volume", "-n", "team-b", "list"]);
        assert!(e.contains("PERMISSION_DENIED"), "server {i}: {e}");
    }
    let me: Value = serde_json::from_str(&remote_ok(
        &c,
        ports[follower],
        &alice,
        &["acl", "token", "self", "-o", "json"],
    ))
    .unwrap();
    c.ok_via(
        (leader + 2) % 3,
        &["acl", "token", "revoke", me["accessor"].as_str().unwrap()],
    );
    for (i, port) in ports.iter().enumerate() {
        let e = refused(&c, *port, &alice, &["volume", "-n", "team-a", "list"]);
        assert!(
            e.contains("UNAUTHENTICATED"),
            "server {i} still took a revoked token: {e}"
        );
    }

    // An agent's certificate (of the cluster CA, which issued the API's
    // own) presented to the TLS API grants nothing: not of api_client_ca,
    // its connection is closed before any call is answered.
    let tls = c.volumes_dir.join("nodes/node-a/tls");
    let agent = (
        std::fs::read_to_string(tls.join("agent.pem")).unwrap(),
        std::fs::read_to_string(tls.join("agent.key")).unwrap(),
    );
    let refused_agent = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let ca = c.dir.path().join("state/api-ca.pem");
        let mut client = berth_tests::api_load::remote_as(ports[leader], &ca, "none", Some(agent)).await;
        client
            .list_nodes(berth_proto::berth::v1::ListNodesRequest {})
            .await
            .unwrap_err()
    });
    assert!(
        matches!(
            refused_agent.code(),
            tonic::Code::Unknown | tonic::Code::Cancelled | tonic::Code::Unavailable
        ),
        "{refused_agent:?}"
    );

    // Eight callers through three servers race for a quota's last slots:
    // exactly as many volumes as it allows are made.
    c.ok_via(follower, &["namespace", "quota", "race", "--volumes", "3"]);
    let outcomes: Vec<Output> = std::thread::scope(|scope| {
        let runs: Vec<_> = (0..8)
            .map(|k| {
                let c = &c;
                scope.spawn(move || {
                    let name = format!("racer-{k}");
                    let args = [
                        "volume",
                        "-n",
                        "race",
                        "create",
                        &name,
                        "--plugin",
                        "hostpath",
                        "--requisite",
                        "zone=a",
                    ];
                    c.berth_via(k % 3, &args)
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    let made = outcomes.iter().filter(|o| o.status.success()).count();
    assert_eq!(
        made,
        3,
        "{:?}",
        outcomes.iter().map(|o| texts(o).1).collect::<Vec<_>>()
    );
    assert!(
        outcomes
            .iter()
            .filter(|o| !o.status.success())
            .all(|o| texts(o).1.contains("RESOURCE_EXHAUSTED"))
    );
    let status: Value =
        serde_json::from_str(&c.ok_via(leader, &["namespace", "-n", "race", "status", "-o", "json"]))
            .unwrap();
    assert_eq!(status[0]["volumes"], 3);

    // The leader gone, the next one knows the tokens.
    c.kill_server(leader);
    let next = c.wait_leader(&[follower, (leader + 2) % 3], Duration::from_secs(30));
    let listed = remote_ok(&c, ports[next], &ci, &["volume", "-n", "team-a", "list"]);
    assert!(
        listed.contains("team-a/via-0") || listed.contains("via-0"),
        "{listed}"
    );
    assert!(
        refused(&c, ports[next], &alice, &["volume", "-n", "team-a", "list"]).contains("UNAUTHENTICATED")
    );
}
