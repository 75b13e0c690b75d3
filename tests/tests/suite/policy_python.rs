//! Python policy modules, built with componentize-py by `cargo xtask guests`:
//! the samples pass the Rust samples' case files through `berth policy test`,
//! and a hostile Python guest is contained with typed errors. A Python
//! component has no WASI at all (every WASI import is a trapping stub), so
//! reaching for the network, a file or a program traps, and its environment
//! is the empty one it was built with.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use berth::policy::builtin::Builtins;
use berth::policy::samples::{failure, node, pairs, volume};
use berth::policy::{
    Code, Decision, EngineOptions, GuestFailure, ModuleConfig, NamingOutcome, Operation, Policies,
    PolicyEngine, Purpose, RetryDecision, candidates,
};
use berth_tests::interpreted::{built, engine, samples_pass_the_case_files};
use berth_tests::{guest, texts};

fn python_guest(name: &str) -> PathBuf {
    built("python", name)
}

fn hostile(behaviour: &str) -> Policies {
    berth_tests::interpreted::hostile("python", &python_guest("berth_hostile_py"), behaviour)
}

fn naming_failure(p: &Policies) -> GuestFailure {
    berth_tests::interpreted::naming_failure(p, "berth_hostile_py")
}

#[test]
fn the_python_samples_pass_the_rust_samples_case_files() {
    samples_pass_the_case_files("python", "py");
}

#[test]
fn a_python_module_imports_nothing_but_berths_types_and_decides_beside_rust_ones() {
    let p = Policies::new(engine("python"), Builtins::default());
    p.load(ModuleConfig::from_path(&python_guest("berth_placement_py")), &[])
        .unwrap();
    p.load(ModuleConfig::from_path(&guest("berth_naming_guest")), &[])
        .unwrap();
    let py = p.module(Decision::Placement).unwrap();
    assert_eq!(py.imports(), ["berth:policy/types@0.4.0"]);
    assert!(py.footprint().core_instances > 8, "{:?}", py.footprint());
    let rust = p.module(Decision::Naming).unwrap();
    assert!(rust.footprint().core_instances < py.footprint().core_instances);
    // Many decisions of both at once: the pools admit each within its share.
    let p = Arc::new(p);
    berth_tests::block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..24 {
            let p = p.clone();
            tasks.spawn(async move {
                let nodes = [node("a", &[("zone", "a")]), node("b", &[("zone", "b")])];
                let mut v = volume("data");
                v.requisite_topology = vec![pairs(&[("zone", "b")])];
                if i % 2 == 0 {
                    let verdicts = p
                        .place(v, Purpose::Create, vec![], &candidates(&nodes))
                        .await
                        .unwrap();
                    assert_eq!(berth::policy::ranked(&verdicts), vec![1]);
                } else {
                    let named = p.volume_name(v).await.unwrap();
                    assert!(
                        matches!(&named, NamingOutcome::Named(n) if n.starts_with("pv-data-")),
                        "{named:?}"
                    );
                }
            });
        }
        while let Some(done) = tasks.join_next().await {
            done.expect("a decision task");
        }
    });
}

#[test]
fn a_python_guest_that_loops_hits_the_deadline() {
    assert_eq!(
        naming_failure(&hostile("loop")),
        GuestFailure::Deadline(Duration::from_millis(100))
    );
}

#[test]
fn a_python_guest_that_allocates_without_bound_hits_the_memory_limit() {
    match naming_failure(&hostile("memory-bomb")) {
        GuestFailure::MemoryLimit { limit } => assert_eq!(limit, 32 << 20),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_python_guest_reaching_for_the_host_traps() {
    for behaviour in ["network", "read-file", "subprocess", "raise"] {
        match naming_failure(&hostile(behaviour)) {
            GuestFailure::Trap(_) => {}
            other => panic!("{behaviour}: {other:?}"),
        }
    }
    // The environment a Python component sees was fixed, empty, when it was built.
    let env = berth_tests::block_on(hostile("environment").volume_name(volume("v"))).unwrap();
    assert_eq!(env, NamingOutcome::Named("env-0-v".into()));
    // The same module, asked to behave, answers: the traps were its reaching.
    let p = hostile("");
    let named = berth_tests::block_on(p.volume_name(volume("v"))).unwrap();
    assert_eq!(named, NamingOutcome::Named("ok-v".into()));
    let retry = berth_tests::block_on(p.classify(failure(Operation::CreateVolume, Code::Unavailable, 1)));
    assert_eq!(retry.unwrap(), RetryDecision::RetryAfter(1000));
}

/// A Python module (a dozen Rust guests' share of the pools) shadows on the
/// shadow engine as a Rust one does, beside the live Rust module.
#[test]
fn a_python_module_shadows_the_rust_sample_and_agrees() {
    let engine = Arc::new(PolicyEngine::new(EngineOptions::default()).unwrap());
    let p = Policies::new(engine, Builtins::default());
    let live = ModuleConfig::from_path(&guest("berth_naming_guest"));
    let shadow = ModuleConfig::from_path(&python_guest("berth_naming_py"));
    p.replace_set(
        &[(live, vec![Decision::Naming])],
        &[(shadow, vec![Decision::Naming])],
    )
    .unwrap();
    for name in ["a", "b", "c"] {
        berth_tests::block_on(p.volume_name(volume(name))).unwrap();
    }
    let counts = || p.shadows().unwrap().counts();
    berth_tests::wait_for(
        "three shadow decisions",
        Duration::from_secs(30),
        || {
            counts()
                .first()
                .is_some_and(|c| c.same + c.different + c.failed + c.dropped == 3)
        },
        || format!("{:?}", counts()),
    );
    let c = &counts()[0];
    assert_eq!((c.same, c.different, c.failed, c.dropped), (3, 0, 0, 0), "{c:?}");
    assert_eq!(c.module, "berth_naming_py");
}

/// `policy test` of a Python module compiles it once, says so, and keeps
/// it: the next run loads it from the compiled-module cache.
#[test]
fn policy_test_compiles_a_python_module_once() {
    let home = berth_tests::test_dir();
    let module = python_guest("berth_naming_py");
    let cases = Path::new(env!("CARGO_MANIFEST_DIR")).join("../guests/naming/cases.toml");
    let run = || {
        let out = berth_tests::berth_with(
            &[("HOME", home.path().to_str().unwrap()), ("XDG_CACHE_HOME", "")],
            &[
                "policy",
                "test",
                "--deadline",
                "5s",
                module.to_str().unwrap(),
                cases.to_str().unwrap(),
            ],
        );
        let (stdout, stderr) = texts(&out);
        assert!(out.status.success(), "{stdout}{stderr}");
        stderr
    };
    let first = run();
    assert!(first.contains("compiling") && first.contains("once"), "{first}");
    let kept = home.path().join(".cache/berth/compiled");
    let entries = std::fs::read_dir(&kept).map(|d| d.count()).unwrap_or(0);
    assert!(entries > 0, "nothing kept in {}", kept.display());
    let second = run();
    assert!(!second.contains("compiling"), "compiled again: {second}");
}
