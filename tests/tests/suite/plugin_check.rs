//! `berth plugin check` against the sample plugin: it passes as it is, fails
//! with the rule broken when told to misbehave, skips what it does not offer,
//! and leaves nothing behind either way.

use std::path::{Path, PathBuf};

use berth_tests::{Plugin, PluginBuilder, berth, test_dir, texts};
use serde_json::Value;

/// Runs the check with JSON output; the exit status and the report.
fn check(plugin: &Plugin, work: &Path, extra: &[&str]) -> (bool, Value) {
    let endpoint = plugin.endpoint();
    let work = work.display().to_string();
    let mut args = vec![
        "plugin",
        "check",
        &endpoint,
        "--work-dir",
        &work,
        "--output",
        "json",
    ];
    args.extend_from_slice(extra);
    let out = berth(&args);
    let (stdout, stderr) = texts(&out);
    let report =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\n{stderr}"));
    (out.status.success(), report)
}

fn cases_with(report: &Value, verdict: &str) -> Vec<(String, String)> {
    report["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["verdict"] == verdict)
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Nothing of the check's is left: no volume or snapshot on the plugin, no
/// path under the work directory.
fn assert_clean(state_dir: &Path, work: &Path) {
    for kind in ["volumes", "snapshots", "data", "snapdata"] {
        let left: Vec<_> = std::fs::read_dir(state_dir.join(kind))
            .map(|d| d.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{kind} left on the plugin: {left:?}");
    }
    let left: Vec<_> = std::fs::read_dir(work)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "left in the work directory: {left:?}");
}

/// The check against a sample plugin started with `--misbehave flag`: it
/// must fail; its failed cases (name, reason).
fn check_misbehaving(dir: &Path, flag: &str) -> (Plugin, PathBuf, Vec<(String, String)>) {
    let work = dir.join("work");
    std::fs::create_dir(&work).unwrap();
    let plugin = PluginBuilder::new(dir, "csi")
        .args(&["--misbehave", flag])
        .spawn();
    let (ok, report) = check(&plugin, &work, &[]);
    assert!(!ok, "{flag}: the check passed");
    (plugin, work, cases_with(&report, "failed"))
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn the_sample_plugin_passes_every_case() {
    let dir = test_dir();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let plugin = PluginBuilder::new(dir.path(), "csi")
        .args(&["--topology", "zone=a"])
        .spawn();
    let modify = ["--mutable-parameter", "tier=gold"];
    let (ok, report) = check(&plugin, &work, &modify);
    assert!(ok, "{report:#}");
    assert_eq!(report["failed"], 0, "{report:#}");
    assert_eq!(
        cases_with(&report, "skipped"),
        vec![],
        "the sample offers everything"
    );
    let passed: Vec<String> = cases_with(&report, "passed").into_iter().map(|c| c.0).collect();
    for name in [
        "CreateVolume twice",
        "DeleteVolume twice",
        "NodePublishVolume",
        "NodeExpandVolume",
        "CreateSnapshot twice",
        "ControllerPublishVolume, unknown node",
        "NodeGetVolumeStats, unknown volume",
        "NodeGetVolumeStats, path that does not exist",
        "NodeExpandVolume, unknown volume",
        "ControllerModifyVolume twice",
        "ControllerModifyVolume, unknown volume",
        "ControllerModifyVolume missing a field",
        "ControllerModifyVolume with no parameter",
        "GetSnapshot",
        "GetSnapshot, unknown snapshot",
        "CreateVolumeGroupSnapshot twice",
        "GetVolumeGroupSnapshot",
        "GetVolumeGroupSnapshot, unknown group",
        "DeleteVolumeGroupSnapshot twice",
        "clean-up",
    ] {
        assert!(
            passed.iter().any(|p| p == name),
            "{name} did not pass: {passed:?}"
        );
    }
    assert_eq!(report["passed"].as_u64().unwrap() as usize, passed.len());
    assert_clean(&plugin.state_dir, &work);

    // The text report ends with the tally.
    let out = berth(&[
        "plugin",
        "check",
        &plugin.endpoint(),
        "--work-dir",
        &work.display().to_string(),
        modify[0],
        modify[1],
    ]);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    let last = stdout.lines().last().unwrap_or_default();
    assert_eq!(last, format!("{} passed, 0 failed, 0 skipped", passed.len()));

    // Which parameters a driver can change is its own: none named, none sent.
    let (ok, report) = check(&plugin, &work, &[]);
    assert!(ok, "{report:#}");
    let skipped = cases_with(&report, "skipped");
    assert_eq!(skipped.len(), 4, "{skipped:?}");
    assert!(
        skipped
            .iter()
            .all(|(n, why)| n.starts_with("ControllerModifyVolume") && why.contains("--mutable-parameter")),
        "{skipped:?}"
    );
    assert_clean(&plugin.state_dir, &work);
}

/// The Kubernetes CSI hostpath driver's own answers where the spec leaves
/// room (and one where it does not), as csi-sanity judges them: the one
/// rule broken fails, the rest pass or warn, and nothing is left behind.
#[test]
fn a_driver_answering_like_the_reference_one_fails_only_where_csi_sanity_does() {
    let dir = test_dir();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let plugin = PluginBuilder::new(dir.path(), "csi")
        .args(&["--topology", "zone=a", "--like-reference-driver"])
        .spawn();
    let (ok, report) = check(&plugin, &work, &[]);
    assert!(!ok, "a MUST was broken: {report:#}");
    let failed = cases_with(&report, "failed");
    assert_eq!(
        failed.iter().map(|c| c.0.as_str()).collect::<Vec<_>>(),
        ["NodeStageVolume, unknown volume"],
        "{report:#}"
    );
    let warned = cases_with(&report, "warning");
    assert_eq!(warned.len(), 1, "{report:#}");
    assert_eq!(warned[0].0, "ControllerGetVolume, unknown volume");
    assert!(warned[0].1.contains("abnormal"), "{}", warned[0].1);
    let case = |name: &str| {
        report["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no case {name}: {report:#}"))
    };
    assert_eq!(case("NodeStageVolume, unknown volume")["must"], true);
    assert_eq!(case("ControllerGetVolume, unknown volume")["must"], false);
    // Restored and cloned at the size the source has grown to, which this driver insists on.
    for name in [
        "CreateVolume from a snapshot",
        "CreateVolume from a volume",
        "clean-up",
    ] {
        assert_eq!(case(name)["verdict"], "passed", "{name}: {:#}", case(name));
    }
    assert_eq!(report["warnings"], 1);
    // What the driver staged though it should not have is unstaged again:
    // the staging path under the work directory goes with it.
    assert_clean(&plugin.state_dir, &work);
}

/// The sample plugin as a controller and a node process, started with these
/// flags on one state directory, checked through both endpoints: the
/// controller, the check's exit status and its report (nothing left behind).
fn check_split(
    dir: &Path,
    work: &Path,
    controller_flags: &[&str],
    node_flags: &[&str],
) -> (Plugin, bool, Value) {
    let controller = PluginBuilder::new(dir, "controller")
        .args(controller_flags)
        .spawn();
    let node = PluginBuilder::new(dir, "node")
        .state_dir(&controller.state_dir)
        .args(node_flags)
        .spawn();
    let node_endpoint = node.endpoint();
    let (ok, report) = check(
        &controller,
        work,
        &[
            "--node-endpoint",
            &node_endpoint,
            "--mutable-parameter",
            "iops=100",
        ],
    );
    assert_eq!(report["node_endpoint"], node_endpoint);
    assert_clean(&controller.state_dir, work);
    (controller, ok, report)
}

#[test]
fn a_split_deployment_passes_with_both_endpoints() {
    let dir = test_dir();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let (controller, ok, report) =
        check_split(dir.path(), &work, &["--mode", "controller"], &["--mode", "node"]);
    assert!(ok, "{report:#}");
    assert_eq!(report["skipped"], 0, "{report:#}");

    // The controller alone: node cases are skipped, saying what to give.
    let (ok, report) = check(&controller, &work, &[]);
    assert!(ok, "{report:#}");
    let skipped = cases_with(&report, "skipped");
    let stage = skipped
        .iter()
        .find(|(n, _)| n == "NodeStageVolume")
        .expect("NodeStageVolume skipped");
    assert!(stage.1.contains("--node-endpoint"), "{stage:?}");
}

/// The sample plugin split with `--node false` / `--controller false` is
/// the same process shape as `--mode controller` / `--mode node`: every
/// case gets the same verdict, and the node process reports the driver's
/// capabilities (before, it left CONTROLLER_SERVICE out, so a CO reading
/// them from the node skipped ControllerPublishVolume that the node needed).
#[test]
fn the_split_flags_pass_every_case_the_split_modes_pass() {
    let verdicts = |controller_flags: &[&str], node_flags: &[&str]| {
        let dir = test_dir();
        let work = dir.path().join("work");
        std::fs::create_dir(&work).unwrap();
        let (_, ok, report) = check_split(dir.path(), &work, controller_flags, node_flags);
        assert!(ok, "{controller_flags:?} / {node_flags:?}: {report:#}");
        report["cases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["name"].as_str().unwrap().to_string(), c["verdict"].clone()))
            .collect::<Vec<_>>()
    };
    let by_mode = verdicts(&["--mode", "controller"], &["--mode", "node"]);
    let by_flags = verdicts(&["--node", "false"], &["--controller", "false"]);
    assert_eq!(by_flags, by_mode);
    assert!(
        by_mode
            .iter()
            .any(|(name, verdict)| name == "node endpoint capabilities" && verdict == "passed"),
        "{by_mode:?}"
    );
}

#[test]
fn each_misbehaviour_fails_the_rule_it_breaks() {
    let cases: [(&str, &[&str], &str); 8] = [
        (
            "not-found-on-delete",
            &["DeleteVolume twice", "DeleteVolume, unknown volume"],
            "NOT_FOUND",
        ),
        (
            "ignores-size-conflict",
            &["CreateVolume, same name, larger size"],
            "answered OK",
        ),
        (
            "accepts-missing-name",
            &["CreateVolume without name"],
            "made volume",
        ),
        (
            "second-writer",
            &["NodePublishVolume, single writer at a second target"],
            "NodePublishVolume answered OK",
        ),
        (
            "accepts-unknown-node",
            &["ControllerPublishVolume, unknown node"],
            "ControllerPublishVolume answered OK",
        ),
        (
            "stages-without-capability",
            &["NodeStageVolume missing a field"],
            "without volume_capability",
        ),
        (
            "stats-for-unknown-volume",
            &["NodeGetVolumeStats, unknown volume"],
            "NodeGetVolumeStats answered OK",
        ),
        (
            "confirms-unknown-volume",
            &["ValidateVolumeCapabilities, unknown volume"],
            "answered OK",
        ),
    ];
    for (misbehaviour, failing, reason) in cases {
        let dir = test_dir();
        let (plugin, work, failed) = check_misbehaving(dir.path(), misbehaviour);
        let names: Vec<&str> = failed.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, failing, "{misbehaviour}");
        for (name, why) in &failed {
            assert!(why.contains(reason), "{misbehaviour}: {name}: {why}");
        }
        // Even the volume made without a name is removed again.
        assert_clean(&plugin.state_dir, &work);
    }
}

#[test]
fn a_plugin_that_breaks_identity_rules_fails_before_anything_is_made() {
    let dir = test_dir();
    let (plugin, work, failed) = check_misbehaving(dir.path(), "bad-name");
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].0, "plugin identity");
    assert!(failed[0].1.contains("bad_name.example.com"), "{failed:?}");
    assert_clean(&plugin.state_dir, &work);
}

