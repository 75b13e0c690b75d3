//! The policy engine with real components: the sample guests decide, hostile
//! guests are contained with clear errors, reloads are atomic.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use berth::policy::builtin::Builtins;
use berth::policy::samples::{self, failure, pairs, volume};
use berth::policy::{
    AnswerError, Code, Decision, EngineOptions, GuestFailure, ModuleConfig, NamingOutcome, OnError,
    Operation, PlacementNode, Policies, PolicyEngine, PolicyError, PolicyModule, Purpose, RetryDecision,
    candidates,
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

#[tokio::test]
async fn naming_guest_uses_its_settings() {
    let p = naming_with("berth_naming_guest", &[("prefix", "Team A")], OnError::Fail);
    let NamingOutcome::Named(name) = p.volume_name(volume("Postgres Data")).await.unwrap() else {
        panic!("refused")
    };
    assert!(name.starts_with("team-a-postgres-data-"), "{name}");
    assert_eq!(
        p.volume_name(volume("Postgres Data")).await.unwrap(),
        NamingOutcome::Named(name)
    );

    let refusing = naming_with("berth_naming_guest", &[("max-length", "500")], OnError::Builtin);
    match refusing.volume_name(volume("x")).await.unwrap() {
        NamingOutcome::Refused(reason) => assert!(reason.contains("max-length"), "{reason}"),
        other => panic!("a refusal is a decision, not a failure: {other:?}"),
    }
}

#[tokio::test]
async fn placement_guest_filters_and_ranks_with_reasons() {
    let p = policies();
    p.load(config("berth_placement_guest", &[]), &[]).unwrap();
    let mut v = volume("data");
    v.requisite_topology = vec![pairs(&[("zone", "a")])];
    let nodes = [
        node("busy", "a", 7, Some(8)),
        node("idle", "a", 0, Some(8)),
        node("far", "b", 0, None),
    ];
    let verdicts = p
        .place(v, Purpose::Create, vec![], &candidates(&nodes))
        .await
        .unwrap();
    assert_eq!(verdicts.len(), 3);
    assert!(verdicts.is_eligible(0) && verdicts.is_eligible(1));
    assert!(verdicts.scores[1] > verdicts.scores[0]);
    assert_eq!(verdicts.reason(2), Some("topology zone=b is outside zone=a"));
}

#[tokio::test]
async fn retry_guest_classifies_per_the_spec() {
    let p = policies();
    p.load(config("berth_retry_guest", &[("base-ms", "100")]), &[])
        .unwrap();
    assert_eq!(
        p.classify(failure(Operation::DeleteVolume, Code::NotFound, 1))
            .await
            .unwrap(),
        RetryDecision::Done
    );
    match p
        .classify(failure(Operation::CreateVolume, Code::Unavailable, 3))
        .await
        .unwrap()
    {
        RetryDecision::RetryAfter(ms) => assert!((360..=440).contains(&ms), "{ms}"),
        other => panic!("{other:?}"),
    }
    match p
        .classify(failure(Operation::CreateVolume, Code::InvalidArgument, 1))
        .await
        .unwrap()
    {
        RetryDecision::GiveUp(reason) => assert!(reason.contains("from the plugin"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn every_decision_gets_a_fresh_instance() {
    let p = naming_with("berth_hostile_guest", &[("behaviour", "stateful")], OnError::Fail);
    for _ in 0..3 {
        assert_eq!(
            p.volume_name(volume("v")).await.unwrap(),
            NamingOutcome::Named("call-0".into())
        );
    }
}

/// Waits until `module` has `n` instances made ahead of need.
async fn parked(module: &PolicyModule, n: usize) {
    for _ in 0..2_000 {
        if module.warm_instances() == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{} instances parked, not {n}", module.warm_instances());
}

/// An instance made ahead of need has run nothing but its instantiation, and
/// its deadline starts when a decision takes it: one parked for longer than
/// the deadline still decides, and a loop in one is still stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_made_ahead_is_fresh_and_its_deadline_starts_when_taken() {
    use std::sync::atomic::Ordering::Relaxed;
    let engine = engine();
    let want = EngineOptions::default().warm_instances as usize;
    let stateful = load("berth_hostile_guest", &[("behaviour", "stateful")]);
    let name = |answer: Result<Result<String, String>, PolicyError>| answer.unwrap().unwrap();
    let request = |module: &PolicyModule, v| berth::policy::NamingRequest {
        volume: volume(v),
        settings: module.settings().to_vec(),
    };
    // Loading checks each export in an instance, some of them made ahead:
    // count the decisions' own from here.
    let made_ahead = |module: &PolicyModule| module.counters.made_ahead.load(Relaxed);
    let stateful_request = |v| request(&stateful, v);
    parked(&stateful, want).await;
    // Parked past the module's deadline of 100 ms.
    tokio::time::sleep(Duration::from_millis(150)).await;
    for v in ["a", "b", "c"] {
        let before = made_ahead(&stateful);
        assert_eq!(
            name(stateful.volume_name(&engine, &stateful_request(v)).await),
            "call-0"
        );
        assert_eq!(
            made_ahead(&stateful),
            before + 1,
            "{v} ran in an instance made ahead"
        );
        parked(&stateful, want).await;
    }

    let looping = load("berth_hostile_guest", &[("behaviour", "loop")]);
    parked(&looping, want).await;
    let before = made_ahead(&looping);
    let err = looping
        .volume_name(&engine, &request(&looping, "e"))
        .await
        .unwrap_err();
    assert_eq!(err.failure, GuestFailure::Deadline(Duration::from_millis(100)));
    assert_eq!(made_ahead(&looping), before + 1);
}

/// With `warm_instances = 0` every decision instantiates on its own path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_instances_made_ahead_none_are_parked() {
    let engine = PolicyEngine::new(EngineOptions {
        warm_instances: 0,
        ..EngineOptions::default()
    })
    .unwrap();
    let module = PolicyModule::load(
        &engine,
        config("berth_hostile_guest", &[("behaviour", "stateful")]),
    )
    .unwrap();
    let request = berth::policy::NamingRequest {
        volume: volume("a"),
        settings: module.settings().to_vec(),
    };
    for _ in 0..3 {
        assert_eq!(
            module.volume_name(&engine, &request).await.unwrap().unwrap(),
            "call-0"
        );
    }
    assert_eq!(module.warm_instances(), 0);
    assert_eq!(
        module
            .counters
            .made_ahead
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}

#[tokio::test]
async fn an_infinite_loop_hits_the_deadline() {
    let p = naming_with("berth_hostile_guest", &[("behaviour", "loop")], OnError::Fail);
    let err = p.volume_name(volume("v")).await.unwrap_err();
    assert_eq!(err.failure, GuestFailure::Deadline(Duration::from_millis(100)));
    assert_eq!(err.module, "berth_hostile_guest");
    assert!(
        err.to_string().contains("ran past its deadline of 100ms"),
        "{err}"
    );
}

/// A guest runs on its caller's task and yields at every epoch tick it runs
/// past: on a single-threaded runtime, other tasks go on while it loops.
#[test]
fn a_looping_guest_does_not_hold_the_thread() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    runtime.block_on(async {
        let p = naming_with("berth_hostile_guest", &[("behaviour", "loop")], OnError::Fail);
        let ticks = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let counter = ticks.clone();
        let other = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(5)).await;
                counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        });
        let err = p.volume_name(volume("v")).await.unwrap_err();
        assert_eq!(err.failure, GuestFailure::Deadline(Duration::from_millis(100)));
        let ran = ticks.load(std::sync::atomic::Ordering::Relaxed);
        assert!(ran >= 2, "the other task ran {ran} times while the guest looped");
        other.abort();
    });
}

#[tokio::test]
async fn a_memory_bomb_hits_the_memory_limit() {
    let p = naming_with(
        "berth_hostile_guest",
        &[("behaviour", "memory-bomb")],
        OnError::Fail,
    );
    assert_eq!(
        failure_of(p.volume_name(volume("v")).await),
        GuestFailure::MemoryLimit { limit: 32 << 20 }
    );
}

#[tokio::test]
async fn a_trap_reports_the_guest_panic_message() {
    let p = naming_with("berth_hostile_guest", &[("behaviour", "trap")], OnError::Fail);
    match failure_of(p.volume_name(volume("v")).await) {
        GuestFailure::Trap(why) => assert!(why.contains("hostile guest trapped on purpose"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn huge_answers_are_refused() {
    let p = policies();
    p.load(
        config("berth_hostile_guest", &[("behaviour", "huge-answer")]),
        &[],
    )
    .unwrap();
    let too_large =
        |f: &GuestFailure| matches!(f, GuestFailure::AnswerTooLarge { limit, .. } if *limit == 1 << 20);
    assert!(too_large(&failure_of(p.volume_name(volume("v")).await)));
    let e = p
        .place(
            volume("v"),
            Purpose::Publish,
            vec![],
            &candidates(&[node("n", "a", 0, None)]),
        )
        .await
        .unwrap_err();
    assert!(too_large(&e.failure), "{e}");
    let e = p
        .classify(failure(Operation::CreateVolume, Code::Aborted, 1))
        .await
        .unwrap_err();
    assert!(too_large(&e.failure), "{e}");
}

#[tokio::test]
async fn answers_that_break_the_contract_are_invalid() {
    let p = policies();
    p.load(
        config("berth_hostile_guest", &[("behaviour", "invalid-answer")]),
        &[],
    )
    .unwrap();
    match failure_of(p.volume_name(volume("v")).await) {
        GuestFailure::InvalidAnswer(why) => assert!(why.to_string().contains("U+0007"), "{why}"),
        other => panic!("{other:?}"),
    }
    let nodes = [node("a", "a", 0, None), node("b", "a", 0, None)];
    let e = p
        .place(volume("v"), Purpose::Publish, vec![], &candidates(&nodes))
        .await
        .unwrap_err();
    assert_eq!(e.decision, Decision::Placement);
    assert!(
        matches!(
            &e.failure,
            GuestFailure::InvalidAnswer(AnswerError::Verdicts {
                refusals: 1,
                scores: 1,
                candidates: 2
            })
        ),
        "{e}"
    );
    let e = p
        .classify(failure(Operation::CreateVolume, Code::Aborted, 1))
        .await
        .unwrap_err();
    assert!(
        matches!(&e.failure, GuestFailure::InvalidAnswer(AnswerError::LongDelay(_))),
        "{e}"
    );
}

#[tokio::test]
async fn wasi_grants_no_files_and_no_environment() {
    let p = naming_with(
        "berth_hostile_guest",
        &[("behaviour", "read-file")],
        OnError::Fail,
    );
    match p.volume_name(volume("v")).await.unwrap() {
        NamingOutcome::Refused(reason) => assert!(reason.starts_with("no file"), "{reason}"),
        other => panic!("the guest read a host file: {other:?}"),
    }
    let p = naming_with(
        "berth_hostile_guest",
        &[("behaviour", "environment")],
        OnError::Fail,
    );
    assert_eq!(
        p.volume_name(volume("v")).await.unwrap(),
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
            r#"(component (instance $i) (export "berth:policy/naming@0.5.0" (instance $i)))"#,
            "exports berth:policy/naming@0.5.0, which this host cannot use: it implements berth:policy@0.1.0, berth:policy@0.2.0, berth:policy@0.3.0 and berth:policy@0.4.0",
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

#[tokio::test]
async fn on_error_builtin_falls_back_and_counts() {
    let p = naming_with("berth_hostile_guest", &[("behaviour", "trap")], OnError::Builtin);
    let NamingOutcome::Named(name) = p.volume_name(volume("v")).await.unwrap() else {
        panic!()
    };
    assert_eq!(name, Builtins::default().naming.volume_name(&volume("v")));
    let stats = &p.stats()[0];
    assert_eq!((stats.calls, stats.failures, stats.fallbacks), (1, 1, 1));
}

#[tokio::test]
async fn a_bad_reload_keeps_the_module_in_place() {
    let p = naming_with("berth_naming_guest", &[], OnError::Fail);
    let before = p.volume_name(volume("keep")).await.unwrap();
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
    assert_eq!(p.volume_name(volume("keep")).await.unwrap(), before);

    p.load(config("berth_hostile_guest", &[]), &[Decision::Naming])
        .unwrap();
    assert_eq!(
        p.volume_name(volume("keep")).await.unwrap(),
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

#[tokio::test]
async fn without_modules_the_builtins_decide() {
    let p = policies();
    assert!(
        matches!(p.volume_name(volume("v")).await.unwrap(), NamingOutcome::Named(n) if n.starts_with("berth-"))
    );
    assert_eq!(
        p.classify(failure(Operation::NodeUnpublishVolume, Code::NotFound, 1))
            .await
            .unwrap(),
        RetryDecision::Done
    );
    assert!(p.stats().is_empty());
}

/// A guest runs on the caller's task: on either kind of runtime, a trap is a
/// typed error with the guest's own message, never a host panic.
#[test]
fn a_trapping_guest_called_from_async_code_is_still_contained() {
    let check = async || {
        let p = naming_with("berth_hostile_guest", &[("behaviour", "trap")], OnError::Fail);
        match failure_of(p.volume_name(volume("v")).await) {
            GuestFailure::Trap(why) => assert!(why.contains("trapped on purpose"), "{why}"),
            other => panic!("{other:?}"),
        }
    };
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap()
        .block_on(check());
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(check());
}

/// A module pinned to a digest is compiled only from bytes that have it:
/// the bytes read are the bytes hashed and compiled.
#[test]
fn a_pinned_module_loads_only_from_the_bytes_pinned() {
    let bytes = std::fs::read(guest("berth_naming_guest")).unwrap();
    let mut c = config("berth_naming_guest", &[]);
    c.sha256 = Some(berth::oci::Digest::of(&bytes).hex().to_string());
    assert!(PolicyModule::load(&engine(), c.clone()).is_ok());
    c.sha256 = Some(berth::oci::Digest::of(b"other bytes").hex().to_string());
    let err = PolicyModule::load(&engine(), c).err().unwrap().to_string();
    assert!(err.contains("is not the module pinned"), "{err}");
}

/// A shadow never runs longer than what it shadows: its deadline is bounded
/// by the live module's (or the built-in policies' default).
#[test]
fn a_shadows_deadline_is_bounded_by_the_live_modules() {
    let p = policies();
    let mut live = config("berth_naming_guest", &[]);
    live.limits.deadline = Duration::from_millis(250);
    let mut shadow = config("berth_naming_guest", &[]);
    shadow.name = "shadow".into();
    shadow.limits.deadline = Duration::from_secs(120);
    p.replace_set(
        &[(live, vec![Decision::Naming])],
        &[(shadow.clone(), vec![Decision::Naming])],
    )
    .unwrap();
    let bounded = p.shadow(Decision::Naming).unwrap().config().limits.deadline;
    assert_eq!(bounded, Duration::from_millis(250));
    // Shadowing the built-in policy: its default.
    p.replace_set(&[], &[(shadow, vec![Decision::Naming])]).unwrap();
    let bounded = p.shadow(Decision::Naming).unwrap().config().limits.deadline;
    assert_eq!(bounded, Duration::from_millis(100));
}

/// The promotion guard counts inputs, not calls: one volume whose naming
/// fails, decided again and again, is one failing input.
#[tokio::test]
async fn failures_are_counted_by_distinct_input_for_the_guard() {
    let p = naming_with("berth_hostile_guest", &[("behaviour", "trap")], OnError::Fail);
    for _ in 0..20 {
        assert!(p.volume_name(volume("stuck")).await.is_err());
    }
    assert!(p.volume_name(volume("other")).await.is_err());
    let counters = &p.module(Decision::Naming).unwrap().counters;
    use std::sync::atomic::Ordering;
    assert_eq!(counters.decisions.load(Ordering::Relaxed), 21);
    assert_eq!(counters.failures.load(Ordering::Relaxed), 21);
    assert_eq!(counters.inputs.count(), 2);
    assert_eq!(counters.failing_inputs.count(), 2);
}
