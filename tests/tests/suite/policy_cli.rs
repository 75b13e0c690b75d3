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
    for g in ["naming", "placement", "retry", "admission"] {
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
        serde_json::json!(["naming", "placement", "retry", "admission"])
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

#[test]
fn check_says_what_is_wrong_in_words_of_the_problem() {
    // A file that is not WebAssembly at all: no parser's errors, no decision.
    let out = berth(&["policy", "check", &repo("README.md")]);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr.contains("is not a WebAssembly component"), "{stderr}");
    assert!(
        !stderr.contains("(naming)"),
        "a module that does not load decided nothing: {stderr}"
    );

    // A guest whose stack (in linear memory) overflows.
    let out = berth(&[
        "policy",
        "check",
        &wasm("berth_hostile_guest"),
        "--setting",
        "behaviour=stack-overflow",
    ]);
    let (stdout, _) = texts(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout.contains("a stack overflow"), "{stdout}");

    // A guest built without the SDK's stack setting loads, with a warning.
    let plain = env!("BERTH_DEFAULT_STACK_GUEST");
    let out = berth(&["policy", "check", plain]);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains("warning") && stdout.contains("1 MiB stack"),
        "{stdout}"
    );
    let out = berth(&["policy", "check", &wasm("berth_naming_guest")]);
    assert!(
        !texts(&out).0.contains("warning"),
        "the SDK's build has nothing to warn about"
    );
    // Each language is judged by its own runtime's needs: the JavaScript,
    // Go and Python samples as built start with 1.4, 3.5 and 12.4 MiB.
    for (language, name) in [
        ("js", "berth_naming_js"),
        ("go", "berth_naming_go"),
        ("python", "berth_naming_py"),
    ] {
        let built = berth_tests::interpreted::built(language, name);
        let out = berth(&["policy", "check", &built.display().to_string()]);
        let (stdout, stderr) = texts(&out);
        assert!(out.status.success(), "{stdout}{stderr}");
        assert!(!stdout.contains("warning"), "{language}: {stdout}");
    }
}

#[test]
fn case_files_refuse_expectations_no_answer_can_meet() {
    let dir = berth_tests::test_dir();
    let cases = [
        ("name = \"a\"\nrefused = true", "a name and for a refusal"),
        ("eligible = [\"n1\"]", "expect.eligible is for placement cases"),
        ("refusal_contains = \"x\"\nrefused = false", "contradicts"),
    ];
    for (expect, message) in cases {
        let file = dir.path().join("cases.toml");
        std::fs::write(
            &file,
            format!("[[case]]\nname = \"c\"\n[case.expect]\n{expect}\n"),
        )
        .unwrap();
        let out = berth(&[
            "policy",
            "test",
            &wasm("berth_naming_guest"),
            file.to_str().unwrap(),
        ]);
        let (stdout, _) = texts(&out);
        assert_eq!(out.status.code(), Some(1), "{stdout}");
        assert!(stdout.contains(message), "{expect:?}: {stdout}");
    }
}

