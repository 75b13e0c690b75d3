//! Several `berth serve` on one real three-member etcd: one leads, the
//! others pass the API on; the leader killed, frozen past its lease, and an
//! etcd member lost mid-storm; a deposed leader's write refused by etcd.
//!
//! Short by default; `BERTH_RELIABILITY=long` kills the leader ten times
//! during 2,000 operations.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use berth::leadership::{Election, Role, ServerInfo};
use berth::store::{DEPOSED, EtcdSettings, EtcdStore, Store};
use berth_tests::storm::{Rng, check_agreement, expected, scripts_on, storm, tail, wait_converged};
use berth_tests::{Cluster, ClusterSpec, EtcdCluster, wait_for};

const NODES: [(&str, &str); 2] = [("node-a", "a"), ("node-b", "b")];
const LEASE_TTL: Duration = Duration::from_secs(2);

fn long() -> bool {
    std::env::var("BERTH_RELIABILITY").is_ok_and(|v| v == "long")
}

fn three_servers(etcd: &EtcdCluster) -> Cluster {
    Cluster::start(ClusterSpec {
        guests: false,
        workers: 64,
        nodes: NODES.to_vec(),
        agents: true,
        tls: true,
        servers: 3,
        store: Some(format!(
            "{}lease_ttl = \"{}s\"\n",
            etcd.store_config("/berth-ha"),
            LEASE_TTL.as_secs()
        )),
        ..ClusterSpec::default()
    })
}

#[test]
fn followers_pass_the_api_on_and_status_shows_every_server() {
    let etcd = EtcdCluster::start(3);
    let c = three_servers(&etcd);
    let l = c.wait_leader(&[0, 1, 2], Duration::from_secs(30));
    let follower = (l + 1) % 3;
    // The CLI on a follower's socket: the leader answers.
    let run = |args: &[&str]| c.ok_via(follower, args);
    run(&[
        "volume",
        "create",
        "via-follower",
        "--plugin",
        "hostpath",
        "--requisite",
        "zone=a",
        "--wait",
    ]);
    run(&["volume", "publish", "via-follower", "--node", "node-a", "--wait"]);
    let status: serde_json::Value = serde_json::from_str(&run(&["status", "-o", "json"])).unwrap();
    let servers = status["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 3, "{status:#}");
    let leaders: Vec<&str> = servers
        .iter()
        .filter(|s| s["leader"] == true)
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(leaders, [format!("server-{l}")], "exactly one leader: {status:#}");
    let text = run(&["status"]);
    assert!(text.contains(&format!("server    server-{l} (leader")), "{text}");

    // Several sockets on the CLI: a missing one is passed over.
    let both = format!(
        "{}/gone.sock,{}",
        c.dir.path().display(),
        c.serves[follower].api.display()
    );
    let out = std::process::Command::new(berth_tests::bin("berth"))
        .args(["volume", "get", "via-follower", "-o", "json"])
        .env("BERTH_API", &both)
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}", berth_tests::texts(&out));
    assert_eq!(c.plugin_volumes(), 1);
}

/// Kills the leader `kills` times during a storm of creates, publishes and
/// deletes sent to any server, with an etcd member down and back in the
/// middle; then everything acknowledged is there exactly once.
#[test]
fn leader_killed_during_a_storm_loses_and_duplicates_nothing() {
    let (ops, kills) = if long() { (2000, 10) } else { (1000, 3) };
    let mut rng = Rng::seeded();
    let scripts = scripts_on(&mut rng, ops, &NODES);
    let expected = expected(&scripts);
    let mut etcd = EtcdCluster::start(3);
    let mut c = three_servers(&etcd);
    let done = Arc::new(AtomicBool::new(false));
    let driver = {
        let done = done.clone();
        // Each failover takes about the lease's TTL: spread the work over them.
        let handle = storm(c.apis(), scripts, 32, (LEASE_TTL * 2) * kills as u32);
        std::thread::spawn(move || {
            let r = handle.join();
            done.store(true, Ordering::SeqCst);
            r
        })
    };
    let mut killed = 0;
    let mut etcd_down = false;
    while killed < kills && !done.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(200 + rng.below(600)));
        let l = c.wait_leader(&[0, 1, 2], Duration::from_secs(30));
        c.kill_server(l);
        killed += 1;
        if killed == 1 {
            // An etcd member lost while a new leader is chosen.
            etcd.kill(rng.below(3) as usize);
            etcd_down = true;
        }
        let others: Vec<usize> = (0..3).filter(|&i| i != l).collect();
        let next = c.wait_leader(&others, Duration::from_secs(30));
        assert_ne!(next, l, "a follower took over");
        c.start_server(l);
        if etcd_down && killed == 2 {
            for i in 0..3 {
                if !etcd.healthy(i) {
                    etcd.restart(i);
                }
            }
            etcd_down = false;
        }
    }
    driver.join().unwrap().expect("every operation got its answer");
    eprintln!("killed the leader {killed} times during {ops} operations");
    assert_eq!(killed, kills, "the storm ended too soon; make it longer");
    etcd.wait_healthy(Duration::from_secs(30));
    c.wait_nodes(&["node-a", "node-b"], "ready", Duration::from_secs(60));
    wait_converged(&c, Duration::from_secs(120));
    check_agreement(&c, &expected);
    // The new leaders started from their warm copies (changes watched while
    // they followed), not from a read of the whole prefix, and lost nothing.
    let warm = (0..3)
        .map(|i| std::fs::read_to_string(&c.serves[i].log).unwrap_or_default())
        .map(|log| log.matches("starting a term from the warm copy").count())
        .sum::<usize>();
    assert!(warm >= kills, "{warm} of {kills} takeovers from a warm copy");
}

