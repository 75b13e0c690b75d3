//! What the suites of interpreted guests (Python, JavaScript) share: their
//! built components, one policy engine, a hostile guest with a behaviour,
//! and the samples run against the Rust samples' case files.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use berth::policy::builtin::Builtins;
use berth::policy::samples::volume;
use berth::policy::{Decision, EngineOptions, GuestFailure, ModuleConfig, OnError, Policies, PolicyEngine};

/// `target/guests/<language>/<name>.wasm`, built by `cargo xtask guests`.
pub fn built(language: &str, name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../target/guests/{language}/{name}.wasm"));
    assert!(
        path.exists(),
        "{} is not built (cargo xtask guests)",
        path.display()
    );
    path
}

/// One engine per language for the test binary (each its own pools, as
/// separate suites): a component compiles once and loads with each setting
/// from the engine's cache.
pub fn engine(language: &str) -> Arc<PolicyEngine> {
    static ENGINES: OnceLock<Mutex<HashMap<String, Arc<PolicyEngine>>>> = OnceLock::new();
    let mut engines = ENGINES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    engines
        .entry(language.to_string())
        .or_insert_with(|| Arc::new(PolicyEngine::new(EngineOptions::default()).expect("engine")))
        .clone()
}

/// The hostile guest of `language` at `module`, told to misbehave as
/// `behaviour` says, its failures reported rather than covered by a
/// built-in policy.
pub fn hostile(language: &str, module: &Path, behaviour: &str) -> Policies {
    let p = Policies::new(engine(language), Builtins::default());
    let mut c = ModuleConfig::from_path(module);
    c.settings = [("behaviour".to_string(), behaviour.to_string())].into();
    c.on_error = OnError::Fail;
    p.load(c, &[]).expect("the hostile guest loads");
    p
}

/// How the naming decision of `p` (the hostile guest named `module`) failed.
pub fn naming_failure(p: &Policies, module: &str) -> GuestFailure {
    match crate::block_on(p.volume_name(volume("v"))) {
        Err(e) => {
            assert_eq!((e.decision, e.module.as_str()), (Decision::Naming, module));
            e.failure
        }
        Ok(other) => panic!("expected a failure, got {other:?}"),
    }
}

/// Each sample of `language` (`berth_<decision>_<suffix>`) passes the Rust
/// sample's case file through `berth policy test`.
pub fn samples_pass_the_case_files(language: &str, suffix: &str) {
    for sample in ["naming", "placement", "retry", "admission"] {
        let module = built(language, &format!("berth_{sample}_{suffix}"));
        let cases = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../guests/{sample}/cases.toml"));
        // What the answers are, not how fast (a benchmark's matter): a
        // deadline a busy machine cannot miss.
        let out = crate::berth(&[
            "policy",
            "test",
            "--deadline",
            "5s",
            module.to_str().unwrap(),
            cases.to_str().unwrap(),
        ]);
        let (stdout, stderr) = crate::texts(&out);
        assert!(out.status.success(), "{sample}: {stdout}{stderr}");
        assert!(stdout.contains(" 0 failed"), "{stdout}");
    }
}

/// The naming sample of `language` (`berth_naming_<suffix>`) imports only
/// Berth's types and names every volume as the Rust sample does: the SDKs
/// hash alike.
pub fn names_as_rust_does(language: &str, suffix: &str) {
    let p = Policies::new(engine(language), Builtins::default());
    p.load(
        ModuleConfig::from_path(&built(language, &format!("berth_naming_{suffix}"))),
        &[],
    )
    .unwrap();
    let module = p.module(Decision::Naming).unwrap();
    assert_eq!(module.imports(), ["berth:policy/types@0.4.0"]);
    let rust = Policies::new(engine(language), Builtins::default());
    rust.load(ModuleConfig::from_path(&crate::guest("berth_naming_guest")), &[])
        .unwrap();
    for name in ["data", "Postgres Data", "日本語", ""] {
        let a = crate::block_on(p.volume_name(volume(name))).unwrap();
        let b = crate::block_on(rust.volume_name(volume(name))).unwrap();
        assert_eq!(a, b, "{name:?}");
    }
}

/// The naming sample of `language`, pushed to a real registry and named in
/// a server's `[[policy]]` with the setting `prefix = suffix`, names the
/// server's volumes.
pub fn pushed_sample_names_a_servers_volumes(language: &str, suffix: &str) {
    let registry = crate::RegistryServer::start();
    let pushed = registry.push(
        &built(language, &format!("berth_naming_{suffix}")),
        &format!("berth/naming-{suffix}:v1"),
    );
    let tables = format!(
        "[[policy]]\nmodule = \"{}\"\nsettings = {{ prefix = \"{suffix}\" }}\n[oci]\nplain_http = true\n",
        pushed["reference"].as_str().unwrap()
    );
    let c = crate::Cluster::start(crate::ClusterSpec {
        policy_tables: Some(&tables),
        ..crate::ClusterSpec::default()
    });
    c.create_in("orders.db", "zone=a");
    let v: serde_json::Value =
        serde_json::from_str(&c.ok(&["volume", "get", "orders.db", "-o", "json"])).unwrap();
    let name = v["csi_name"].as_str().unwrap();
    let prefix = format!("{suffix}-orders-db-");
    assert!(
        name.starts_with(&prefix) && name.len() == prefix.len() + 8,
        "{v:#}"
    );
}

/// The hostile guest `module` of `language`: a loop ends at the deadline
/// and unbounded allocation at the memory limit.
pub fn loops_and_hoards_are_stopped(language: &str, module: &Path) {
    let name = module.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
    assert_eq!(
        naming_failure(&hostile(language, module, "loop"), name),
        GuestFailure::Deadline(std::time::Duration::from_millis(100))
    );
    match naming_failure(&hostile(language, module, "memory-bomb"), name) {
        GuestFailure::MemoryLimit { limit } => assert_eq!(limit, 32 << 20),
        other => panic!("{other:?}"),
    }
}
