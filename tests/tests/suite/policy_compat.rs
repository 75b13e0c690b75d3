//! Policy modules outlive releases: the sample guests as built for
//! `berth:policy@0.1.0` and `0.2.0` (kept as fixtures) load and decide as
//! they did (0.1.0's placement through records converted to and from the
//! columns 0.2.0 brought), and are never asked about the operations later
//! releases added.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use berth::policy::builtin::Builtins;
use berth::policy::samples::{failure, node, pairs, volume};
use berth::policy::{
    Code, Contract, Decision, EngineOptions, Health, ModuleConfig, NamingOutcome, Operation, PlacementNode,
    Policies, PolicyEngine, PolicyModule, Purpose, RetryDecision, candidates, ranked,
};
use berth_tests::{Cluster, ClusterSpec, guest};

fn fixture_dir() -> PathBuf {
    release_dir("0.1.0")
}

fn release_dir(version: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("fixtures/guests-{version}"))
}

/// A sample guest as built for 0.1.0.
fn fixture(name: &str) -> PathBuf {
    fixture_dir().join(format!("{name}.wasm"))
}

/// A sample guest as built for 0.2.0.
fn fixture_0_2(name: &str) -> PathBuf {
    release_dir("0.2.0").join(format!("{name}.wasm"))
}

/// A sample guest as built for 0.3.0.
fn fixture_0_3(name: &str) -> PathBuf {
    release_dir("0.3.0").join(format!("{name}.wasm"))
}

fn engine() -> Arc<PolicyEngine> {
    Arc::new(PolicyEngine::new(EngineOptions::default()).expect("policy engine"))
}

fn retry_policies(path: &Path) -> Policies {
    let p = Policies::new(engine(), Builtins::default());
    let mut c = ModuleConfig::from_path(path);
    c.settings = [("max-attempts".to_string(), "8".to_string())].into();
    p.load(c, &[Decision::Retry]).expect("loads");
    p
}

fn calls(p: &Policies) -> u64 {
    p.stats()[0].calls
}

#[test]
fn modules_built_for_earlier_releases_load_and_say_so() {
    let e = engine();
    for name in ["berth_naming_guest", "berth_placement_guest", "berth_retry_guest"] {
        let new = PolicyModule::load(&e, ModuleConfig::from_path(&guest(name))).expect("0.4.0 loads");
        assert_eq!(new.contract(), Contract::V0_4, "{name}");
        for (path, contract) in [
            (fixture(name), Contract::V0_1),
            (fixture_0_2(name), Contract::V0_2),
            (fixture_0_3(name), Contract::V0_3),
        ] {
            let old =
                PolicyModule::load(&e, ModuleConfig::from_path(&path)).expect("an earlier release loads");
            assert_eq!(old.contract(), contract, "{name}");
            assert_eq!(old.decisions(), new.decisions(), "{name}");
        }
    }
}

#[tokio::test]
async fn a_0_1_0_naming_module_names_as_the_current_one_does() {
    let e = engine();
    let mut names: Vec<NamingOutcome> = Vec::new();
    for path in [
        fixture("berth_naming_guest"),
        fixture_0_2("berth_naming_guest"),
        guest("berth_naming_guest"),
        fixture_0_3("berth_naming_guest"),
    ] {
        let p = Policies::new(e.clone(), Builtins::default());
        let mut c = ModuleConfig::from_path(&path);
        c.settings = [("prefix".to_string(), "team".to_string())].into();
        p.load(c, &[Decision::Naming]).unwrap();
        let mut v = volume("Data Volume 1");
        v.labels = pairs(&[("tier", "gold")]);
        names.push(p.volume_name(v).await.unwrap());
    }
    assert!(
        matches!(&names[0], NamingOutcome::Named(n) if n.starts_with("team")),
        "{names:?}"
    );
    assert_eq!(names[0], names[2]);
    assert_eq!(names[1], names[2]);
    assert_eq!(names[3], names[2], "a 0.3.0 module names as a 0.4.0 one");
}

