//! Go policy modules, built by `cargo xtask guests` with Go's own toolchain
//! (`GOOS=wasip1 -buildmode=c-shared`) and made components by `berth policy
//! component`: the samples pass the Rust samples' case files, a module
//! pushed to a registry decides in a server, and a hostile Go guest is
//! contained. Its WASI preview 1 is sealed inside the component: a clock
//! that only counts, randomness from a fixed seed, no files, no sleeping.

use berth::policy::samples::{failure, volume};
use berth::policy::{Code, GuestFailure, NamingOutcome, Operation, Policies, RetryDecision};
use berth_tests::interpreted::{
    built, loops_and_hoards_are_stopped, names_as_rust_does, pushed_sample_names_a_servers_volumes,
    samples_pass_the_case_files,
};

fn go_guest(name: &str) -> std::path::PathBuf {
    built("go", name)
}

fn hostile(behaviour: &str) -> Policies {
    berth_tests::interpreted::hostile("go", &go_guest("berth_hostile_go"), behaviour)
}

fn naming_failure(p: &Policies) -> GuestFailure {
    berth_tests::interpreted::naming_failure(p, "berth_hostile_go")
}

fn named(behaviour: &str) -> NamingOutcome {
    berth_tests::block_on(hostile(behaviour).volume_name(volume("v"))).unwrap()
}

#[test]
fn the_go_samples_pass_the_rust_samples_case_files() {
    samples_pass_the_case_files("go", "go");
}

/// Same volume, same name, in every language: the SDKs hash alike.
#[test]
fn a_go_module_imports_nothing_but_berths_types_and_names_as_rust_does() {
    names_as_rust_does("go", "go");
}

/// `berth policy component` merges the snapshot's data segments: wasmtime
/// fills a pointer and a length for each one whenever it makes an instance,
/// and Go's linker and the snapshot left over 41,000.
#[test]
fn a_go_components_memory_comes_in_few_data_segments() {
    use wasmparser::{Parser, Payload};
    let wasm = std::fs::read(go_guest("berth_naming_go")).unwrap();
    let segments: u32 = Parser::new(0)
        .parse_all(&wasm)
        .filter_map(|payload| match payload.unwrap() {
            Payload::DataSection(reader) => Some(reader.count()),
            _ => None,
        })
        .sum();
    assert!((1..1_000).contains(&segments), "{segments} data segments");
}

#[test]
fn a_go_module_pushed_to_a_registry_names_a_servers_volumes() {
    pushed_sample_names_a_servers_volumes("go", "go");
}

#[test]
fn a_go_guest_that_loops_or_hoards_is_stopped() {
    loops_and_hoards_are_stopped("go", &go_guest("berth_hostile_go"));
}

#[test]
fn a_go_guest_panicking_or_sleeping_traps() {
    for behaviour in ["panic", "sleep"] {
        match naming_failure(&hostile(behaviour)) {
            GuestFailure::Trap(_) => {}
            other => panic!("{behaviour}: {other:?}"),
        }
    }
}

#[test]
fn a_go_guest_sees_no_time_no_entropy_and_no_files() {
    // The clock counts readings from the epoch: not the time, and the same
    // in every fresh instance.
    let clock = named("clock");
    let NamingOutcome::Named(text) = &clock else {
        panic!("{clock:?}")
    };
    let nanos: u64 = text["clock-".len()..text.len() - 2].parse().unwrap();
    assert!(nanos < 3_600_000_000_000, "{text}: not within an hour of 1970");
    assert_eq!(named("clock"), clock);
    // crypto/rand draws from a fixed seed: every decision draws the same.
    let random = named("random");
    assert!(
        matches!(&random, NamingOutcome::Named(n) if n.starts_with("random-")),
        "{random:?}"
    );
    assert_eq!(named("random"), random);
    // No preopened directory: a file is not there to open.
    let file = named("file");
    assert!(
        matches!(&file, NamingOutcome::Refused(r) if r.contains("no file")),
        "{file:?}"
    );
    // An error is the module's own refusal, with its message.
    let refused = named("error");
    assert!(
        matches!(&refused, NamingOutcome::Refused(r) if r.contains("refused on purpose")),
        "{refused:?}"
    );
    // The same module, asked to behave, answers every decision.
    let p = hostile("");
    let ok = berth_tests::block_on(p.volume_name(volume("v"))).unwrap();
    assert_eq!(ok, NamingOutcome::Named("ok-v".into()));
    let retry = berth_tests::block_on(p.classify(failure(Operation::CreateVolume, Code::Unavailable, 1)));
    assert_eq!(retry.unwrap(), RetryDecision::RetryAfter(1000));
}
