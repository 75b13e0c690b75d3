//! `berth policy new`, checked as a policy author uses it: a project of each
//! language (Rust, Python, JavaScript, TypeScript, Go) made outside this
//! workspace, built there with its own tools and target directory, and its
//! cases passed by `berth policy test`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;

use super::{WASM_TARGET, ensure_wasm_target, go as golang, js as node, python, root, run};

fn berth() -> PathBuf {
    root().join("target/debug/berth")
}

/// Makes and builds one project of each language in a fresh directory under
/// the system's temporary directory; removes it when all passed.
pub fn check() -> anyhow::Result<()> {
    ensure_wasm_target()?;
    let base = std::env::temp_dir().join(format!("berth-policy-new-{}", std::process::id()));
    std::fs::create_dir_all(&base).with_context(|| format!("creating {}", base.display()))?;
    rust(&base).context("the generated Rust project")?;
    python(&base).context("the generated Python project")?;
    js(&base, "js").context("the generated JavaScript project")?;
    js(&base, "ts").context("the generated TypeScript project")?;
    go(&base).context("the generated Go project")?;
    std::fs::remove_dir_all(&base)?;
    Ok(())
}

/// Every decision: the default (naming, placement, retry) and admission.
/// Rust and JavaScript projects are made with the default, the others
/// with every decision, so each template is built somewhere.
const EVERY: &str = "naming,placement,retry,admission";

/// A project of `lang` serving `decisions` (`policy new`'s default when empty).
fn new_project(base: &Path, name: &str, lang: &str, decisions: &str) -> anyhow::Result<PathBuf> {
    let mut cmd = Command::new(berth());
    cmd.current_dir(base)
        .args(["policy", "new", name, "--lang", lang]);
    if !decisions.is_empty() {
        cmd.args(["--decisions", decisions]);
    }
    run(cmd)?;
    Ok(base.join(name))
}

fn policy_test(dir: &Path, module: &str) -> anyhow::Result<()> {
    let mut cmd = Command::new(berth());
    cmd.current_dir(dir)
        .args(["policy", "test", module, "cases.toml"]);
    run(cmd)
}

/// A cargo of the project's own: none of this workspace's settings.
fn project_cargo(dir: &Path) -> Command {
    let mut cmd = Command::new("cargo");
    cmd.current_dir(dir)
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS");
    cmd
}

fn rust(base: &Path) -> anyhow::Result<()> {
    let dir = new_project(base, "sample-rust-policy", "rust", "")?;
    // Nothing of this checkout is named: the SDK travels with the project.
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml"))?;
    let checkout = crate::root().display().to_string();
    if manifest.contains(&checkout) || !dir.join("berth-guest/wit/worlds.wit").is_file() {
        anyhow::bail!("the generated project does not carry its SDK:\n{manifest}");
    }
    let mut unit = project_cargo(&dir);
    unit.arg("test");
    run(unit)?;
    let mut build = project_cargo(&dir);
    build.args(["build", "--release", "--target", WASM_TARGET]);
    run(build)?;
    policy_test(&dir, "target/wasm32-wasip2/release/sample_rust_policy.wasm")
}

fn python(base: &Path) -> anyhow::Result<()> {
    let dir = new_project(base, "sample-python-policy", "python", EVERY)?;
    // The componentize-py this workspace installed: the same release the
    // project names, without a second download.
    let tool = python::ensure_componentize_py()?;
    for step in ["test", "build"] {
        let mut cmd = Command::new(dir.join("build.sh"));
        cmd.current_dir(&dir).arg(step).env("COMPONENTIZE_PY", &tool);
        run(cmd)?;
    }
    policy_test(&dir, "sample-python-policy.wasm")
}

/// npm installs the pinned tools and the project's own SDK; the build and
/// the cases are the project's npm scripts, with this checkout's berth
/// first on the PATH as an installed one would be.
fn js(base: &Path, lang: &str) -> anyhow::Result<()> {
    node::ensure_node()?;
    let name = format!("sample-{lang}-policy");
    let dir = new_project(base, &name, lang, if lang == "ts" { EVERY } else { "" })?;
    let path = format!(
        "{}:{}",
        berth().parent().unwrap_or(Path::new(".")).display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for args in [
        &["install", "--no-audit", "--no-fund", "--loglevel=error"][..],
        &["run", "build"],
        &["test"],
        &["run", "check"],
    ] {
        let mut cmd = Command::new("npm");
        cmd.current_dir(&dir).args(args).env("PATH", &path);
        run(cmd)?;
    }
    Ok(())
}

/// The project's Makefile builds, tests and checks it with the Go this
/// workspace installed and this checkout's berth; the SDK it carries passes
/// its own tests there too.
fn go(base: &Path) -> anyhow::Result<()> {
    let go = golang::ensure_go()?;
    let dir = new_project(base, "sample-go-policy", "go", EVERY)?;
    let mut sdk = golang::go_command(&go);
    sdk.current_dir(dir.join("sdk")).args(["test", "./..."]);
    run(sdk)?;
    for target in ["test", "check"] {
        let mut make = Command::new("make");
        golang::go_env(&mut make, &go);
        make.current_dir(&dir)
            .arg(format!("BERTH={}", berth().display()))
            .arg(target);
        run(make)?;
    }
    Ok(())
}
