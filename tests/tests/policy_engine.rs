//! The policy engine with real components: the sample guests decide, hostile
//! guests are contained with clear errors, reloads are atomic.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use berth::policy::builtin::Builtins;
use berth::policy::samples::{self, failure, pairs, volume};
use berth::policy::{
    Code, Decision, EngineOptions, GuestFailure, ModuleConfig, NamingOutcome, OnError, Operation,
    PlacementNode, Policies, PolicyEngine, PolicyError, PolicyModule, Purpose, RetryDecision, candidates,
};
use berth_tests::guest;

fn engine() -> Arc<PolicyEngine> {
    static ENGINE: OnceLock<Arc<PolicyEngine>> = OnceLock::new();
    ENGINE
        .get_or_init(|| Arc::new(PolicyEngine::new(EngineOptions::default()).expect("policy engine")))
        .clone()
}

fn config(guest_name: &str, settings: &[(&str, &str)]) -> ModuleConfig {
    let mut c = ModuleConfig::from_path(&guest(guest_name));
    c.settings = settings
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect::<BTreeMap<_, _>>();
    c
}

fn load(guest_name: &str, settings: &[(&str, &str)]) -> PolicyModule {
    PolicyModule::load(&engine(), config(guest_name, settings)).expect("module loads")
}

fn policies() -> Policies {
    Policies::new(engine(), Builtins::default())
}

fn node(name: &str, zone: &str, published: u64, max: Option<u64>) -> PlacementNode {
    let mut n = samples::node(name, &[("zone", zone)]);
    n.published_volumes = published;
    n.max_volumes = max;
    n
}

fn naming_with(guest_name: &str, settings: &[(&str, &str)], on_error: OnError) -> Policies {
    let p = policies();
    let mut c = config(guest_name, settings);
    c.on_error = on_error;
    p.load(c, &[Decision::Naming]).expect("loads");
    p
}

fn failure_of(result: Result<NamingOutcome, PolicyError>) -> GuestFailure {
    match result {
        Err(e) => {
            assert_eq!(e.decision, Decision::Naming);
            e.failure
        }
        Ok(other) => panic!("expected a failure, got {other:?}"),
    }
}

#[test]
fn the_sample_guests_export_what_they_decide() {
    assert_eq!(load("berth_naming_guest", &[]).decisions(), [Decision::Naming]);
    assert_eq!(
        load("berth_placement_guest", &[]).decisions(),
        [Decision::Placement]
    );
    assert_eq!(load("berth_retry_guest", &[]).decisions(), [Decision::Retry]);
    assert_eq!(load("berth_hostile_guest", &[]).decisions(), Decision::ALL);
}

#[test]
fn naming_guest_uses_its_settings() {
    let p = naming_with("berth_naming_guest", &[("prefix", "Team A")], OnError::Fail);
    let NamingOutcome::Named(name) = p.volume_name(volume("Postgres Data")).unwrap() else {
        panic!("refused")
    };
    assert!(name.starts_with("team-a-postgres-data-"), "{name}");
    assert_eq!(
        p.volume_name(volume("Postgres Data")).unwrap(),
        NamingOutcome::Named(name)
    );

    let refusing = naming_with("berth_naming_guest", &[("max-length", "500")], OnError::Builtin);
    match refusing.volume_name(volume("x")).unwrap() {
        NamingOutcome::Refused(reason) => assert!(reason.contains("max-length"), "{reason}"),
        other => panic!("a refusal is a decision, not a failure: {other:?}"),
    }
}

#[test]
fn placement_guest_filters_and_ranks_with_reasons() {
    let p = policies();
    p.load(config("berth_placement_guest", &[]), &[]).unwrap();
    let mut v = volume("data");
    v.requisite_topology = vec![pairs(&[("zone", "a")])];
    let nodes = [
        node("busy", "a", 7, Some(8)),
        node("idle", "a", 0, Some(8)),
        node("far", "b", 0, None),
    ];
    let verdicts = p.place(v, Purpose::Create, vec![], &candidates(&nodes)).unwrap();
    assert_eq!(verdicts.len(), 3);
    assert!(verdicts[0].eligible && verdicts[1].eligible);
    assert!(verdicts[1].score > verdicts[0].score);
    assert!(!verdicts[2].eligible);
    assert_eq!(verdicts[2].reason, "topology zone=b is outside zone=a");
}

