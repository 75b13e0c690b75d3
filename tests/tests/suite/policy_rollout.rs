//! Rolling a policy out: the decision log, replaying it against a candidate
//! module, and explaining a volume's decisions. The candidate
//! (`tests/guests/candidate`) decides as the samples do except on volumes
//! labelled `tier=gold`, so every count below is known in advance.

use std::time::{Duration, Instant};

use berth::policy::logged::{Answer, Input, Logged};
use berth::policy::replay::{self, Report};
use berth::policy::{
    Code, EngineOptions, ModuleConfig, Operation, PolicyEngine, PolicyModule, RetryDecision,
};
use berth_tests::{Cluster, ClusterSpec, EtcdCluster, block_on, guest};
use serde_json::Value;

pub(crate) fn create(c: &Cluster, name: &str, extra: &[&str]) {
    let mut args = vec!["volume", "create", name, "--plugin", "hostpath", "--wait"];
    args.extend_from_slice(extra);
    c.ok(&args);
}

fn replay(c: &Cluster, decision: &str) -> Value {
    let candidate = guest("berth_candidate_guest").display().to_string();
    serde_json::from_str(&c.ok(&[
        "policy",
        "replay",
        &candidate,
        "--decision",
        decision,
        "-o",
        "json",
    ]))
    .unwrap()
}