/// One connection to a follower, calls in flight on it throughout, while
/// the leader is killed and that follower takes over: every call is
/// answered, and the connection is never closed under them.
#[test]
fn a_connection_held_through_a_failover_answers_every_call() {
    use berth_proto::berth::v1::{self as api, berth_client::BerthClient};
    use std::sync::atomic::AtomicUsize;
    let etcd = EtcdCluster::start(3);
    let mut c = three_servers(&etcd);
    let l = c.wait_leader(&[0, 1, 2], Duration::from_secs(30));
    let (f, other) = ((l + 1) % 3, (l + 2) % 3);
    let socket = c.serves[f].api.clone();
    let connects = Arc::new(AtomicUsize::new(0));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let channel = {
        let connects = connects.clone();
        let _entered = rt.enter();
        tonic::transport::Endpoint::from_static("http://unix.socket").connect_with_connector_lazy(
            tower::service_fn(move |_: tonic::transport::Uri| {
                connects.fetch_add(1, Ordering::SeqCst);
                let socket = socket.clone();
                async move {
                    tokio::net::UnixStream::connect(socket)
                        .await
                        .map(hyper_util::rt::TokioIo::new)
                }
            }),
        )
    };
    let stop = Arc::new(AtomicBool::new(false));
    let callers: Vec<_> = (0..4)
        .map(|t| {
            let (mut client, stop) = (BerthClient::new(channel.clone()), stop.clone());
            rt.spawn(async move {
                let mut answered = Vec::new();
                for n in 0.. {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let spec = api::VolumeSpec {
                        name: format!("held-{t}-{n}"),
                        plugin: "hostpath".into(),
                        required_bytes: 1 << 20,
                        ..Default::default()
                    };
                    let answer = client
                        .create_volume(api::CreateVolumeRequest { spec: Some(spec) })
                        .await;
                    answered.push((Instant::now(), answer.map(|_| ())));
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                answered
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    // With the third server gone too, the follower holding the connection is the one to take over.
    c.kill_server(l);
    c.kill_server(other);
    c.wait_leader(&[f], Duration::from_secs(30));
    let led = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::SeqCst);
    let answered: Vec<_> = callers
        .into_iter()
        .flat_map(|h| rt.block_on(h).unwrap())
        .collect();
    let failed: Vec<_> = answered.iter().filter_map(|(_, a)| a.as_ref().err()).collect();
    assert!(
        failed.is_empty(),
        "{} of {} calls failed: {failed:?}",
        failed.len(),
        answered.len()
    );
    assert!(
        answered.iter().any(|(at, _)| *at > led),
        "calls were answered after the takeover"
    );
    assert_eq!(
        connects.load(Ordering::SeqCst),
        1,
        "the connection was never closed"
    );
}

/// A leader frozen past its lease: another leads meanwhile; thawed, the
/// old one steps down before acting, and the state stays whole.
#[test]
fn a_leader_frozen_past_its_lease_steps_down_when_thawed() {
    let etcd = EtcdCluster::start(3);
    let mut c = three_servers(&etcd);
    let l = c.wait_leader(&[0, 1, 2], Duration::from_secs(30));
    let others: Vec<usize> = (0..3).filter(|&i| i != l).collect();
    // Work in flight on the leader as it freezes.
    let scripts = scripts_on(&mut Rng::seeded(), 150, &NODES);
    let expected = expected(&scripts);
    let driver = storm(
        vec![c.serves[others[0]].api.clone()],
        scripts,
        16,
        Duration::from_secs(4),
    );
    wait_for(
        "work in flight on the leader",
        Duration::from_secs(20),
        || c.summary().is_some_and(|s| s.volumes >= 5),
        || tail(&c.log()),
    );
    c.freeze_server(l, true);
    let next = c.wait_leader(&others, Duration::from_secs(30));
    assert_ne!(next, l);
    std::thread::sleep(LEASE_TTL);
    c.freeze_server(l, false);
    driver.join().expect("every operation got its answer");
    let log = || std::fs::read_to_string(&c.serves[l].log).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !log().contains(&format!("server=server-{l} leader=server-{next}")) {
        assert!(
            Instant::now() < deadline,
            "the thawed leader never followed:\n{}",
            tail(&log())
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        log().contains("stepping down") || log().contains("stepped down"),
        "{}",
        tail(&log())
    );
    assert_eq!(
        c.leader(&[l]),
        Some(next),
        "asked through the old leader, the new one answers"
    );
    c.wait_nodes(&["node-a", "node-b"], "ready", Duration::from_secs(60));
    wait_converged(&c, Duration::from_secs(120));
    check_agreement(&c, &expected);
    c.kill_server(l);
}

/// The fence itself: a store opened by a leader refuses to write once
/// another server has won, whatever the first one believes.
#[test]
fn a_deposed_leaders_write_is_refused_by_etcd() {
    let etcd = EtcdCluster::start(3);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let settings = |name: &str| {
            EtcdSettings::new(etcd.endpoints(), Some("/berth-fence".into()))
                .and_then(|s| s.server(Some(name.into()), Some(LEASE_TTL)))
                .unwrap()
        };
        let me = |name: &str| ServerInfo {
            name: name.into(),
            api: format!("/tmp/{name}.sock"),
            forward: None,
            policy_set: None,
            policy_error: None,
        };
        let a = Election::join(settings("a"), me("a")).await.unwrap();
        let fence = leading(&a).await;
        let store = EtcdStore::connect(settings("a"), Some(fence)).await.unwrap();
        let node = |n: &str| berth::store::NodeRecord {
            name: n.into(),
            labels: Default::default(),
            plugins: Default::default(),
            draining: false,
            forgotten: false,
            cert: None,
            paths: None,
        };
        store
            .put_node(&node("while-leading"))
            .await
            .expect("the leader writes");
        // Another server wins while `a` still holds its store.
        let b = Election::join(settings("b"), me("b")).await.unwrap();
        a.resign().await;
        let b_fence = leading(&b).await;
        let refused = store.put_node(&node("after")).await.unwrap_err().to_string();
        assert!(refused.contains(DEPOSED), "{refused}");
        let fresh = EtcdStore::connect(settings("b"), Some(b_fence)).await.unwrap();
        let names: Vec<String> = fresh.load_nodes().unwrap().into_iter().map(|n| n.name).collect();
        assert_eq!(names, ["while-leading"], "the deposed write left nothing");
        fresh
            .put_node(&node("b-writes"))
            .await
            .expect("the new leader writes");
    });
}

async fn leading(e: &Election) -> berth::store::Fence {
    let mut role = e.role();
    let found = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if let Role::Leader { fence } = &*role.borrow_and_update() {
                return fence.clone();
            }
            role.changed().await.unwrap();
        }
    })
    .await;
    found.expect("elected within 20 s")
}