#[test]
fn what_the_plugin_does_not_offer_is_skipped_with_the_capability_named() {
    let dir = test_dir();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let plugin = PluginBuilder::new(dir.path(), "csi")
        .args(&["--publish-unpublish", "false", "--stage-unstage", "false"])
        .args(&[
            "--disable",
            "CREATE_DELETE_SNAPSHOT",
            "--disable",
            "EXPAND_VOLUME",
            "--disable",
            "MODIFY_VOLUME",
        ])
        .spawn();
    let (ok, report) = check(&plugin, &work, &["--mutable-parameter", "tier=gold"]);
    assert!(ok, "{report:#}");
    let skipped = cases_with(&report, "skipped");
    let reason = |name: &str| {
        skipped
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("{name} not skipped: {skipped:?}"))
            .1
            .clone()
    };
    assert!(reason("ControllerPublishVolume").contains("PUBLISH_UNPUBLISH_VOLUME"));
    assert!(reason("NodeStageVolume").contains("STAGE_UNSTAGE_VOLUME"));
    assert!(reason("CreateSnapshot").contains("CREATE_DELETE_SNAPSHOT"));
    assert!(reason("ControllerExpandVolume").contains("EXPAND_VOLUME"));
    assert!(reason("ControllerModifyVolume").contains("MODIFY_VOLUME"));
    // Without staging, publishing on the node still runs.
    let passed: Vec<String> = cases_with(&report, "passed").into_iter().map(|c| c.0).collect();
    assert!(passed.iter().any(|p| p == "NodePublishVolume"), "{passed:?}");
    assert_clean(&plugin.state_dir, &work);
}