/// A 0.1.0 placement module takes one record per node and gives one verdict
/// per node; Berth converts both ways, and it decides as the current one does.
#[tokio::test]
async fn a_0_1_0_placement_module_places_as_the_current_one_does() {
    let e = engine();
    let mut v = volume("data");
    v.requisite_topology = vec![pairs(&[("zone", "a")])];
    v.preferred_topology = vec![pairs(&[("zone", "a"), ("rack", "2")])];
    v.labels = pairs(&[("node-selector/disk", "ssd")]);
    let mut nodes: Vec<PlacementNode> = (0..12)
        .map(|i| {
            let zone = if i % 3 == 0 { "b" } else { "a" };
            let mut n = node(
                &format!("n{i}"),
                &[("zone", zone), ("rack", &(i % 4).to_string())],
            );
            n.labels = pairs(&[("disk", if i % 5 == 0 { "hdd" } else { "ssd" })]);
            n.max_volumes = Some(4);
            n.published_volumes = i % 6;
            n
        })
        .collect();
    nodes[7].health = Health::Unhealthy;
    let mut answers = Vec::new();
    for path in [
        fixture("berth_placement_guest"),
        fixture_0_2("berth_placement_guest"),
        guest("berth_placement_guest"),
    ] {
        let p = Policies::new(e.clone(), Builtins::default());
        p.load(ModuleConfig::from_path(&path), &[Decision::Placement])
            .unwrap();
        answers.push(
            p.place(v.clone(), Purpose::Create, vec![], &candidates(&nodes))
                .await
                .unwrap(),
        );
    }
    let (old, new) = (&answers[0], &answers[2]);
    assert_eq!(answers[1], answers[2], "0.2.0 and 0.3.0 place alike");
    assert_eq!(ranked(old), ranked(new));
    assert!(!ranked(new).is_empty() && ranked(new).len() < nodes.len());
    for i in 0..nodes.len() {
        assert_eq!(old.reason(i), new.reason(i), "node {i}");
        if old.is_eligible(i) {
            assert_eq!(old.scores[i], new.scores[i], "node {i}");
        }
    }
}

#[tokio::test]
async fn a_0_1_0_retry_module_classifies_the_operations_it_knows() {
    let p = retry_policies(&fixture("berth_retry_guest"));
    let d = p
        .classify(failure(Operation::NodeUnpublishVolume, Code::NotFound, 1))
        .await
        .unwrap();
    assert_eq!(d, RetryDecision::Done);
    let d = p
        .classify(failure(Operation::CreateVolume, Code::InvalidArgument, 1))
        .await
        .unwrap();
    // The sample guest's wording, not the built-in policy's.
    assert!(
        matches!(&d, RetryDecision::GiveUp(why) if why.starts_with("needs an operator: CreateVolume")),
        "{d:?}"
    );
    assert_eq!(calls(&p), 2);
}

#[tokio::test]
async fn a_0_1_0_retry_module_is_not_asked_about_operations_added_later() {
    let p = retry_policies(&fixture("berth_retry_guest"));
    for op in [
        Operation::ControllerExpandVolume,
        Operation::NodeExpandVolume,
        Operation::CreateSnapshot,
        Operation::DeleteSnapshot,
    ] {
        let d = p.classify(failure(op, Code::InvalidArgument, 1)).await.unwrap();
        // The built-in policy's wording.
        assert!(
            matches!(&d, RetryDecision::GiveUp(why) if why.starts_with("INVALID_ARGUMENT needs an operator")),
            "{op:?}: {d:?}"
        );
    }
    assert_eq!(
        p.classify(failure(Operation::DeleteSnapshot, Code::NotFound, 1))
            .await
            .unwrap(),
        RetryDecision::Done
    );
    assert_eq!(calls(&p), 0, "the module was asked");
    assert_eq!(p.stats()[0].failures, 0);
}

