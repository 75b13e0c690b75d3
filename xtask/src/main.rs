//! Project commands, run as `cargo xtask <command>`:
//!
//! - `demo`: build everything and run the demo on the embedded defaults;
//! - `test`: build everything the tests start (binaries, guest components),
//!   then run every test;
//! - `guests`: build the policy guest components for wasm32-wasip2;
//! - `bench`: the policy benchmark (WASM guests against the built-in policies);
//! - `bench-e2e`, `bench-scale`: end-to-end throughput; memory and restart at scale;
//! - `reliability`: the long crash-loop, plugin-fault and hostile-input runs;
//! - `lint`: rustfmt and clippy, as CI runs them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  demo    build everything and run Berth with the sample plugin and guests: volumes
          created, published (some by placement), the host killed and restarted,
          unpublished and deleted
  test    build what the tests start (binaries, guests), then run the whole test suite
  guests  build the policy guest components (wasm32-wasip2) into target/guests/wasm32-wasip2/guest
  bench   the policy benchmark: WASM guests against the built-in native policies
          (release build; add --quick for a short run)
  bench-e2e
          end-to-end throughput: N volumes created, published, unpublished and deleted
          through berth serve and the sample plugin, built-in against WASM policies, and
          three in-process nodes against three berth agent processes
          (--volumes N[,N...], default 1000; --rounds R, default 3)
  bench-scale
          memory per tracked volume and restart time with 10,000 and 100,000 volumes
          in the store (--volumes N[,N...])
  reliability
          the long reliability runs: kill -9 twenty times during 2,000 operations, 400
          volumes through a plugin that fails, hangs and restarts, and 10,000 cases of
          each hostile-input property (the test suite runs short versions of each)
  lint    cargo fmt --check and cargo clippy --all-targets -D warnings";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("demo") => demo(),
        Some("test") => test(&args[1..]),
        Some("lint") => lint(),
        Some("guests") => guests(),
        Some("bench") => bench(&args[1..]),
        Some("bench-e2e") => release_bench("lifecycle", &args[1..]),
        Some("bench-scale") => release_bench("scale", &args[1..]),
        Some("reliability") => reliability(&args[1..]),
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

/// Guest components (the samples in guests/ and the hostile ones the tests
/// use), listed once for this command and the test crate's build script.
fn guest_packages() -> anyhow::Result<Vec<String>> {
    let list = root().join("tests/guest-packages.txt");
    let text = std::fs::read_to_string(&list).with_context(|| format!("reading {}", list.display()))?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect())
}
const WASM_TARGET: &str = "wasm32-wasip2";
/// Where guests are built: a target directory of their own, shared with the
/// test crate's build script (which cannot use the main one while cargo
/// holds it).
const GUEST_TARGET_DIR: &str = "target/guests";

fn guest_dir() -> PathBuf {
    root().join(GUEST_TARGET_DIR).join(WASM_TARGET).join("guest")
}

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
    cmd.args(["build", "--target", WASM_TARGET, "--profile", "guest"])
        .env("CARGO_TARGET_DIR", root().join(GUEST_TARGET_DIR));
    for g in guest_packages()? {
        cmd.args(["--package", &g]);
    }
    run(cmd)
}

fn test(extra: &[String]) -> anyhow::Result<()> {
    guests()?;
    build_bins()?;
    let mut cmd = cargo();
    cmd.env("BERTH_TEST_PREBUILT", "1")
        .args(["test", "--workspace"])
        .args(extra);
    run(cmd)
}

fn bench(extra: &[String]) -> anyhow::Result<()> {
    guests()?;
    let mut cmd = cargo();
    cmd.args(["bench", "--package", "berth", "--bench", "policy", "--"])
        .args(extra);
    run(cmd)
}

