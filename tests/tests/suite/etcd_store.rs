//! `berth serve` with its volumes and nodes in a real three-member etcd
//! cluster on loopback: the lifecycle, restarts, a lost member, and etcd
//! entirely away.

use std::time::{Duration, Instant};

use berth_tests::{Cluster, ClusterSpec, EtcdCluster, texts, wait_for};
use serde_json::Value;

fn on_etcd(etcd: &EtcdCluster) -> Cluster {
    on_etcd_with(&etcd.store_config("/berth-test"))
}

fn on_etcd_with(store: &str) -> Cluster {
    Cluster::start(ClusterSpec {
        guests: false,
        store: Some(store.to_string()),
        ..ClusterSpec::default()
    })
}

fn volumes(c: &Cluster) -> Vec<Value> {
    let out: Value = serde_json::from_str(&c.ok(&["volume", "list", "-o", "json"])).unwrap();
    out.as_array().cloned().unwrap_or_default()
}

fn published(c: &Cluster) -> Vec<String> {
    let mut names: Vec<String> = volumes(c)
        .iter()
        .filter(|v| v["state"] == "published")
        .map(|v| v["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

fn create_and_publish(c: &Cluster, name: &str) {
    c.create_in(name, "zone=a");
    c.ok(&["volume", "publish", name, "--node", "node-a", "--wait"]);
}

type Kv = berth_proto::etcd::etcdserverpb::kv_client::KvClient<tonic::transport::Channel>;

/// etcd's current revision, as a count of `key`'s range answers it.
async fn revision_now(kv: &mut Kv, key: &[u8], range_end: &[u8]) -> i64 {
    use berth_proto::etcd::etcdserverpb as pb;
    kv.range(pb::RangeRequest {
        key: key.to_vec(),
        range_end: range_end.to_vec(),
        count_only: true,
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
    .header
    .unwrap()
    .revision
}

/// A read of `key` at `revision`.
async fn read_at(kv: &mut Kv, key: &[u8], revision: i64) -> Result<(), tonic::Status> {
    use berth_proto::etcd::etcdserverpb as pb;
    let read = pb::RangeRequest {
        key: key.to_vec(),
        revision,
        ..Default::default()
    };
    kv.range(read).await.map(drop)
}

/// Whether etcd refused a read as compacted away.
fn compacted(read: Result<(), tonic::Status>) -> bool {
    read.is_err_and(|s| s.message().contains("compacted"))
}

#[test]
fn volumes_live_in_etcd_through_restarts_and_a_lost_member() {
    let mut etcd = EtcdCluster::start(3);
    let mut c = on_etcd(&etcd);
    for i in 0..6 {
        create_and_publish(&c, &format!("v{i}"));
    }
    for i in 0..2 {
        c.ok(&["volume", "delete", "--force", &format!("v{i}"), "--wait"]);
    }
    assert!(!c.store_path().exists(), "no embedded store is made beside etcd");
    // A plugin's recorded check is kept in etcd as well.
    let check = berth_proto::berth::v1::PluginCheck {
        plugin: "hostpath".into(),
        driver: "hostpath.csi.berth.dev".into(),
        cases: vec![berth_proto::berth::v1::PluginCheckCase {
            name: "Probe".into(),
            rule: "answers ready".into(),
            verdict: "passed".into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let request = berth_proto::berth::v1::RecordPluginCheckRequest { check: Some(check) };
    let recorded = berth_tests::block_on(async { c.client().record_plugin_check(request).await })
        .unwrap()
        .into_inner();
    let want: Vec<String> = (2..6).map(|i| format!("v{i}")).collect();
    assert_eq!(published(&c), want);

    // The server and one etcd member gone at once: two members are a quorum.
    c.kill_serve();
    etcd.kill(0);
    c.start_serve();
    assert_eq!(published(&c), want, "everything acknowledged is still there");
    create_and_publish(&c, "v6");
    etcd.restart(0);
    etcd.wait_healthy(Duration::from_secs(30));

    // A cold start reads it all back, and the plugin agrees.
    c.kill_serve();
    c.start_serve();
    let mut want = want;
    want.push("v6".into());
    assert_eq!(published(&c), want);
    let status: Value = serde_json::from_str(&c.ok(&["plugin", "status", "-o", "json"])).unwrap();
    assert_eq!(status[0]["last_check"]["passed"], 1, "{status:#}");
    assert_eq!(status[0]["last_check"]["recorded_by"], recorded.recorded_by);
    assert_eq!(c.plugin_volumes(), want.len(), "nothing leaked or made twice");
}

#[test]
fn etcd_away_is_unavailable_and_work_resumes_when_it_returns() {
    let mut etcd = EtcdCluster::start(3);
    let c = on_etcd(&etcd);
    create_and_publish(&c, "before");
    for i in 0..3 {
        etcd.kill(i);
    }
    let out = c.berth(&[
        "volume",
        "create",
        "during",
        "--plugin",
        "hostpath",
        "--requisite",
        "zone=a",
    ]);
    let (stdout, stderr) = texts(&out);
    assert!(!out.status.success(), "created without a store: {stdout}");
    assert!(
        stderr.contains("UNAVAILABLE") && stderr.contains("etcd"),
        "a clear error naming the store: {stderr}"
    );
    // Reads still answer from memory.
    assert_eq!(published(&c), vec!["before".to_string()]);

    for i in 0..3 {
        etcd.restart(i);
    }
    etcd.wait_healthy(Duration::from_secs(30));
    wait_for(
        "a create once etcd is back",
        Duration::from_secs(30),
        || c.try_create_in("after", "zone=a"),
        String::new,
    );
    c.ok(&["volume", "publish", "after", "--node", "node-a", "--wait"]);
    assert_eq!(published(&c), vec!["after".to_string(), "before".to_string()]);
    assert!(
        !volumes(&c).iter().any(|v| v["name"] == "during"),
        "the refused create left nothing"
    );
}

/// A new leader reads the whole prefix: a store whose pages pass gRPC's
/// default 4 MiB message (700 volumes with 4 KiB of parameters and 4 KiB of
/// labels each, ~6 MB) is read whole, and the server serves.
#[test]
fn a_store_larger_than_one_grpc_message_is_read_whole() {
    use berth::model::{VecMap, VolumeRecord, VolumeSpec, new_id};
    use berth::store::{EtcdSettings, EtcdStore, Store};
    let etcd = EtcdCluster::start(1);
    let settings = EtcdSettings::new(etcd.endpoints(), Some("/berth-big".into())).unwrap();
    const VOLUMES: usize = 700;
    berth_tests::block_on(async {
        let store = std::sync::Arc::new(EtcdStore::connect(settings, None).await.unwrap());
        let mut puts = tokio::task::JoinSet::new();
        for i in 0..VOLUMES {
            let mut r = VolumeRecord::new(new_id(), VolumeSpec::default());
            r.spec = std::sync::Arc::new(VolumeSpec {
                name: format!("big-{i:04}"),
                plugin: "hostpath".into(),
                parameters: VecMap::from([("p".into(), "x".repeat(4000))]),
                labels: VecMap::from([("l".into(), "y".repeat(4000))]),
                ..Default::default()
            });
            // Waiting for an operator: nothing is asked of the plugin for them.
            r.give_up("kept failed for this test".into());
            let store = store.clone();
            puts.spawn(async move { store.put(&r).await });
        }
        while let Some(put) = puts.join_next().await {
            put.unwrap().unwrap();
        }
    });
    let c = Cluster::start(ClusterSpec {
        guests: false,
        store: Some(etcd.store_config("/berth-big")),
        ..ClusterSpec::default()
    });
    assert_eq!(volumes(&c).len(), VOLUMES);
    create_and_publish(&c, "fresh");
    assert_eq!(published(&c), ["fresh"]);
}

/// etcd with TLS for clients and `--client-cert-auth`: Berth speaks TLS to
/// it with its client certificate and works as on plain etcd; the same
/// server without a client certificate is refused by etcd, and says so.
#[test]
fn berth_speaks_tls_to_etcd_with_a_client_certificate() {
    let etcd = EtcdCluster::start_tls(1);
    let store = etcd.store_config("/berth-tls");
    assert!(store.contains("https://"), "{store}");
    let c = on_etcd_with(&store);
    create_and_publish(&c, "v");
    assert_eq!(published(&c), ["v"]);

    // The same config, less the client certificate.
    let config = std::fs::read_to_string(&c.config).unwrap();
    let without: String = config
        .lines()
        .filter(|l| !l.starts_with("cert = ") && !l.starts_with("key = "))
        .map(|l| format!("{l}\n"))
        .collect::<String>()
        .replace("state = \"state/", "state = \"state-nocert/")
        .replace("/berth-tls", "/berth-tls-nocert");
    let path = c.dir.path().join("nocert.toml");
    std::fs::write(&path, without).unwrap();
    let log = c.dir.path().join("nocert.log");
    let mut serve = berth_tests::berth_logged("serve", &path, &log);
    let deadline = Instant::now() + Duration::from_secs(30);
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let exited = serve.try_wait().unwrap().is_some();
        if exited || text.contains("certificate") || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = serve.kill();
    let _ = serve.wait();
    assert!(
        text.contains("etcd") && text.contains("client certificate"),
        "{text}"
    );
}

/// A follower's warm copy follows the prefix; when the member it watches
/// dies it resumes on another, and when etcd has compacted away the
/// revision it would resume from, it reads the prefix again. What it hands
/// over is the prefix as etcd has it.
#[test]
fn a_warm_copy_resumes_on_another_member_and_reads_again_after_a_compaction() {
    use berth::model::{VolumeRecord, VolumeSpec, new_id};
    use berth::store::{EtcdSettings, EtcdStore, Mirror, Store};
    use berth_proto::etcd::etcdserverpb as pb;
    let mut etcd = EtcdCluster::start(3);
    let settings = EtcdSettings::new(etcd.endpoints(), Some("/berth-mirror".into())).unwrap();
    let record = |name: &str| {
        let mut r = VolumeRecord::new(new_id(), VolumeSpec::default());
        r.spec_mut().name = name.into();
        r
    };
    let (v1, v2, v3) = (record("v1"), record("v2"), record("v3"));
    let mirror = berth_tests::block_on(async {
        let store = EtcdStore::connect(settings.clone(), None).await.unwrap();
        store.put(&v1).await.unwrap();
        store.put(&v2).await.unwrap();
        Mirror::start(settings.clone()).unwrap()
    });
    // The copy has read the prefix (v1 and v2) before its member goes.
    wait_for(
        "the copy's first read",
        Duration::from_secs(20),
        || mirror.revision() > 0,
        String::new,
    );
    // The member the copy watches (the first) goes away; the others change
    // the prefix and compact etcd's history past the copy's revision.
    etcd.kill(0);
    let others = EtcdSettings::new(etcd.endpoints()[1..].to_vec(), Some("/berth-mirror".into())).unwrap();
    let revision = berth_tests::block_on(async {
        // The two left may be electing a leader among themselves first.
        let started = Instant::now();
        let store = loop {
            match EtcdStore::connect(others.clone(), None).await {
                Ok(store) => break store,
                Err(e) if started.elapsed() < Duration::from_secs(20) => {
                    tracing::debug!(error = %e, "the members left are not answering yet");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("the members left never answered: {e}"),
            }
        };
        store.put(&v3).await.unwrap();
        store.remove(&v1.id).await.unwrap();
        let mut kv = pb::kv_client::KvClient::connect(etcd.endpoints()[1].clone())
            .await
            .unwrap();
        let now = revision_now(&mut kv, b"/berth-mirror/", b"/berth-mirror0").await;
        kv.compact(pb::CompactionRequest {
            revision: now,
            physical: true,
        })
        .await
        .unwrap();
        now
    });
    let warm =
        berth_tests::block_on(mirror.take(revision, Duration::from_secs(30))).expect("the copy caught up");
    let mut names: Vec<&str> = warm.volumes.values().map(|v| v.spec.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["v2", "v3"]);
    assert!(warm.revision >= revision);
}

#[test]
fn the_leader_compacts_etcds_history_and_work_goes_on() {
    let etcd = EtcdCluster::start(1);
    let store = format!("{}compact_every = \"1s\"\n", etcd.store_config("/berth-compact"));
    let c = on_etcd_with(&store);
    create_and_publish(&c, "before");
    let endpoint = etcd.endpoints()[0].clone();
    let kv = || async { Kv::connect(endpoint.clone()).await.unwrap() };
    // The revision of everything written so far: etcd keeps it until compacted.
    let written =
        berth_tests::block_on(async { revision_now(&mut kv().await, b"/berth-compact/schema", b"").await });
    let read_before = || {
        berth_tests::block_on(async { read_at(&mut kv().await, b"/berth-compact/schema", written - 1).await })
    };
    // A compaction to a revision keeps that revision: the one before it goes.
    assert!(read_before().is_ok(), "history is there before a compaction");
    wait_for(
        "the leader to compact past the first writes",
        Duration::from_secs(30),
        || compacted(read_before()),
        String::new,
    );
    // The leader goes on writing after its compaction.
    create_and_publish(&c, "after");
    assert_eq!(published(&c), ["after", "before"]);
}

#[test]
fn the_compaction_schedule_outlives_terms_shorter_than_its_interval() {
    use berth::store::{EtcdSettings, EtcdStore};
    use berth_proto::etcd::etcdserverpb as pb;
    let etcd = EtcdCluster::start(1);
    let endpoint = etcd.endpoints()[0].clone();
    let settings = EtcdSettings::new(etcd.endpoints(), Some("/berth-terms".into()))
        .unwrap()
        .compaction(Some(Duration::from_secs(2)))
        .unwrap();
    berth_tests::block_on(async {
        let fence = berth_tests::fence(&endpoint, b"/berth-terms/leader").await;
        let first = fence.create_revision;
        let mut kv = pb::kv_client::KvClient::connect(endpoint).await.unwrap();
        // Terms of 0.5 s, each a leader's store; none lives a whole interval.
        let started = Instant::now();
        let mut terms = 0;
        while !compacted(read_at(&mut kv, b"/berth-terms/leader", first).await) {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "no compaction after {terms} short terms"
            );
            let term = EtcdStore::connect(settings.clone(), Some(fence.clone()))
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(500)).await;
            drop(term);
            terms += 1;
        }
        assert!(
            terms >= 2,
            "compacted after {terms} terms: sooner than an interval"
        );
    });
}

/// The decision log on etcd: a batch is a key or a few, not a key a
/// decision; pages run across chunks; the ring holds exactly its newest;
/// and an entry an older release stored alone under its own key is read and
/// trimmed with the rest.
#[test]
fn decisions_are_stored_a_chunk_a_batch_and_paged_across_chunks() {
    use berth::store::{EtcdSettings, EtcdStore, LoggedBatch, Store};
    let etcd = EtcdCluster::start(1);
    let endpoint = etcd.endpoints()[0].clone();
    let prefix = "/berth-log";
    let key = |i: usize| format!("{i:06}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let old = format!("{prefix}/decisions/naming/{}", key(0));
        berth_tests::put(&endpoint, old.as_bytes(), br#"{"old":0}"#).await;
        let settings = EtcdSettings::new(etcd.endpoints(), Some(prefix.into())).unwrap();
        let store = EtcdStore::connect(settings, None).await.unwrap();
        for round in 0..10 {
            let entries = (1 + round * 30..1 + (round + 1) * 30)
                .map(|i| (key(i), format!("{{\"n\":{i}}}").into_bytes()))
                .collect();
            let batch = LoggedBatch {
                kind: "naming".into(),
                entries,
            };
            store.append_decisions(vec![batch], 200).await.unwrap();
            if round == 0 {
                let first = store.read_decisions("naming", "", 2).await.unwrap();
                assert_eq!(
                    first[0],
                    (key(0), br#"{"old":0}"#.to_vec()),
                    "the older release's entry"
                );
                assert_eq!(first[1].0, key(1));
            }
        }
        // Pages of 45 through chunks of 30: each page's last key starts the next.
        let mut read: Vec<String> = Vec::new();
        loop {
            let after = read.last().cloned().unwrap_or_default();
            let page = store.read_decisions("naming", &after, 45).await.unwrap();
            if page.is_empty() {
                break;
            }
            assert!(page.len() <= 45);
            read.extend(page.into_iter().map(|(k, _)| k));
        }
        assert_eq!(
            read,
            (101..301).map(key).collect::<Vec<_>>(),
            "the newest 200, in order"
        );
        let mut kv = Kv::connect(endpoint.clone()).await.unwrap();
        let under = format!("{prefix}/decisions/naming/");
        let held = kv
            .range(berth_proto::etcd::etcdserverpb::RangeRequest {
                key: under.clone().into_bytes(),
                // Just past the prefix: its closing '/' one higher.
                range_end: format!("{prefix}/decisions/naming0").into_bytes(),
                count_only: true,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .count;
        assert_eq!(held, 7, "six batches whole and one cut, not a key a decision");
    });
}