/// A prefix written before servers were elected (no leader, servers or CA
/// keys; writes unfenced) and before the writer key is served as it was by
/// an elected server.
#[test]
fn a_prefix_written_without_an_election_is_served_as_it_was() {
    use berth::model::{VolumeRecord, VolumeSpec};
    use berth_proto::etcd::etcdserverpb as pb;
    let etcd = EtcdCluster::start(3);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let settings = EtcdSettings::new(etcd.endpoints(), Some("/berth-before".into())).unwrap();
        let store = EtcdStore::connect(settings, None).await.unwrap();
        let mut record = VolumeRecord::new("00000000000000000000000000000001".into(), VolumeSpec::default());
        record.spec = std::sync::Arc::new(VolumeSpec {
            name: "kept".into(),
            plugin: "hostpath".into(),
            required_bytes: 1 << 20,
            ..Default::default()
        });
        store.put(&record).await.unwrap();
        drop(store);
        // A release before `<prefix>/writer` did not write it.
        let mut kv = pb::kv_client::KvClient::connect(etcd.endpoints()[0].clone())
            .await
            .unwrap();
        let request = pb::DeleteRangeRequest {
            key: b"/berth-before/writer".to_vec(),
            ..Default::default()
        };
        assert_eq!(kv.delete_range(request).await.unwrap().into_inner().deleted, 1);
    });
    let c = Cluster::start(ClusterSpec {
        guests: false,
        store: Some(etcd.store_config("/berth-before")),
        ..ClusterSpec::default()
    });
    c.wait_until("the kept volume created", |v| {
        v.iter().any(|x| x["name"] == "kept" && x["state"] == "available")
    });
    assert_eq!(c.plugin_volumes(), 1);
}

