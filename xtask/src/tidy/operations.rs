//! A CSI operation Berth drives is named the same everywhere it must be:
//! each case of the WIT `operation` enum (what a retry policy classifies)
//! is an rpc of the CSI proto, a line of the CSI client's `rpcs!` table, a
//! name in the policy engine's bindings, a case of the Rust, Go and
//! JavaScript SDKs, and named by a case of `berth plugin check`. A new call
//! that misses one of them fails here (the recipe in the contributor guide
//! lists the steps).

use std::path::Path;

/// The cases of the WIT `operation` enum in `types`, in kebab case.
fn operations(types: &str) -> Vec<String> {
    let body = types
        .split_once("enum operation {")
        .and_then(|(_, rest)| rest.split_once('}'))
        .map(|(body, _)| body)
        .expect("types.wit has an operation enum");
    body.split(',')
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
        .collect()
}

/// `create-volume` → `CreateVolume`.
fn camel(kebab: &str) -> String {
    kebab
        .split('-')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

/// The form an operation takes in a place, from its kebab and camel names.
type Form = fn(&str, &str) -> String;

/// Where each operation must be named, and how: a place's name, its text,
/// and the form the operation takes in it.
fn missing(root: &Path) -> Vec<String> {
    let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
    let check: String = super::rust_files(&root.join("host/check/src"))
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap_or_default())
        .collect();
    let places: Vec<(&str, String, Form)> = vec![
        (
            "proto/csi/v1/csi.proto",
            read("proto/csi/v1/csi.proto"),
            |_, c| format!("rpc {c}("),
        ),
        (
            "the rpcs! table (host/csi/src/client.rs)",
            read("host/csi/src/client.rs"),
            |_, c| format!("\"{c}\";"),
        ),
        (
            "host/policy/src/bindings.rs",
            read("host/policy/src/bindings.rs"),
            |k, _| format!("(\"{k}\", "),
        ),
        (
            "the Rust SDK and the engine (guests/sdk/src/shared.rs)",
            read("guests/sdk/src/shared.rs"),
            |_, c| format!("Operation::{c} =>"),
        ),
        (
            "the Go SDK (guests/go/sdk/enums.go)",
            read("guests/go/sdk/enums.go"),
            |k, _| format!("\"{k}\""),
        ),
        (
            "the JavaScript SDK (guests/js/sdk/contract.d.ts)",
            read("guests/js/sdk/contract.d.ts"),
            |k, _| format!("\"{k}\""),
        ),
        ("berth plugin check (host/check/src)", check, |_, c| {
            format!("\"{c}")
        }),
    ];
    let mut missing = Vec::new();
    for kebab in operations(&read("wit/types.wit")) {
        let camel = camel(&kebab);
        for (place, text, form) in &places {
            if !text.contains(&form(&kebab, &camel)) {
                missing.push(format!("{kebab} ({camel}) is not in {place}"));
            }
        }
    }
    missing
}

#[test]
fn every_operation_is_named_wherever_it_must_be() {
    let missing = missing(&super::root());
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

#[test]
fn an_operation_named_in_the_contract_only_is_caught() {
    let dir = std::env::temp_dir().join(format!("berth-tidy-operations-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // The real tree, with one operation more in the contract only.
    for file in [
        "proto/csi/v1/csi.proto",
        "host/csi/src/client.rs",
        "host/policy/src/bindings.rs",
        "guests/sdk/src/shared.rs",
        "guests/go/sdk/enums.go",
        "guests/js/sdk/contract.d.ts",
        "wit/types.wit",
    ]
    .map(|f| super::root().join(f))
    .into_iter()
    .chain(super::rust_files(&super::root().join("host/check/src")))
    {
        let to = dir.join(file.strip_prefix(super::root()).unwrap());
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(&file, &to).unwrap();
    }
    let types = dir.join("wit/types.wit");
    let text = std::fs::read_to_string(&types).unwrap();
    std::fs::write(
        &types,
        text.replace("enum operation {", "enum operation {\n        get-volume-stats,"),
    )
    .unwrap();
    let found = missing(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(found.len(), 7, "{found:#?}");
    assert!(
        found
            .iter()
            .all(|m| m.starts_with("get-volume-stats (GetVolumeStats)")),
        "{found:#?}"
    );
}