#[test]
fn secrets_reach_the_plugin_and_never_the_report() {
    let dir = test_dir();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let plugin = PluginBuilder::new(dir.path(), "csi")
        .args(&["--require-secret", "token=s3cr3t-value"])
        .spawn();

    let (ok, report) = check(&plugin, &work, &[]);
    assert!(!ok, "a plugin that needs secrets refuses a check without them");
    let failed = cases_with(&report, "failed");
    assert_eq!(failed[0].0, "CreateVolume", "{failed:?}");

    let secrets = dir.path().join("secrets");
    std::fs::write(&secrets, "token=s3cr3t-value\n").unwrap();
    set_mode(&secrets, 0o600);
    let (ok, report) = check(&plugin, &work, &["--secrets", &secrets.display().to_string()]);
    assert!(ok, "{report:#}");
    assert!(!report.to_string().contains("s3cr3t-value"));
    assert_clean(&plugin.state_dir, &work);

    set_mode(&secrets, 0o644);
    let out = berth(&[
        "plugin",
        "check",
        &plugin.endpoint(),
        "--secrets",
        &secrets.display().to_string(),
    ]);
    let (_, stderr) = texts(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("chmod 600"), "{stderr}");
}

#[test]
fn a_target_path_left_behind_fails_unpublish_and_is_named_by_the_clean_up() {
    let dir = test_dir();
    let (plugin, _work, failed) = check_misbehaving(dir.path(), "keeps-target-path");
    let names: Vec<&str> = failed.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["NodeUnpublishVolume", "clean-up"], "{failed:?}");
    assert!(
        failed[0].1.contains("left") && failed[0].1.contains("/target"),
        "{failed:?}"
    );
    // The check never removes what the plugin was to remove, but says so;
    // the volumes themselves are gone.
    assert!(failed[1].1.contains("directory"), "{failed:?}");
    for kind in ["volumes", "snapshots"] {
        let left = std::fs::read_dir(plugin.state_dir.join(kind)).map_or(0, |d| d.count());
        assert_eq!(left, 0, "{kind} left on the plugin");
    }
}
