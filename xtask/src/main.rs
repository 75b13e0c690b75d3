//! Project commands, run as `cargo xtask <command>`:
//!
//! - `demo`: build everything and run the demo on the embedded defaults;
//! - `test`: build everything the tests start (binaries, guest components),
//!   then run every test;
//! - `guests`: build the policy guest components for wasm32-wasip2;
//! - `bench`: the policy benchmark (WASM guests against the built-in policies);
//! - `lint`: rustfmt and clippy, as CI runs them.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  demo    build Berth and the sample plugin, start the plugin and probe it
  test    build what the tests start (binaries, guests), then run the whole test suite
  guests  build the policy guest components (wasm32-wasip2) into target/wasm32-wasip2/guest
  bench   the policy benchmark: WASM guests against the built-in native policies
          (release build; add --quick for a short run)
  lint    cargo fmt --check and cargo clippy --all-targets -D warnings";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("demo") => demo(),
        Some("test") => test(&args[1..]),
        Some("lint") => lint(),
        Some("guests") => guests(),
        Some("bench") => bench(&args[1..]),
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            Ok(())
        }
        _ => {
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    };
    if let Err(e) = result {
        eprintln!("xtask: {e:#}");
        std::process::exit(1);
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(root());
    cmd
}

fn run(mut cmd: Command) -> anyhow::Result<()> {
    let shown = format!("{cmd:?}");
    let status = cmd.status().with_context(|| format!("starting {shown}"))?;
    if !status.success() {
        bail!("{shown} failed with {status}");
    }
    Ok(())
}

fn build_bins() -> anyhow::Result<()> {
    let mut cmd = cargo();
    cmd.args(["build", "--workspace", "--bins"]);
    run(cmd)
}

/// Guest components: the samples in guests/ and the hostile ones the tests use.
const GUESTS: [&str; 5] = [
    "berth-naming-guest",
    "berth-placement-guest",
    "berth-retry-guest",
    "berth-hostile-guest",
    "berth-forbidden-guest",
];
const WASM_TARGET: &str = "wasm32-wasip2";

fn ensure_wasm_target() -> anyhow::Result<()> {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .context("running rustup (needed to add the wasm32-wasip2 target)")?;
    if String::from_utf8_lossy(&installed.stdout)
        .lines()
        .any(|l| l.trim() == WASM_TARGET)
    {
        return Ok(());
    }
    let mut add = Command::new("rustup");
    add.args(["target", "add", WASM_TARGET]);
    run(add)
}

fn guests() -> anyhow::Result<()> {
    ensure_wasm_target()?;
    let mut cmd = cargo();
    cmd.args(["build", "--target", WASM_TARGET, "--profile", "guest"]);
    for g in GUESTS {
        cmd.args(["--package", g]);
    }
    run(cmd)
}

fn test(extra: &[String]) -> anyhow::Result<()> {
    guests()?;
    build_bins()?;
    let mut cmd = cargo();
    cmd.args(["test", "--workspace"]).args(extra);
    run(cmd)
}

fn bench(extra: &[String]) -> anyhow::Result<()> {
    guests()?;
    let mut cmd = cargo();
    cmd.args(["bench", "--package", "berth", "--bench", "policy", "--"])
        .args(extra);
    run(cmd)
}

fn lint() -> anyhow::Result<()> {
    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--check"]);
    run(fmt)?;
    let mut clippy = cargo();
    clippy.args(["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"]);
    run(clippy)
}

fn demo() -> anyhow::Result<()> {
    build_bins()?;
    let bin = root().join("target/debug");
    let work = std::env::temp_dir().join(format!("berth-demo-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let socket = work.join("csi.sock");
    println!("==> starting the sample CSI plugin on {}", socket.display());
    let mut plugin = Command::new(bin.join("hostpath-plugin"))
        .arg("--endpoint")
        .arg(&socket)
        .arg("--state-dir")
        .arg(work.join("state"))
        .args(["--name", "hostpath.csi.k8s.io", "--node-id", "node1"])
        .args(["--topology", "zone=zone-a", "--max-volumes", "16"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting hostpath-plugin")?;
    let outcome = (|| {
        let started = Instant::now();
        while !socket.exists() {
            if started.elapsed() > Duration::from_secs(20) {
                bail!("the plugin's socket did not appear");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let endpoint = format!("unix://{}", socket.display());
        println!("==> berth plugin probe {endpoint}");
        let mut probe = Command::new(bin.join("berth"));
        probe.args(["plugin", "probe", &endpoint, "--wait", "10s"]);
        run(probe)?;
        println!("==> the same, as JSON");
        let mut json = Command::new(bin.join("berth"));
        json.args(["plugin", "probe", &endpoint, "--output", "json"]);
        run(json)
    })();
    let _ = plugin.kill();
    let _ = plugin.wait();
    let _ = std::fs::remove_dir_all(&work);
    outcome
}