/// The operations 0.3.0 added.
const ADDED_IN_0_3: [Operation; 3] = [
    Operation::ControllerModifyVolume,
    Operation::CreateVolumeGroupSnapshot,
    Operation::DeleteVolumeGroupSnapshot,
];

#[tokio::test]
async fn a_0_2_0_retry_module_classifies_what_it_knows_and_only_that() {
    let p = retry_policies(&fixture_0_2("berth_retry_guest"));
    let d = p
        .classify(failure(Operation::CreateSnapshot, Code::InvalidArgument, 1))
        .await
        .unwrap();
    // The sample guest's wording, not the built-in policy's.
    assert!(
        matches!(&d, RetryDecision::GiveUp(why) if why.starts_with("needs an operator: CreateSnapshot")),
        "{d:?}"
    );
    assert_eq!(calls(&p), 1);
    for op in ADDED_IN_0_3 {
        let d = p.classify(failure(op, Code::InvalidArgument, 1)).await.unwrap();
        assert!(
            matches!(&d, RetryDecision::GiveUp(why) if why.starts_with("INVALID_ARGUMENT needs an operator")),
            "{op:?}: {d:?}"
        );
    }
    assert_eq!(
        p.classify(failure(Operation::DeleteVolumeGroupSnapshot, Code::NotFound, 1))
            .await
            .unwrap(),
        RetryDecision::Done
    );
    assert_eq!(
        calls(&p),
        1,
        "the module was asked about an operation it cannot name"
    );
    assert_eq!(p.stats()[0].failures, 0);
}

#[tokio::test]
async fn a_current_retry_module_is_asked_about_every_operation() {
    let p = retry_policies(&guest("berth_retry_guest"));
    let d = p
        .classify(failure(Operation::CreateSnapshot, Code::InvalidArgument, 1))
        .await
        .unwrap();
    assert!(
        matches!(&d, RetryDecision::GiveUp(why) if why.starts_with("needs an operator: CreateSnapshot")),
        "{d:?}"
    );
    for op in ADDED_IN_0_3 {
        let d = p.classify(failure(op, Code::InvalidArgument, 1)).await.unwrap();
        assert!(
            matches!(&d, RetryDecision::GiveUp(why) if why.starts_with(&format!("needs an operator: {}", op.name()))),
            "{op:?}: {d:?}"
        );
    }
    assert_eq!(
        p.classify(failure(Operation::DeleteVolumeGroupSnapshot, Code::NotFound, 1))
            .await
            .unwrap(),
        RetryDecision::Done
    );
    assert_eq!(calls(&p), 5);
}

#[test]
fn policy_check_names_the_release_a_module_was_built_for() {
    let out = berth_tests::berth(&["policy", "check", fixture("berth_retry_guest").to_str().unwrap()]);
    let (stdout, stderr) = berth_tests::texts(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("berth:policy@0.1.0"), "{stdout}");
}

#[test]
fn a_cluster_runs_on_the_0_1_0_modules() {
    let dir = fixture_dir();
    let c = Cluster::start(ClusterSpec {
        guest_dir: Some(&dir),
        // Failures for the 0.1.0 retry module to classify.
        plugin_args: vec![
            "--fault",
            "UNAVAILABLE=0.3",
            "--fault-calls",
            "CreateVolume,ControllerPublishVolume,NodeStageVolume",
            "--seed",
            "7",
        ],
        ..ClusterSpec::default()
    });
    for name in ["a", "b", "c"] {
        c.ok(&["volume", "create", name, "--plugin", "hostpath", "--wait"]);
        c.ok(&["volume", "publish", name, "--wait"]);
    }
    assert!(c.log().contains("step failed"), "no failure was classified");
    let status = c.ok(&["status"]);
    assert!(status.contains("berth_retry_guest"), "{status}");
    for name in ["a", "b", "c"] {
        c.ok(&["volume", "delete", "--force", name, "--wait"]);
    }
    assert_eq!(c.plugin_volumes(), 0);
}
