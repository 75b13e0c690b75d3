//! JavaScript policy guests: componentize-qjs from npm in a directory of
//! the project's own (`target/js`), and the sample and hostile guests built
//! into components with the SDK (`guests/js/sdk`) beside them.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;

use super::{ensure_package, root, run};

/// The componentize-qjs release guests are built with; `berth policy new`
/// pins the same in the projects it makes.
fn componentize_qjs_version() -> anyhow::Result<String> {
    super::pinned_version("guests/js/componentize-qjs.version")
}

/// Where JavaScript guests are built, beside the Rust and Python ones.
pub fn guest_dir() -> PathBuf {
    root().join("target/guests/js")
}

/// Where componentize-qjs is installed and the guests' sources are put
/// together: a module root holding each source and `node_modules`.
fn work() -> PathBuf {
    root().join("target/js")
}

/// Node.js and npm, from Debian's packages when missing.
pub fn ensure_node() -> anyhow::Result<()> {
    ensure_package("node", "nodejs")?;
    ensure_package("npm", "npm")
}

/// componentize-qjs in `target/js`, once per pinned release.
pub fn ensure_componentize_qjs() -> anyhow::Result<PathBuf> {
    ensure_node()?;
    let version = componentize_qjs_version()?;
    let tool = work().join("node_modules/.bin/componentize-qjs");
    let installed = work().join("node_modules/componentize-qjs/package.json");
    let current = std::fs::read_to_string(&installed)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .is_some_and(|p| p["version"] == version.as_str());
    if tool.exists() && current {
        return Ok(tool);
    }
    std::fs::create_dir_all(work())?;
    let manifest = serde_json::json!({
        "private": true,
        "description": "Berth's JavaScript guests are built here (cargo xtask guests)",
        "devDependencies": { "componentize-qjs": version },
    });
    std::fs::write(
        work().join("package.json"),
        serde_json::to_string_pretty(&manifest)?,
    )?;
    let mut npm = Command::new("npm");
    npm.current_dir(work())
        .args(["install", "--no-audit", "--no-fund", "--loglevel=error"]);
    run(npm).context("installing componentize-qjs from npm")?;
    Ok(tool)
}

/// The guests: (source file, world, component file name).
fn guests() -> Vec<(PathBuf, &'static str, &'static str)> {
    let js = root().join("guests/js");
    vec![
        (js.join("naming/app.js"), "naming-policy", "berth_naming_js"),
        (
            js.join("placement/app.js"),
            "placement-policy",
            "berth_placement_js",
        ),
        (js.join("retry/app.js"), "retry-policy", "berth_retry_js"),
        (
            js.join("admission/app.js"),
            "admission-policy",
            "berth_admission_js",
        ),
        (
            root().join("tests/guests/js-hostile/app.js"),
            "lifecycle-policy",
            "berth_hostile_js",
        ),
    ]
}

fn modified(path: &Path) -> std::time::SystemTime {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .unwrap_or(std::time::SystemTime::now())
}

/// Copies the SDK into `target/js/node_modules/berth-policy`, where a
/// guest's `import ... from "berth-policy"` finds it inside the module root.
fn place_sdk() -> anyhow::Result<std::time::SystemTime> {
    let sdk = root().join("guests/js/sdk");
    let into = work().join("node_modules/berth-policy");
    let _ = std::fs::remove_dir_all(&into);
    std::fs::create_dir_all(&into)?;
    let mut newest = std::time::SystemTime::UNIX_EPOCH;
    for entry in std::fs::read_dir(&sdk)? {
        let path = entry?.path();
        newest = newest.max(modified(&path));
        std::fs::copy(&path, into.join(path.file_name().unwrap_or_default()))
            .with_context(|| format!("copying {}", path.display()))?;
    }
    Ok(newest)
}

/// Builds every JavaScript guest whose source, the SDK or the WIT changed
/// since it was built. No WASI at all: every WASI import is a trapping stub.
pub fn build_guests() -> anyhow::Result<()> {
    let tool = ensure_componentize_qjs()?;
    let wit = root().join("wit");
    let sdk_changed = place_sdk()?;
    let wit_changed = std::fs::read_dir(&wit)?
        .flatten()
        .map(|e| modified(&e.path()))
        .max()
        .unwrap_or(std::time::SystemTime::now());
    std::fs::create_dir_all(guest_dir())?;
    for (source, world, name) in guests() {
        let out = guest_dir().join(format!("{name}.wasm"));
        let built = std::fs::metadata(&out).and_then(|m| m.modified()).ok();
        if built.is_some_and(|b| b > modified(&source) && b > sdk_changed && b > wit_changed) {
            continue;
        }
        let staged = work().join(format!("{name}.js"));
        std::fs::copy(&source, &staged).with_context(|| format!("copying {}", source.display()))?;
        let mut cmd = Command::new(&tool);
        cmd.arg("--wit")
            .arg(&wit)
            .args(["--world", world, "--js"])
            .arg(&staged)
            .arg("--module-root")
            .arg(work())
            .args(["--stub-wasi", "--sync", "-o"])
            .arg(&out)
            .stdout(std::process::Stdio::null());
        run(cmd).with_context(|| format!("building the JavaScript guest {}", source.display()))?;
    }
    Ok(())
}
