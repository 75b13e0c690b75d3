//! JavaScript policy modules, built with componentize-qjs by `cargo xtask
//! guests`: the samples pass the Rust samples' case files through `berth
//! policy test`, a module pushed to a registry decides in a server, and a
//! hostile JavaScript guest is contained. A JavaScript component has no WASI
//! at all (every WASI import is a trapping stub): no clock, and randomness
//! seeded when it was built.

use berth::policy::samples::{failure, volume};
use berth::policy::{Code, GuestFailure, NamingOutcome, Operation, Policies, RetryDecision};
use berth_tests::interpreted::{
    built, loops_and_hoards_are_stopped, names_as_rust_does, pushed_sample_names_a_servers_volumes,
    samples_pass_the_case_files,
};

fn js_guest(name: &str) -> std::path::PathBuf {
    built("js", name)
}

fn hostile(behaviour: &str) -> Policies {
    berth_tests::interpreted::hostile("js", &js_guest("berth_hostile_js"), behaviour)
}

fn naming_failure(p: &Policies) -> GuestFailure {
    berth_tests::interpreted::naming_failure(p, "berth_hostile_js")
}

#[test]
fn the_javascript_samples_pass_the_rust_samples_case_files() {
    samples_pass_the_case_files("js", "js");
}

/// Same volume, same name, in every language: the SDKs hash alike.
#[test]
fn a_javascript_module_imports_nothing_but_berths_types_and_names_as_rust_does() {
    names_as_rust_does("js", "js");
}

#[test]
fn a_javascript_module_pushed_to_a_registry_names_a_servers_volumes() {
    pushed_sample_names_a_servers_volumes("js", "js");
}

#[test]
fn a_javascript_guest_that_loops_or_hoards_is_stopped() {
    loops_and_hoards_are_stopped("js", &js_guest("berth_hostile_js"));
}

#[test]
fn a_javascript_guest_reaching_for_the_clock_traps_and_its_randomness_is_fixed() {
    match naming_failure(&hostile("clock")) {
        GuestFailure::Trap(_) => {}
        other => panic!("{other:?}"),
    }
    // Math.random draws from a seed taken when the module was built: every
    // decision, in a fresh instance, draws the same, as naming must.
    let draws: Vec<NamingOutcome> = (0..2)
        .map(|_| berth_tests::block_on(hostile("random").volume_name(volume("v"))).unwrap())
        .collect();
    assert!(
        matches!(&draws[0], NamingOutcome::Named(n) if n.starts_with("random-0.")),
        "{draws:?}"
    );
    assert_eq!(draws[0], draws[1]);
    // A throw is the module's own refusal, with its message.
    let refused = berth_tests::block_on(hostile("throw").volume_name(volume("v"))).unwrap();
    assert!(
        matches!(&refused, NamingOutcome::Refused(r) if r.contains("threw on purpose")),
        "{refused:?}"
    );
    // The same module, asked to behave, answers: the traps were its reaching.
    let p = hostile("");
    let named = berth_tests::block_on(p.volume_name(volume("v"))).unwrap();
    assert_eq!(named, NamingOutcome::Named("ok-v".into()));
    let retry = berth_tests::block_on(p.classify(failure(Operation::CreateVolume, Code::Unavailable, 1)));
    assert_eq!(retry.unwrap(), RetryDecision::RetryAfter(1000));
}
