//! `berth policy check` and `berth policy test` through the real binary.

use std::path::PathBuf;

use berth_tests::{berth, guest, test_dir, texts};
use serde_json::Value;

fn repo(path: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(path)
        .display()
        .to_string()
}

fn wasm(name: &str) -> String {
    guest(name).display().to_string()
}

#[test]
fn the_sample_guests_pass_their_case_files() {
    for g in ["naming", "placement", "retry"] {
        let module = wasm(&format!("berth_{g}_guest"));
        let out = berth(&[
            "policy",
            "test",
            &module,
            &repo(&format!("guests/{g}/cases.toml")),
        ]);
        let (stdout, stderr) = texts(&out);
        assert!(out.status.success(), "{g}: {stdout}{stderr}");
        let last = stdout.lines().last().unwrap_or_default();
        assert!(last.ends_with("passed, 0 failed"), "{g}: {last}");
        assert!(!stdout.contains("FAIL "), "{g}: {stdout}");
    }
}

#[test]
fn a_failing_case_is_reported_and_fails_the_run() {
    let dir = test_dir();
    let cases = dir.path().join("cases.toml");
    std::fs::write(
        &cases,
        r#"
[[case]]
name = "right"
volume = { name = "data" }
expect = { name_prefix = "pv-data-" }

[[case]]
name = "wrong on purpose"
volume = { name = "data" }
expect = { name = "something-else" }
"#,
    )
    .unwrap();
    let out = berth(&[
        "policy",
        "test",
        &wasm("berth_naming_guest"),
        cases.to_str().unwrap(),
        "-o",
        "json",
    ]);
    let (stdout, _) = texts(&out);
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["passed"], 1);
    assert_eq!(report["failed"], 1);
    let detail = report["cases"][1]["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("expected the name \"something-else\", got \"pv-data-"),
        "{detail}"
    );
}

#[test]
fn a_malformed_case_file_names_the_problem() {
    let dir = test_dir();
    let cases = dir.path().join("cases.toml");
    std::fs::write(&cases, "[[case]]\nname = \"x\"\nvolumee = {}\nexpect = {}\n").unwrap();
    let out = berth(&[
        "policy",
        "test",
        &wasm("berth_naming_guest"),
        cases.to_str().unwrap(),
    ]);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr.contains("volumee"), "{stderr}");
    assert!(stderr.contains("line 3"), "{stderr}");
}

#[test]
fn check_says_what_a_module_serves() {
    let out = berth(&["policy", "check", &wasm("berth_hostile_guest"), "-o", "json"]);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        report["decisions"],
        serde_json::json!(["naming", "placement", "retry"])
    );
    assert_eq!(report["memory_bytes"], 32 << 20);
    assert!(
        report["samples"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["ok"] == true)
    );
    let imports: Vec<&str> = report["imports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        imports
            .iter()
            .all(|i| i.starts_with("wasi:") || i.starts_with("berth:policy/types@")),
        "{imports:?}"
    );

    let out = berth(&[
        "policy",
        "check",
        &wasm("berth_retry_guest"),
        "--setting",
        "base-ms=100",
    ]);
    let (stdout, _) = texts(&out);
    assert!(out.status.success());
    assert!(stdout.contains("decisions   retry"), "{stdout}");
    assert!(stdout.contains("retry after"), "{stdout}");
}

#[test]
fn check_fails_on_modules_that_do_not_load_or_do_not_decide() {
    let out = berth(&["policy", "check", &wasm("berth_forbidden_guest")]);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr.contains("may not use the network"), "{stderr}");

    let out = berth(&[
        "policy",
        "check",
        &wasm("berth_hostile_guest"),
        "--setting",
        "behaviour=loop",
        "--deadline",
        "20ms",
    ]);
    let (stdout, _) = texts(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout.contains("FAILED: ran past its deadline of 20ms"),
        "{stdout}"
    );

    let out = berth(&[
        "policy",
        "check",
        &wasm("berth_naming_guest"),
        "--memory",
        "12 parsecs",
    ]);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr.contains("unknown unit"), "{stderr}");
}