#[test]
fn retry_guest_classifies_per_the_spec() {
    let p = policies();
    p.load(config("berth_retry_guest", &[("base-ms", "100")]), &[])
        .unwrap();
    assert_eq!(
        p.classify(failure(Operation::DeleteVolume, Code::NotFound, 1))
            .unwrap(),
        RetryDecision::Done
    );
    match p
        .classify(failure(Operation::CreateVolume, Code::Unavailable, 3))
        .unwrap()
    {
        RetryDecision::RetryAfter(ms) => assert!((360..=440).contains(&ms), "{ms}"),
        other => panic!("{other:?}"),
    }
    match p
        .classify(failure(Operation::CreateVolume, Code::InvalidArgument, 1))
        .unwrap()
    {
        RetryDecision::GiveUp(reason) => assert!(reason.contains("from the plugin"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn every_decision_gets_a_fresh_instance() {
    let p = naming_with("berth_hostile_guest", &[("behaviour", "stateful")], OnError::Fail);
    for _ in 0..3 {
        assert_eq!(
            p.volume_name(volume("v")).unwrap(),
            NamingOutcome::Named("call-0".into())
        );
    }
}

#[test]
fn an_infinite_loop_hits_the_deadline() {
    let p = naming_with("berth_hostile_guest", &[("behaviour", "loop")], OnError::Fail);
    let err = p.volume_name(volume("v")).unwrap_err();
    assert_eq!(err.failure, GuestFailure::Deadline(Duration::from_millis(100)));
    assert_eq!(err.module, "berth_hostile_guest");
    assert!(
        err.to_string().contains("ran past its deadline of 100ms"),
        "{err}"
    );
}

#[test]
fn a_memory_bomb_hits_the_memory_limit() {
    let p = naming_with(
        "berth_hostile_guest",
        &[("behaviour", "memory-bomb")],
        OnError::Fail,
    );
    assert_eq!(
        failure_of(p.volume_name(volume("v"))),
        GuestFailure::MemoryLimit { limit: 32 << 20 }
    );
}

#[test]
fn a_trap_reports_the_guest_panic_message() {
    let p = naming_with("berth_hostile_guest", &[("behaviour", "trap")], OnError::Fail);
    match failure_of(p.volume_name(volume("v"))) {
        GuestFailure::Trap(why) => assert!(why.contains("hostile guest trapped on purpose"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn huge_answers_are_refused() {
    let p = policies();
    p.load(
        config("berth_hostile_guest", &[("behaviour", "huge-answer")]),
        &[],
    )
    .unwrap();
    let too_large =
        |f: &GuestFailure| matches!(f, GuestFailure::AnswerTooLarge { limit, .. } if *limit == 1 << 20);
    assert!(too_large(&failure_of(p.volume_name(volume("v")))));
    let e = p
        .place(
            volume("v"),
            Purpose::Publish,
            vec![],
            &candidates(&[node("n", "a", 0, None)]),
        )
        .unwrap_err();
    assert!(too_large(&e.failure), "{e}");
    let e = p
        .classify(failure(Operation::CreateVolume, Code::Aborted, 1))
        .unwrap_err();
    assert!(too_large(&e.failure), "{e}");
}

#[test]
fn answers_that_break_the_contract_are_invalid() {
    let p = policies();
    p.load(
        config("berth_hostile_guest", &[("behaviour", "invalid-answer")]),
        &[],
    )
    .unwrap();
    match failure_of(p.volume_name(volume("v"))) {
        GuestFailure::InvalidAnswer(why) => assert!(why.contains("U+0007"), "{why}"),
        other => panic!("{other:?}"),
    }
    let nodes = [node("a", "a", 0, None), node("b", "a", 0, None)];
    let e = p
        .place(volume("v"), Purpose::Publish, vec![], &candidates(&nodes))
        .unwrap_err();
    assert_eq!(e.decision, Decision::Placement);
    assert!(
        matches!(&e.failure, GuestFailure::InvalidAnswer(w) if w.contains("1 verdicts for 2")),
        "{e}"
    );
    let e = p
        .classify(failure(Operation::CreateVolume, Code::Aborted, 1))
        .unwrap_err();
    assert!(
        matches!(&e.failure, GuestFailure::InvalidAnswer(w) if w.contains("more than a day")),
        "{e}"
    );
}

#[test]
fn wasi_grants_no_files_and_no_environment() {
    let p = naming_with(
        "berth_hostile_guest",
        &[("behaviour", "read-file")],
        OnError::Fail,
    );
    match p.volume_name(volume("v")).unwrap() {
        NamingOutcome::Refused(reason) => assert!(reason.starts_with("no file"), "{reason}"),
        other => panic!("the guest read a host file: {other:?}"),
    }
    let p = naming_with(
        "berth_hostile_guest",
        &[("behaviour", "environment")],
        OnError::Fail,
    );
    assert_eq!(
        p.volume_name(volume("v")).unwrap(),
        NamingOutcome::Named("env-0-args-0".into())
    );
}

#[test]
fn a_module_importing_the_network_is_refused_at_load() {
    let err = PolicyModule::load(&engine(), config("berth_forbidden_guest", &[]))
        .err()
        .expect("refused");
    let text = err.to_string();
    assert!(text.contains("wasi:sockets/"), "{text}");
    assert!(text.contains("may not use the network"), "{text}");
}

#[test]
fn modules_that_serve_nothing_or_another_version_are_refused() {
    let dir = berth_tests::test_dir();
    let cases = [
        ("empty.wat", "(component)", "exports no policy decision"),
        (
            "future.wat",
            r#"(component (instance $i) (export "berth:policy/naming@0.3.0" (instance $i)))"#,
            "exports berth:policy/naming@0.3.0, which this host cannot use: it implements berth:policy@0.1.0 and berth:policy@0.2.0",
        ),
        (
            "mixed.wat",
            r#"(component (instance $i) (export "berth:policy/naming@0.1.0" (instance $i)) (export "berth:policy/retry@0.2.0" (instance $i)))"#,
            "one module implements one release",
        ),
        ("core.wasm", "(module)", "this is a core module"),
        (
            "garbage.wasm",
            "not wasm at all",
            "is not a WebAssembly component",
        ),
    ];
    for (file, text, expected) in cases {
        let path = dir.path().join(file);
        let bytes = if file == "core.wasm" {
            wat::parse_str(text).unwrap()
        } else {
            text.as_bytes().to_vec()
        };
        std::fs::write(&path, bytes).unwrap();
        let err = PolicyModule::load(&engine(), ModuleConfig::from_path(&path))
            .err()
            .expect("refused");
        assert!(err.to_string().contains(expected), "{file}: {err}");
    }
    let missing = ModuleConfig::from_path(&dir.path().join("absent.wasm"));
    let err = PolicyModule::load(&engine(), missing).err().expect("refused");
    assert!(err.to_string().contains("absent.wasm"), "{err}");
}

#[test]
fn on_error_builtin_falls_back_and_counts() {
    let p = naming_with("berth_hostile_guest", &[("behaviour", "trap")], OnError::Builtin);
    let NamingOutcome::Named(name) = p.volume_name(volume("v")).unwrap() else {
        panic!()
    };
    assert_eq!(name, Builtins::default().naming.volume_name(&volume("v")));
    let stats = &p.stats()[0];
    assert_eq!((stats.calls, stats.failures, stats.fallbacks), (1, 1, 1));
}

#[test]
fn a_bad_reload_keeps_the_module_in_place() {
    let p = naming_with("berth_naming_guest", &[], OnError::Fail);
    let before = p.volume_name(volume("keep")).unwrap();
    assert!(
        p.load(config("berth_forbidden_guest", &[]), &[Decision::Naming])
            .is_err()
    );
    let err = p
        .load(config("berth_retry_guest", &[]), &[Decision::Naming])
        .err()
        .expect("does not serve naming");
    assert_eq!(err.failure, GuestFailure::NotServed);
    assert_eq!(p.module(Decision::Naming).unwrap().name(), "berth_naming_guest");
    assert_eq!(p.volume_name(volume("keep")).unwrap(), before);

    p.load(config("berth_hostile_guest", &[]), &[Decision::Naming])
        .unwrap();
    assert_eq!(
        p.volume_name(volume("keep")).unwrap(),
        NamingOutcome::Named("ok-keep".into())
    );
}

#[test]
fn limits_are_checked_at_load() {
    let mut c = config("berth_naming_guest", &[]);
    c.limits.memory_bytes = 1 << 40;
    let err = PolicyModule::load(&engine(), c).err().expect("refused");
    assert!(err.to_string().contains("above the engine's maximum"), "{err}");
}

#[test]
fn without_modules_the_builtins_decide() {
    let p = policies();
    assert!(
        matches!(p.volume_name(volume("v")).unwrap(), NamingOutcome::Named(n) if n.starts_with("berth-"))
    );
    assert_eq!(
        p.classify(failure(Operation::NodeUnpublishVolume, Code::NotFound, 1))
            .unwrap(),
        RetryDecision::Done
    );
    assert!(p.stats().is_empty());
}

/// WASI's synchronous streams block on tokio; asking for a decision from async
/// code must still give an error, never a host panic.
#[test]
fn a_trapping_guest_called_from_async_code_is_still_contained() {
    let check = || {
        let p = naming_with("berth_hostile_guest", &[("behaviour", "trap")], OnError::Fail);
        match failure_of(p.volume_name(volume("v"))) {
            GuestFailure::Trap(why) => assert!(why.contains("trapped on purpose"), "{why}"),
            other => panic!("{other:?}"),
        }
    };
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap()
        .block_on(async { check() });
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(async { check() });
}