#[test]
fn policy_new_makes_a_project_and_refuses_what_it_cannot_make() {
    use std::os::unix::fs::PermissionsExt;
    let dir = test_dir();
    let project = dir.path().join("team-naming");
    let at = project.display().to_string();
    let out = berth(&[
        "policy",
        "new",
        "team-naming",
        "--lang",
        "python",
        "--decisions",
        "naming",
        "--dir",
        &at,
    ]);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    let world = std::fs::read_to_string(project.join("wit/module.wit")).unwrap();
    assert!(
        world.contains("export naming;") && !world.contains("export retry;"),
        "{world}"
    );
    let cases = std::fs::read_to_string(project.join("cases.toml")).unwrap();
    assert!(cases.contains("decision = \"naming\"") && !cases.contains("decision = \"retry\""));
    let mode = std::fs::metadata(project.join("build.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o111, 0o111, "build.sh runs");

    // Again over it: refused, and the project is as it was.
    let out = berth(&["policy", "new", "team-naming", "--lang", "rust", "--dir", &at]);
    assert!(!out.status.success());
    assert!(
        texts(&out).1.contains("not an empty directory"),
        "{}",
        texts(&out).1
    );
    assert!(project.join("app.py").is_file() && !project.join("Cargo.toml").exists());

    let elsewhere = dir.path().join("other").display().to_string();
    let refused = [
        (
            vec!["policy", "new", "Bad_Name", "--lang", "rust"],
            "is not a project name",
        ),
        (
            vec![
                "policy",
                "new",
                "p",
                "--lang",
                "python",
                "--decisions",
                "naming,nonsense",
            ],
            "unknown decision",
        ),
        (
            vec!["policy", "new", "p", "--lang", "cobol"],
            "invalid value 'cobol'",
        ),
        (
            vec![
                "policy",
                "new",
                "p",
                "--lang",
                "rust",
                "--dir",
                &elsewhere,
                "--sdk-path",
                "/nonexistent/sdk",
            ],
            "--sdk-path",
        ),
    ];
    for (args, why) in refused {
        let out = berth(&args);
        let (_, stderr) = texts(&out);
        assert!(!out.status.success(), "{args:?}");
        assert!(stderr.contains(why), "{args:?}: {stderr}");
    }
    assert!(
        !dir.path().join("other").exists(),
        "nothing is left of a refused project"
    );
}

/// A core module (what Go's wasip1 or C's wasi-libc build) becomes a
/// component Berth loads: the contract embedded for the world it names, its
/// WASI preview 1 import answered inside the component (or, asked for,
/// adapted to the host's WASI); a module that does not implement the world,
/// a world Berth has not, and a component are each refused saying so.
#[test]
fn policy_component_makes_a_core_module_a_policy() {
    let dir = test_dir();
    let core = repo("tests/guests/core-naming/naming.wat");
    let out_path = dir.path().join("naming.wasm").display().to_string();
    let out = berth(&[
        "policy",
        "component",
        &core,
        "--world",
        "naming-policy",
        "--to",
        &out_path,
    ]);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    let cases = dir.path().join("cases.toml");
    std::fs::write(
        &cases,
        "[[case]]\nname = \"named\"\ndecision = \"naming\"\nvolume = { name = \"data\" }\nexpect = { name = \"wat-name\" }\n",
    )
    .unwrap();
    let out = berth(&["policy", "test", &out_path, &cases.display().to_string()]);
    let (stdout, stderr) = texts(&out);
    assert!(
        out.status.success() && stdout.contains("1 passed, 0 failed"),
        "{stdout}{stderr}"
    );
    let out = berth(&["policy", "check", &out_path]);
    let (stdout, _) = texts(&out);
    assert!(stdout.contains("decisions   naming"), "{stdout}");
    assert!(
        stdout.contains("imports     berth:policy/types@0.4.0\n"),
        "sealed: no WASI import: {stdout}"
    );
    let adapted = dir.path().join("adapted.wasm").display().to_string();
    let out = berth(&[
        "policy",
        "component",
        &core,
        "--world",
        "naming-policy",
        "--wasi",
        "preview2",
        "--to",
        &adapted,
    ]);
    assert!(out.status.success(), "{:?}", texts(&out));
    let out = berth(&["policy", "check", &adapted]);
    let (stdout, _) = texts(&out);
    assert!(
        stdout.contains("wasi:random/random"),
        "the adapter's import: {stdout}"
    );

    let refused = |args: &[&str], says: &str| {
        let out = berth(args);
        let (stdout, stderr) = texts(&out);
        assert!(!out.status.success(), "{stdout}");
        assert!(stderr.contains(says), "{stderr}");
    };
    refused(
        &[
            "policy",
            "component",
            &core,
            "--world",
            "retry-policy",
            "--to",
            &out_path,
        ],
        "function `classify`",
    );
    refused(
        &["policy", "component", &core, "--world", "nope", "--to", &out_path],
        "is not a world of Berth's contract",
    );
    refused(&["policy", "component", &out_path], "is a component already");
}

/// `policy component` runs a module's `_initialize`, code from whoever wrote
/// the module, on the operator's machine: only after its exports are found to
/// make the component, and under a deadline, a memory cap and a cap on the
/// snapshot's segments, each named when it stops the module.
#[test]
fn component_runs_a_modules_start_up_only_within_its_limits() {
    let dir = test_dir();
    let naming = std::fs::read_to_string(repo("tests/guests/core-naming/naming.wat")).unwrap();
    let with_start = |name: &str, body: &str| {
        let text = naming.replacen(
            "(func (export \"cabi_realloc\")",
            &format!("(func (export \"_initialize\") {body})\n  (func (export \"cabi_realloc\")"),
            1,
        );
        let path = dir.path().join(format!("{name}.wat"));
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let to = dir.path().join("out.wasm").display().to_string();
    let component = |module: &str, world: &str, extra: &[&str]| {
        let args = [
            &["policy", "component", module, "--world", world, "--to", &to][..],
            extra,
        ]
        .concat();
        let out = berth(&args);
        let (stdout, stderr) = texts(&out);
        assert!(!out.status.success(), "{stdout}");
        stderr
    };
    // A start-up that never ends, in a module that does not make the world
    // asked for: refused for its exports, its code never run.
    let forever = with_start("forever", "(loop $l (br $l))");
    let why = component(&forever, "retry-policy", &[]);
    assert!(why.contains("function `classify`"), "{why}");
    // One that does: stopped at its deadline.
    let why = component(&forever, "naming-policy", &["--init-deadline", "300ms"]);
    assert!(why.contains("ran longer than 300ms (--init-deadline)"), "{why}");
    // A gigabyte asked for: stopped at the memory cap.
    let greedy = with_start("greedy", "(drop (memory.grow (i32.const 16384)))");
    let why = component(&greedy, "naming-policy", &[]);
    assert!(why.contains("past 268435456 (--init-memory)"), "{why}");
    // Bytes far apart make segments of their own.
    let scattered = with_start(
        "scattered",
        "(i32.store8 (i32.const 70000) (i32.const 1)) (i32.store8 (i32.const 120000) (i32.const 1))",
    );
    let why = component(&scattered, "naming-policy", &["--init-segments", "2"]);
    assert!(why.contains("more than 2 (--init-segments)"), "{why}");
    // Within its limits the same module is made a component.
    let out = berth(&[
        "policy",
        "component",
        &scattered,
        "--world",
        "naming-policy",
        "--to",
        &to,
    ]);
    assert!(out.status.success(), "{:?}", texts(&out));
}