/// The long versions of the reliability tests, one after the other.
fn reliability(extra: &[String]) -> anyhow::Result<()> {
    guests()?;
    build_bins()?;
    let mut cmd = cargo();
    cmd.env("BERTH_RELIABILITY", "long")
        .env("BERTH_TEST_PREBUILT", "1")
        .args([
            "test",
            "--package",
            "berth-tests",
            "--test",
            "reliability",
            "--test",
            "hostile_input",
            "--",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .args(extra);
    run(cmd)
}

/// A benchmark of `berth-tests` that starts the release binaries.
fn release_bench(name: &str, extra: &[String]) -> anyhow::Result<()> {
    guests()?;
    let mut bins = cargo();
    bins.args([
        "build",
        "--release",
        "--bins",
        "--package",
        "berth",
        "--package",
        "hostpath-plugin",
    ]);
    run(bins)?;
    let mut cmd = cargo();
    cmd.env("BERTH_TEST_PREBUILT", "1")
        .args(["bench", "--package", "berth-tests", "--bench", name, "--"])
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

/// The main job on the embedded defaults: a sample CSI plugin as a controller
/// and three nodes in two zones, `berth serve` with the three sample guests,
/// volumes through their whole life, and a crash of the host in the middle.
fn demo() -> anyhow::Result<()> {
    guests()?;
    build_bins()?;
    let root = root();
    let bin = root.join("target/debug");
    let guests = guest_dir();
    let work = std::env::temp_dir().join(format!("berth-demo-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let mut children = Vec::new();
    let outcome = run_demo(&bin, &guests, &work, &mut children);
    for mut c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
    let _ = std::fs::remove_dir_all(&work);
    outcome
}

fn wait_for_socket(path: &Path) -> anyhow::Result<()> {
    let started = Instant::now();
    while std::os::unix::net::UnixStream::connect(path).is_err() {
        if started.elapsed() > Duration::from_secs(30) {
            bail!("{} did not come up", path.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

fn run_demo(
    bin: &Path,
    guests: &Path,
    work: &Path,
    children: &mut Vec<std::process::Child>,
) -> anyhow::Result<()> {
    let plugin = |name: &str, args: &[&str]| -> anyhow::Result<std::process::Child> {
        let log = std::fs::File::create(work.join(format!("{name}.log")))?;
        Ok(Command::new(bin.join("hostpath-plugin"))
            .arg("--endpoint")
            .arg(work.join(format!("{name}.sock")))
            .arg("--state-dir")
            .arg(work.join("hostpath"))
            .args(args)
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?)
    };
    println!("==> the sample CSI plugin: a controller, and nodes a (zone-1), b and c (zone-2)");
    children.push(plugin(
        "controller",
        &["--node", "false", "--topology", "zone=zone-1"],
    )?);
    for (node, zone) in [("node-a", "zone-1"), ("node-b", "zone-2"), ("node-c", "zone-2")] {
        let topology = format!("zone={zone}");
        children.push(plugin(
            node,
            &[
                "--controller",
                "false",
                "--node-id",
                node,
                "--topology",
                &topology,
                "--max-volumes",
                "8",
            ],
        )?);
    }
    let mut config = format!(
        "state = \"state/berth.redb\"\nfingerprint_interval = \"1s\"\n\n[[plugin]]\nname = \"hostpath\"\ndriver = \"hostpath.csi.berth.dev\"\ncontroller = \"unix://{}\"\n",
        work.join("controller.sock").display()
    );
    for (node, disk) in [("node-a", "ssd"), ("node-b", "ssd"), ("node-c", "hdd")] {
        config += &format!(
            "\n[[node]]\nname = \"{node}\"\ndir = \"nodes/{node}\"\nlabels = {{ disk = \"{disk}\" }}\nplugins = {{ hostpath = \"unix://{}\" }}\n",
            work.join(format!("{node}.sock")).display()
        );
    }
    config += &format!(
        "\n[[policy]]\nmodule = \"{}\"\nsettings = {{ prefix = \"demo\" }}\n\n[[policy]]\nmodule = \"{}\"\n\n[[policy]]\nmodule = \"{}\"\non_error = \"builtin\"\nsettings = {{ base-ms = \"100\" }}\n",
        guests.join("berth_naming_guest.wasm").display(),
        guests.join("berth_placement_guest.wasm").display(),
        guests.join("berth_retry_guest.wasm").display()
    );
    let config_path = work.join("berth.toml");
    std::fs::write(&config_path, &config)?;
    println!("==> berth.toml\n{config}");

    let api = work.join("state/berth.sock");
    let serve = |children: &mut Vec<std::process::Child>| -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(work.join("serve.log"))?;
        children.push(
            Command::new(bin.join("berth"))
                .args(["serve", "--config"])
                .arg(&config_path)
                .stdout(log.try_clone()?)
                .stderr(log)
                .spawn()?,
        );
        wait_for_socket(&api)
    };
    let berth = |args: &[&str]| -> anyhow::Result<()> {
        println!("\n$ berth {}", args.join(" "));
        let mut cmd = Command::new(bin.join("berth"));
        cmd.args(args).env("BERTH_API", &api);
        run(cmd)
    };

    println!("==> berth serve");
    serve(children)?;
    berth(&["plugin", "status"])?;
    berth(&["node", "list"])?;
    berth(&[
        "volume",
        "create",
        "pg-data",
        "--plugin",
        "hostpath",
        "--size",
        "1GiB",
        "--requisite",
        "zone=zone-1",
        "--wait",
    ])?;
    berth(&[
        "volume",
        "create",
        "cache",
        "--plugin",
        "hostpath",
        "--size",
        "256MiB",
        "--requisite",
        "zone=zone-2",
        "--label",
        "node-selector/disk=ssd",
        "--wait",
    ])?;
    berth(&[
        "volume",
        "create",
        "scratch",
        "--plugin",
        "hostpath",
        "--preferred",
        "zone=zone-2",
        "--wait",
    ])?;
    berth(&["volume", "publish", "pg-data", "--node", "node-a", "--wait"])?;
    println!("\n==> 'cache' is published where placement says: zone-2, and only on an ssd node");
    berth(&["volume", "publish", "cache", "--wait"])?;
    berth(&["volume", "publish", "scratch", "--wait"])?;
    berth(&["volume", "list"])?;

    println!("\n==> kill -9 berth serve, and start it again: nothing is lost");
    if let Some(mut s) = children.pop() {
        s.kill()?;
        s.wait()?;
    }
    serve(children)?;
    berth(&["volume", "list"])?;
    berth(&["volume", "get", "cache"])?;

    berth(&["volume", "unpublish", "pg-data", "--node", "node-a", "--wait"])?;
    for v in ["pg-data", "cache", "scratch"] {
        berth(&["volume", "delete", v, "--wait"])?;
    }
    berth(&["volume", "list"])?;
    let left = std::fs::read_dir(work.join("hostpath/volumes"))?.count();
    println!("\n==> volumes left on the plugin: {left}");
    if left != 0 {
        bail!("{left} volumes were left on the plugin");
    }
    Ok(())
}