/// Without a TLS cluster endpoint a follower cannot reach the leader: it
/// says who leads and where, and the leader's own socket answers.
#[test]
fn without_a_tls_endpoint_a_follower_names_the_leader() {
    let etcd = EtcdCluster::start(3);
    let c = Cluster::start(ClusterSpec {
        guests: false,
        servers: 2,
        store: Some(etcd.store_config("/berth-local")),
        ..ClusterSpec::default()
    });
    let l = (0..2)
        .find(|&i| c.berth_via(i, &["status"]).status.success())
        .expect("the leader answers on its own socket");
    let out = c.berth_via(1 - l, &["status"]);
    let (_, stderr) = berth_tests::texts(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains("UNAVAILABLE")
            && stderr.contains(&format!("follows server-{l}"))
            && stderr.contains("cluster_address"),
        "{stderr}"
    );
}

/// What a reader of the etcd prefix sees of the cluster CA: its certificate
/// and its key sealed, never the key. The Berth API on the leader's TLS
/// endpoint takes a server's certificate only, not an agent's. A CA that
/// vanished from etcd while nodes hold its certificates is not made again:
/// the server refuses to start and says how to put it back, and once put
/// back everything works as before.
#[test]
fn etcd_holds_no_key_and_a_lost_ca_is_restored_not_remade() {
    use berth_proto::etcd::etcdserverpb as pb;
    let etcd = EtcdCluster::start(3);
    let mut c = three_servers(&etcd);
    let l = c.wait_leader(&[0, 1, 2], Duration::from_secs(30));
    let kv = || async {
        pb::kv_client::KvClient::connect(etcd.endpoints()[0].clone())
            .await
            .unwrap()
    };
    let key = b"/berth-ha/cluster/ca".to_vec();
    let kept = berth_tests::block_on(berth_tests::stored(&etcd.endpoints()[0], &key))
        .expect("the cluster CA in etcd");
    let text = String::from_utf8(kept.clone()).unwrap();
    assert!(
        text.contains("sealed_key") && !text.contains("PRIVATE KEY"),
        "{text}"
    );

    // An agent's certificate is the cluster's, but not a server's.
    let leader_port = {
        let config = std::fs::read_to_string(&c.serves[l].config).unwrap();
        let line = config.lines().find(|l| l.starts_with("cluster_address")).unwrap();
        line.rsplit(':')
            .next()
            .unwrap()
            .trim_matches('"')
            .parse::<u16>()
            .unwrap()
    };
    let creds = berth::agent::tls::Credentials::load(&c.volumes_dir.join("nodes/node-a"))
        .unwrap()
        .unwrap();
    let refused = berth_tests::block_on(async {
        let channel = berth::agent::tls::session_channel("127.0.0.1", leader_port, &creds).unwrap();
        berth_proto::berth::v1::berth_client::BerthClient::new(channel)
            .list_volumes(berth_proto::berth::v1::ListVolumesRequest::default())
            .await
            .unwrap_err()
    });
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    c.ok_via((l + 1) % 3, &["volume", "list"]);

    // The CA deleted from etcd while both nodes hold its certificates.
    for i in 0..3 {
        c.kill_server(i);
    }
    berth_tests::block_on(async {
        kv().await
            .delete_range(pb::DeleteRangeRequest {
                key: key.clone(),
                ..Default::default()
            })
            .await
            .unwrap();
    });
    let out = berth_tests::berth(&["serve", "--config", &c.serves[0].config.display().to_string()]);
    let (_, stderr) = berth_tests::texts(&out);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("missing from etcd") && stderr.contains("etcdctl put") && stderr.contains("ca.json"),
        "{stderr}"
    );
    // Put back as the message says: the copy beside the server's key.
    let copy = std::fs::read(c.dir.path().join("state/cluster/ca.json")).unwrap();
    assert_eq!(copy, kept);
    berth_tests::block_on(async {
        kv().await
            .put(pb::PutRequest {
                key: key.clone(),
                value: copy,
                ..Default::default()
            })
            .await
            .unwrap();
    });
    for i in 0..3 {
        c.start_server(i);
    }
    c.wait_leader(&[0, 1, 2], Duration::from_secs(30));
    c.wait_nodes(&["node-a", "node-b"], "ready", Duration::from_secs(30));
}

