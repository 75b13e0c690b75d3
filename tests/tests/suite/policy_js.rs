//! JavaScript policy modules, built with componentize-qjs by `cargo xtask
//! guests`: the samples pass the Rust samples' case files through `berth
//! policy test`, a module pushed to a registry decides in a server, and a
//! hostile JavaScript guest is contained. A JavaScript component has no WASI
//! at all (every WASI import is a trapping stub): no clock, and randomness
//! seeded when it was built.

use std::time::Duration;

use berth::policy::builtin::Builtins;
use berth::policy::samples::{failure, volume};
use berth::policy::{
    Code, Decision, GuestFailure, ModuleConfig, NamingOutcome, Operation, Policies, RetryDecision,
};
use berth_tests::interpreted::{built, engine, samples_pass_the_case_files};
use berth_tests::{Cluster, ClusterSpec, RegistryServer, guest};
use serde_json::Value;

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
    let p = Policies::new(engine("js"), Builtins::default());
    p.load(ModuleConfig::from_path(&js_guest("berth_naming_js")), &[])
        .unwrap();
    let js = p.module(Decision::Naming).unwrap();
    assert_eq!(js.imports(), ["berth:policy/types@0.3.0"]);
    let rust = Policies::new(engine("js"), Builtins::default());
    rust.load(ModuleConfig::from_path(&guest("berth_naming_guest")), &[])
        .unwrap();
    for name in ["data", "Postgres Data", "日本語", ""] {
        let a = berth_tests::block_on(p.volume_name(volume(name))).unwrap();
        let b = berth_tests::block_on(rust.volume_name(volume(name))).unwrap();
        assert_eq!(a, b, "{name:?}");
    }
}

#[test]
fn a_javascript_module_pushed_to_a_registry_names_a_servers_volumes() {
    let registry = RegistryServer::start();
    let pushed = registry.push(&js_guest("berth_naming_js"), "berth/naming-js:v1");
    let tables = format!(
        "[[policy]]\nmodule = \"{}\"\nsettings = {{ prefix = \"js\" }}\n[oci]\nplain_http = true\n",
        pushed["reference"].as_str().unwrap()
    );
    let c = Cluster::start(ClusterSpec {
        policy_tables: Some(&tables),
        ..ClusterSpec::default()
    });
    c.create_in("orders.db", "zone=a");
    let v: Value = serde_json::from_str(&c.ok(&["volume", "get", "orders.db", "-o", "json"])).unwrap();
    let name = v["csi_name"].as_str().unwrap();
    assert!(
        name.starts_with("js-orders-db-") && name.len() == "js-orders-db-".len() + 8,
        "{v:#}"
    );
}

#[test]
fn a_javascript_guest_that_loops_hits_the_deadline() {
    assert_eq!(
        naming_failure(&hostile("loop")),
        GuestFailure::Deadline(Duration::from_millis(100))
    );
}

#[test]
fn a_javascript_guest_that_allocates_without_bound_hits_the_memory_limit() {
    match naming_failure(&hostile("memory-bomb")) {
        GuestFailure::MemoryLimit { limit } => assert_eq!(limit, 32 << 20),
        other => panic!("{other:?}"),
    }
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