#[test]
fn replay_counts_what_a_candidate_changes_and_the_log_survives_a_crash() {
    // node-a in zone a, node-b in zone b; the sample guests decide live.
    let mut c = Cluster::start(ClusterSpec::default());
    for i in 0..4 {
        create(&c, &format!("plain-{i}"), &[]);
    }
    for i in 0..3 {
        create(&c, &format!("gold-{i}"), &["--label", "tier=gold"]);
    }
    // The log is written in batches, a moment after the decisions.
    let started = Instant::now();
    while replay(&c, "naming")["replayed"] != 7 {
        assert!(started.elapsed() < Duration::from_secs(10), "{}", c.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    c.kill_serve();
    c.start_serve();

    let naming = replay(&c, "naming");
    assert_eq!(
        (
            &naming["replayed"],
            &naming["same"],
            &naming["different"],
            &naming["failed"]
        ),
        (&7.into(), &4.into(), &3.into(), &0.into()),
        "{naming}"
    );
    assert_eq!(naming["naming"]["names_changed"], 3);
    for example in naming["naming"]["examples"].as_array().unwrap() {
        assert!(
            example["volume"].as_str().unwrap().starts_with("gold-"),
            "{example}"
        );
        let (before, after) = (
            example["before"].as_str().unwrap(),
            example["after"].as_str().unwrap(),
        );
        assert_eq!(after, format!("gold-{before}"));
    }

    // Each create placed the volume once; the candidate takes zone b from the gold ones.
    let placement = replay(&c, "placement");
    assert_eq!(
        (
            &placement["replayed"],
            &placement["same"],
            &placement["different"]
        ),
        (&7.into(), &4.into(), &3.into()),
        "{placement}"
    );
    assert_eq!(placement["placement"]["became_ineligible"]["node-b"], 3);
    assert!(
        placement["placement"]["became_eligible"]
            .as_object()
            .unwrap()
            .is_empty()
    );

    // The text report ends with the line scripts read, then the next step.
    let candidate = guest("berth_candidate_guest").display().to_string();
    let text = c.ok(&["policy", "replay", &candidate, "--decision", "naming"]);
    assert_eq!(
        text.lines().rev().nth(1),
        Some("7 decisions replayed: 4 same, 3 different, 0 failed"),
        "{text}"
    );
    assert!(text.contains("naming: 3 names would change"), "{text}");
    // Nothing logged within the last moment: --since leaves the rest out.
    let recent = c.ok(&[
        "policy",
        "replay",
        &candidate,
        "--decision",
        "naming",
        "--since",
        "1ms",
    ]);
    assert_eq!(
        recent.lines().rev().nth(1),
        Some("0 decisions replayed: 0 same, 0 different, 0 failed")
    );
}

/// Naming decisions in the log, oldest first, once `n` are there.
fn logged_names(c: &Cluster, n: usize) -> Vec<String> {
    let started = Instant::now();
    loop {
        let request = berth_proto::berth::v1::ListDecisionsRequest {
            decision: "naming".into(),
            after: String::new(),
            limit: 100,
        };
        let page = block_on(async { c.client().list_decisions(request).await })
            .unwrap()
            .into_inner();
        let names: Vec<String> = page
            .decisions
            .iter()
            .map(|d| serde_json::from_str::<Logged>(&d.json).unwrap().volume)
            .collect();
        if names.len() >= n || started.elapsed() > Duration::from_secs(10) {
            return names;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_decision_log_keeps_the_newest_of_each_kind_in_either_store() {
    let etcd = EtcdCluster::start(1);
    for store in [None, Some(etcd.store_config("/berth-log"))] {
        let c = Cluster::start(ClusterSpec {
            extra: "decision_log = 5",
            store: store.clone(),
            ..ClusterSpec::default()
        });
        // On etcd the API answers (and passes calls on) before the server leads.
        berth_tests::wait_for(
            "a leader",
            Duration::from_secs(30),
            || {
                c.summary()
                    .is_some_and(|s| store.is_none() || s.servers.iter().any(|s| s.leader))
            },
            || c.log(),
        );
        for i in 0..8 {
            create(&c, &format!("v{i}"), &[]);
        }
        // Each batch trims the ring: wait for the last one, then nothing older than it stays.
        let started = Instant::now();
        while logged_names(&c, 5).last().map(String::as_str) != Some("v7") {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{store:?}: {}",
                c.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(logged_names(&c, 5), ["v3", "v4", "v5", "v6", "v7"], "{store:?}");
    }
}

#[test]
fn explain_shows_the_name_the_placement_with_refused_nodes_and_the_modules() {
    let c = Cluster::start(ClusterSpec::default());
    // Required in zone a: node-b (zone b) is refused, and says why.
    c.create_in("data", "zone=a");
    let explained: Value = serde_json::from_str(&c.ok(&["volume", "explain", "data", "-o", "json"])).unwrap();
    let volume: Value = serde_json::from_str(&c.ok(&["volume", "get", "data", "-o", "json"])).unwrap();
    let naming = &explained["naming"];
    assert_eq!(naming["answer"], volume["csi_name"]);
    assert!(
        naming["digest"].as_str().unwrap().starts_with("sha256:"),
        "{explained}"
    );
    let placement = &explained["placement"];
    assert!(
        placement["answer"].as_str().unwrap().starts_with("node-a"),
        "{explained}"
    );
    let nodes = placement["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    assert_eq!(
        (&nodes[0]["node"], &nodes[0]["eligible"]),
        (&"node-a".into(), &true.into())
    );
    assert_eq!(
        (&nodes[1]["node"], &nodes[1]["eligible"]),
        (&"node-b".into(), &false.into())
    );
    let reason = nodes[1]["reason"].as_str().unwrap();
    assert!(
        reason.contains("zone=b") && reason.contains("outside"),
        "{reason}"
    );

    let text = c.ok(&["volume", "explain", "data"]);
    assert!(text.contains("refused") && text.contains(reason), "{text}");
    assert!(text.contains("eligible  score"), "{text}");
}

/// Retry decisions replayed straight through the policy crate, on failures
/// made up as the log would hold them: the candidate gives up where the
/// sample retries RESOURCE_EXHAUSTED, and agrees on everything else.
#[test]
fn replay_groups_retry_changes_by_verdict() {
    let engine = PolicyEngine::new(EngineOptions::default()).unwrap();
    let load = |name: &str| PolicyModule::load(&engine, ModuleConfig::from_path(&guest(name))).unwrap();
    let (sample, candidate) = (load("berth_retry_guest"), load("berth_candidate_guest"));
    let mut report = Report::default();
    let codes = [
        (Code::ResourceExhausted, 4),
        (Code::Unavailable, 5),
        (Code::InvalidArgument, 2),
    ];
    for (code, n) in codes {
        for attempt in 1..=n {
            let failure = berth::policy::samples::failure(Operation::CreateVolume, code, attempt);
            let input = Input::Retry(failure);
            let live = block_on(replay::ask(&engine, &sample, &input));
            let entry = Logged {
                at_ms: 1,
                volume: format!("v-{attempt}"),
                module: "retry".into(),
                digest: Some(sample.digest().into()),
                input,
                answer: live,
            };
            report.add(&entry, &block_on(replay::ask(&engine, &candidate, &entry.input)));
        }
    }
    assert_eq!(
        (report.replayed, report.same, report.different, report.failed),
        (11, 7, 4, 0)
    );
    assert_eq!(report.retry.changes.get("retry → give-up"), Some(&4));
    assert_eq!(report.retry.delays_changed, 0, "jitter is not a difference");
    assert!(matches!(
        block_on(replay::ask(
            &engine,
            &candidate,
            &Input::Retry(berth::policy::samples::failure(
                Operation::DeleteVolume,
                Code::NotFound,
                1
            ))
        )),
        Answer::Retry(RetryDecision::Done)
    ));
}

fn diff(c: &Cluster) -> Value {
    serde_json::from_str(&c.ok(&["policy", "diff", "-o", "json"])).unwrap()
}

/// A shadow's counts for `decision`: (same, different, failed, dropped).
fn shadow_counts(d: &Value, decision: &str) -> (u64, u64, u64, u64) {
    let c = d["shadows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["decision"] == decision)
        .cloned()
        .unwrap_or_default();
    let n = |k: &str| c[k].as_u64().unwrap_or_default();
    (n("same"), n("different"), n("failed"), n("dropped"))
}

#[test]
fn a_shadow_decides_beside_the_live_module_and_is_never_used() {
    let port = berth_tests::free_port();
    // Every decision shadowed, however busy the machine running the tests is.
    let extra = format!("metrics = \"127.0.0.1:{port}\"\nshadow_every_decision = true");
    let c = Cluster::start(ClusterSpec {
        shadow: &["naming", "placement"],
        extra: &extra,
        ..ClusterSpec::default()
    });
    for i in 0..4 {
        create(&c, &format!("plain-{i}"), &[]);
    }
    for i in 0..3 {
        create(&c, &format!("gold-{i}"), &["--label", "tier=gold"]);
    }
    let started = Instant::now();
    let d = loop {
        let d = diff(&c);
        let (s, n, f, x) = shadow_counts(&d, "placement");
        if s + n + f + x >= 7 || started.elapsed() > Duration::from_secs(10) {
            break d;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(shadow_counts(&d, "naming"), (4, 3, 0, 0), "{d}");
    assert_eq!(shadow_counts(&d, "placement"), (4, 3, 0, 0), "{d}");
    let differences = d["differences"].as_array().unwrap();
    assert_eq!(differences.len(), 6);
    for x in differences {
        assert!(x["live"]["volume"].as_str().unwrap().starts_with("gold-"), "{x}");
        assert!(
            x["live"]["input"].is_object(),
            "each difference carries its input"
        );
    }

    // The live answers are the ones used: no volume got the candidate's name.
    for v in c.volumes() {
        let name = v["csi_name"].as_str().unwrap_or_default().to_string();
        assert!(name.starts_with("pv-"), "{v}");
    }
    let s = berth_tests::scrape::scrape(port);
    let by = berth_tests::scrape::by_labels(
        &s,
        "berth_policy_shadow_decisions_total",
        &["decision", "module", "outcome"],
    );
    assert_eq!(by.get("naming candidate different"), Some(&3.0), "{by:?}");
    assert_eq!(by.get("placement candidate same"), Some(&4.0), "{by:?}");

    let text = c.ok(&["policy", "diff"]);
    assert!(
        text.contains("candidate shadowing naming: 4 same, 3 different, 0 failed, 0 dropped"),
        "{text}"
    );
}

/// An operator's walk with a candidate from a registry: replay it by
/// digest, shadow it from the command line, promote it.
#[test]
fn replay_from_a_registry_then_shadow_and_promote_from_the_command_line() {
    let registry = berth_tests::RegistryServer::start();
    let pushed = registry.push(&guest("berth_candidate_guest"), "berth/candidate:v2");
    let reference = pushed["reference"].as_str().unwrap().to_string();
    let c = Cluster::start(ClusterSpec {
        extra: "shadow_every_decision = true",
        ..ClusterSpec::default()
    });
    create(&c, "plain-0", &[]);
    create(&c, "gold-0", &["--label", "tier=gold"]);
    let replay = |c: &Cluster| -> Value {
        serde_json::from_str(&c.ok(&[
            "policy",
            "replay",
            &reference,
            "--plain-http",
            "--decision",
            "naming",
            "-o",
            "json",
        ]))
        .unwrap()
    };
    let started = Instant::now();
    let report = loop {
        let r = replay(&c);
        if r["replayed"] == 2 || started.elapsed() > Duration::from_secs(10) {
            break r;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        (&report["same"], &report["different"]),
        (&1.into(), &1.into()),
        "{report}"
    );
    // In words, it ends with the next step, ready to run.
    let said = c.ok(&["policy", "replay", &reference, "--decision", "naming"]);
    assert!(
        said.trim_end()
            .lines()
            .last()
            .is_some_and(|l| l.starts_with(&format!(
                "next: `berth policy shadow {reference} --decision naming`"
            ))),
        "{said}"
    );

    let candidate = guest("berth_candidate_guest").display().to_string();
    let shadowed: Value = serde_json::from_str(&c.ok(&[
        "policy",
        "shadow",
        &candidate,
        "--decision",
        "naming",
        "--name",
        "naming-v2",
        "-o",
        "json",
    ]))
    .unwrap();
    assert_eq!(shadowed["version"], 2, "{shadowed:#}");
    // Before any shadow decision: the shadow is there, and said to be.
    let said = c.ok(&["policy", "diff"]);
    assert!(
        said.contains("naming-v2 shadowing: no shadow decision yet"),
        "{said}"
    );
    let status = c.ok(&["policy", "status"]);
    assert!(
        status.lines().any(|l| l.contains("naming-v2 [SHADOW of naming]")),
        "{status}"
    );
    let modules: Value = serde_json::from_str(&c.ok(&["policy", "status", "-o", "json"])).unwrap();
    let shadow = modules["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mode"] == "shadow")
        .unwrap_or_else(|| panic!("{modules:#}"));
    assert_eq!(shadow["name"], "naming-v2", "{modules:#}");
    create(&c, "gold-1", &["--label", "tier=gold"]);
    let started = Instant::now();
    while shadow_counts(&diff(&c), "naming").1 < 1 {
        assert!(started.elapsed() < Duration::from_secs(10), "{}", diff(&c));
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(shadow_counts(&diff(&c), "naming"), (0, 1, 0, 0));
    assert_eq!(diff(&c)["shadows"][0]["module"], "naming-v2");
    // In words: when, as a date, and the answers as text.
    let said = c.ok(&["policy", "diff"]);
    let line = said
        .lines()
        .find(|l| l.contains("for gold-1"))
        .unwrap_or_else(|| panic!("{said}"));
    assert!(
        line.starts_with("20") && line.contains('T') && !line.contains('{'),
        "{line}"
    );

    let promoted: Value = serde_json::from_str(&c.ok(&["policy", "promote", "-o", "json"])).unwrap();
    assert_eq!(promoted["version"], 3);
    create(&c, "gold-2", &["--label", "tier=gold"]);
    let v: Value = serde_json::from_str(&c.ok(&["volume", "get", "gold-2", "-o", "json"])).unwrap();
    assert!(v["csi_name"].as_str().unwrap().starts_with("gold-pv-"), "{v}");
    // explain and status name the module by the same digest.
    let explained: Value =
        serde_json::from_str(&c.ok(&["volume", "explain", "gold-2", "-o", "json"])).unwrap();
    let digest = explained["naming"]["digest"]
        .as_str()
        .unwrap_or_else(|| panic!("{explained:#}"));
    let status: Value = serde_json::from_str(&c.ok(&["policy", "status", "-o", "json"])).unwrap();
    assert!(
        status["policies"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["digest"] == digest),
        "{digest} not in {status:#}"
    );
    assert!(c.ok(&["policy", "status"]).contains(&format!("module {digest}")));
}

/// `instances_made_ahead` reaches the engine: by default decisions find
/// instances made ahead of need; with 0, every one is made on its path.
#[test]
fn decisions_use_instances_made_ahead_unless_the_config_says_none() {
    for (extra, ahead) in [("", true), ("instances_made_ahead = 0", false)] {
        let c = Cluster::start(ClusterSpec {
            extra,
            ..ClusterSpec::default()
        });
        for i in 0..4 {
            // Each a command of its own, spaced as an operator's are.
            c.ok(&[
                "volume",
                "create",
                &format!("v{i}"),
                "--plugin",
                "hostpath",
                "--wait",
            ]);
        }
        let status: Value = serde_json::from_str(&c.ok(&["status", "-o", "json"])).unwrap();
        let naming = status["policies"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["decisions"].as_array().unwrap().iter().any(|d| d == "naming"))
            .cloned()
            .unwrap_or_else(|| panic!("a naming module: {status:#}"));
        let (calls, made_ahead) = (
            naming["calls"].as_u64().unwrap(),
            naming["made_ahead"].as_u64().unwrap(),
        );
        assert!(calls >= 4, "{naming:#}");
        assert_eq!(made_ahead > 0, ahead, "{extra:?}: {naming:#}");
    }
}
