//! Python policy guests: componentize-py from PyPI in a virtual environment
//! of the project's own, the sample and hostile guests built into
//! components, and the samples' case files run natively by the SDK's runner.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;

use super::{root, run};

/// The componentize-py release guests are built with; `berth policy new`
/// writes the same into the projects it makes.
fn componentize_py_version() -> anyhow::Result<String> {
    super::pinned_version("guests/python/componentize-py.version")
}

/// Where Python guests are built, beside the Rust ones.
pub fn guest_dir() -> PathBuf {
    root().join("target/guests/python")
}

fn venv() -> PathBuf {
    root().join("target/python/venv")
}

/// The project's Python environment (`target/python/venv`), made once.
pub fn ensure_venv() -> anyhow::Result<PathBuf> {
    if venv().join("bin/pip").exists() {
        return Ok(venv());
    }
    let mut make = Command::new("python3");
    make.args(["-m", "venv"]).arg(venv());
    run(make).context("making a Python virtual environment (needs python3 with venv)")?;
    Ok(venv())
}

/// componentize-py in the project's Python environment, once.
pub fn ensure_componentize_py() -> anyhow::Result<PathBuf> {
    let tool = venv().join("bin/componentize-py");
    if tool.exists() {
        return Ok(tool);
    }
    ensure_venv()?;
    let mut pip = Command::new(venv().join("bin/pip"));
    pip.args(["install", "--quiet"])
        .arg(format!("componentize-py=={}", componentize_py_version()?));
    run(pip).context("installing componentize-py from PyPI")?;
    Ok(tool)
}

/// The guests: (directory holding app.py, world, component file name).
fn guests() -> Vec<(PathBuf, &'static str, &'static str)> {
    let python = root().join("guests/python");
    vec![
        (python.join("naming"), "naming-policy", "berth_naming_py"),
        (python.join("placement"), "placement-policy", "berth_placement_py"),
        (python.join("retry"), "retry-policy", "berth_retry_py"),
        (python.join("admission"), "admission-policy", "berth_admission_py"),
        (
            root().join("tests/guests/python-hostile"),
            "lifecycle-policy",
            "berth_hostile_py",
        ),
    ]
}

/// Newest modification time of the files under `dirs`.
fn newest(dirs: &[&Path]) -> std::time::SystemTime {
    let mut newest = std::time::SystemTime::UNIX_EPOCH;
    let mut stack: Vec<PathBuf> = dirs.iter().map(|d| d.to_path_buf()).collect();
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(m) = entry.metadata().and_then(|m| m.modified()) {
                newest = newest.max(m);
            }
        }
    }
    newest
}

/// Builds every Python guest whose sources changed since it was built.
pub fn build_guests() -> anyhow::Result<()> {
    let tool = ensure_componentize_py()?;
    let wit = root().join("wit");
    let sdk = root().join("guests/python/sdk");
    std::fs::create_dir_all(guest_dir())?;
    for (dir, world, name) in guests() {
        let out = guest_dir().join(format!("{name}.wasm"));
        let built = std::fs::metadata(&out).and_then(|m| m.modified()).ok();
        if built.is_some_and(|b| b > newest(&[&dir, &sdk, &wit])) {
            continue;
        }
        // No WASI at all (every WASI import is a trapping stub): a policy
        // reaches nothing, and the component imports only Berth's types.
        let mut cmd = Command::new(&tool);
        cmd.arg("-d")
            .arg(&wit)
            .args(["-w", world, "componentize", "app", "--stub-wasi"])
            .arg("-p")
            .arg(&dir)
            .arg("-p")
            .arg(&sdk)
            .arg("-o")
            .arg(&out);
        run(cmd).with_context(|| format!("building the Python guest {}", dir.display()))?;
    }
    Ok(())
}

/// Runs each sample's case file natively with the SDK's runner, against
/// bindings generated for the whole `policy` world.
pub fn native_cases() -> anyhow::Result<()> {
    let tool = ensure_componentize_py()?;
    let bindings = root().join("target/python/bindings");
    // componentize-py refuses to write over bindings already there.
    if bindings.exists() {
        std::fs::remove_dir_all(&bindings)?;
    }
    let mut generate = Command::new(&tool);
    generate
        .arg("-d")
        .arg(root().join("wit"))
        .args(["-w", "policy", "bindings"])
        .arg(&bindings);
    run(generate)?;
    let path = format!(
        "{}:{}",
        bindings.display(),
        root().join("guests/python/sdk").display()
    );
    for sample in ["naming", "placement", "retry", "admission"] {
        let mut cmd = Command::new(venv().join("bin/python"));
        cmd.env("PYTHONPATH", &path)
            .args(["-m", "berth_policy.cases"])
            .arg(root().join("guests/python").join(sample))
            .arg(root().join("guests").join(sample).join("cases.toml"));
        run(cmd).with_context(|| format!("the Python {sample} sample's cases, run natively"))?;
    }
    Ok(())
}
