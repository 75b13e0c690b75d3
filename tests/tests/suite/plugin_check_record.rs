//! `berth plugin check --record PLUGIN`: the report kept by the server as
//! the configured plugin's latest, shown by `plugin status` after a restart,
//! and refused when it names no plugin, another driver, or is malformed.

use berth_proto::berth::v1 as api;
use berth_tests::{Cluster, ClusterSpec, PluginBuilder, block_on, texts};
use serde_json::Value;

/// The check of the plugin at `endpoint` (with node-a's for the node
/// calls when `node_a`), recorded as `record`: the CLI's output.
fn check_recorded(c: &Cluster, endpoint: &str, node_a: bool, record: &str) -> std::process::Output {
    let work = c.dir.path().join("check-work");
    std::fs::create_dir_all(&work).unwrap();
    let node = c.nodes[0].1.endpoint();
    let mut args = vec!["plugin", "check", endpoint, "--work-dir", work.to_str().unwrap()];
    if node_a {
        args.extend(["--node-endpoint", &node]);
    }
    args.extend(["--record", record]);
    c.berth(&args)
}

fn last_check(c: &Cluster) -> Value {
    let status: Value = serde_json::from_str(&c.ok(&["plugin", "status", "-o", "json"])).unwrap();
    status[0]["last_check"].clone()
}

#[test]
fn a_recorded_check_is_the_plugins_latest_and_outlives_a_restart() {
    let mut c = Cluster::start(ClusterSpec::builtin());
    assert_eq!(last_check(&c), Value::Null, "no check recorded yet");
    assert!(c.ok(&["plugin", "status"]).contains("none recorded"));

    let out = check_recorded(&c, &c.controller.endpoint(), true, "hostpath");
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains("recorded as plugin hostpath's latest check, by management"),
        "{stdout}"
    );
    let check = last_check(&c);
    assert_eq!(check["driver"], "hostpath.csi.berth.dev");
    assert_eq!(check["recorded_by"], "management");
    assert_eq!(check["failed"], 0);
    let passed = check["passed"].as_u64().unwrap();
    assert!(passed >= 20, "{check}");
    let text = c.ok(&["plugin", "status"]);
    assert!(text.contains(&format!("{passed} passed, 0 failed")), "{text}");

    // Stored: the next server (a restart here) shows the same report.
    c.kill_serve();
    c.start_serve();
    assert_eq!(last_check(&c), check);

    // A later check replaces it: one that fails shows its failed cases.
    let dir = berth_tests::test_dir();
    let misbehaving = PluginBuilder::new(dir.path(), "csi")
        .args(&["--misbehave", "not-found-on-delete"])
        .spawn();
    let out = check_recorded(&c, &misbehaving.endpoint(), false, "hostpath");
    assert!(!out.status.success(), "the misbehaving plugin failed its check");
    let check = last_check(&c);
    assert!(check["failed"].as_u64().unwrap() > 0, "{check}");
    assert!(
        check["failures"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f.as_str().unwrap().contains("DeleteVolume")),
        "{check}"
    );
    let text = c.ok(&["plugin", "status"]);
    assert!(text.contains("FAIL DeleteVolume"), "{text}");
}

#[test]
fn a_check_of_another_driver_or_no_plugin_is_refused_and_nothing_is_kept() {
    let c = Cluster::start(ClusterSpec::builtin());
    let dir = berth_tests::test_dir();
    let other = PluginBuilder::new(dir.path(), "other")
        .args(&["--name", "other.csi.example.com"])
        .spawn();
    let out = check_recorded(&c, &other.endpoint(), false, "hostpath");
    let (stdout, stderr) = texts(&out);
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stderr.contains(
            r#"FAILED_PRECONDITION: the check ran against driver "other.csi.example.com", but plugin "hostpath" is driver "hostpath.csi.berth.dev""#
        ),
        "{stderr}"
    );
    let out = check_recorded(&c, &c.controller.endpoint(), true, "nosuch");
    let (_, stderr) = texts(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains(r#"NOT_FOUND: no plugin named "nosuch""#),
        "{stderr}"
    );
    assert_eq!(last_check(&c), Value::Null, "nothing was kept");

    // Straight to the API: a verdict of no known kind, and too many cases.
    let record = |cases: Vec<api::PluginCheckCase>| {
        let request = api::RecordPluginCheckRequest {
            check: Some(api::PluginCheck {
                plugin: "hostpath".into(),
                driver: "hostpath.csi.berth.dev".into(),
                cases,
                ..Default::default()
            }),
        };
        block_on(async { c.client().record_plugin_check(request).await })
    };
    let case = |verdict: &str, reason: usize| api::PluginCheckCase {
        name: "DeleteVolume twice".into(),
        rule: "succeeds both times".into(),
        verdict: verdict.into(),
        reason: "x".repeat(reason),
        must: true,
    };
    let refused = record(vec![case("fine", 1)]).unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(
        refused.message().contains(r#"verdict "fine" is none of"#),
        "{}",
        refused.message()
    );
    let refused = record((0..513).map(|_| case("passed", 0)).collect()).unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(refused.message().contains("at most 512"), "{}", refused.message());
    assert_eq!(last_check(&c), Value::Null, "nothing was kept");
    // A reason past its bound is kept cut, not whole.
    let kept = record(vec![case("failed", 10_000)]).unwrap().into_inner();
    assert!(
        kept.cases[0].reason.len() <= 1024,
        "{}",
        kept.cases[0].reason.len()
    );
    assert_eq!(kept.failed, 1);
}