/// A prefix whose CA an earlier release kept with its key in plain text:
/// the same CA is served (agents keep trusting it), and its key is sealed
/// in place, with a warning that says so.
#[test]
fn a_ca_kept_in_plain_text_by_an_earlier_release_is_sealed_in_place() {
    use berth_proto::etcd::etcdserverpb as pb;
    let etcd = EtcdCluster::start(1);
    let old = berth::cluster::pki::ClusterCa::generate().unwrap();
    let key = b"/berth-old/cluster/ca".to_vec();
    let put = serde_json::json!({ "cert": old.cert_pem(), "key": old.key_pem() });
    let kv = || async {
        pb::kv_client::KvClient::connect(etcd.endpoints()[0].clone())
            .await
            .unwrap()
    };
    berth_tests::block_on(async {
        kv().await
            .put(pb::PutRequest {
                key: key.clone(),
                value: put.to_string().into_bytes(),
                ..Default::default()
            })
            .await
            .unwrap();
    });
    let c = Cluster::start(ClusterSpec {
        guests: false,
        nodes: vec![("node-a", "a")],
        agents: true,
        tls: true,
        store: Some(etcd.store_config("/berth-old")),
        ..ClusterSpec::default()
    });
    assert!(c.log().contains("plain text"), "{}", c.log());
    let token = c.join_token("node-z");
    assert!(token.contains(&old.fingerprint()), "the same CA: {token}");
    let now = berth_tests::block_on(async {
        kv().await
            .range(pb::RangeRequest {
                key: key.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .kvs[0]
            .value
            .clone()
    });
    let now = String::from_utf8(now).unwrap();
    assert!(
        now.contains("sealed_key") && !now.contains("PRIVATE KEY"),
        "{now}"
    );
}
