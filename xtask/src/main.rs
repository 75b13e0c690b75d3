//! Project commands, run as `cargo xtask <command>`:
//!
//! - `demo`: build everything and run the demo on the embedded defaults;
//! - `test`: build everything the tests start (binaries, guest components),
//!   then run every test;
//! - `guests`: build the policy guest components for wasm32-wasip2;
//! - `policy-new`: make, build and test a generated policy project of each language;
//! - `bench`: the policy benchmark (WASM guests against the built-in policies);
//! - `bench-e2e`, `bench-scale`: end-to-end throughput; memory and restart at scale;
//! - `bench-nodes`: thousands of agents' sessions, heartbeats and reattaches;
//! - `reliability`: the long crash-loop, plugin-fault and hostile-input runs;
//! - `nemesis`: partitions and process faults in network namespaces, checked;
//! - `lint`: rustfmt, clippy and the tidy tests, as CI runs them;
//! - `docs`: build the book (docs/) and check its links;
//! - `walks`: run every walk of the book and the README as written;
//! - `dist`, `dist-check`: the packages and the image; installed and run;
//! - `conformance`: `berth plugin check` (and csi-sanity, when given) against
//!   the sample plugin, in every shape and with each fault flag.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

mod conformance;
mod demo;
mod demo_docker;
mod dist;
mod dist_check;
mod dist_image;
mod dockerd;
mod docs;
mod examples;
mod go;
mod js;
mod js_types;
mod man_config;
mod python;
mod scaffold;
#[cfg(test)]
mod tidy;

/// The release being built and packaged (the workspace's version).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  demo    build everything and run Berth with the sample plugin and guests: volumes
          created, published (some by placement), the host killed and restarted,
          unpublished and deleted
  test    build what the tests start (binaries, guests), then run the whole test suite
  guests  build the policy guest components: Rust (wasm32-wasip2) into
          target/guests/wasm32-wasip2/guest, Python (componentize-py, installed from PyPI
          into target/python/venv) into target/guests/python
  policy-new
          `berth policy new` as an author uses it: a Rust and a Python project made
          outside the workspace, built with their own tools, their cases passed
  bench   the policy benchmark: WASM guests against the built-in native policies
          (release build; --quick: a short run that it still runs, on the test build
          `cargo xtask test` made, so its figures are not the release build's)
  demo-cluster
          the same on many machines' terms: berth serve with its TLS cluster endpoint on
          loopback and three berth agent processes joining with a token, each with its own
          node plugin; an agent killed and back, a node drained
  bench-e2e
          end-to-end throughput: N volumes created, published, unpublished and deleted
          through berth serve and the sample plugin, built-in against WASM policies, and
          three in-process nodes against three berth agent processes, metrics on and off,
          and the same plugin processes driven directly (the limit), with the CPU time
          each part spent per volume (--volumes N[,N...], default 1000; --rounds R,
          default 3; --policies native,wasm,shadow,3-nodes,3-agents,etcd,metrics,no-events,no-log,limit
          picks setups; --volumes-dir DIR puts the plugin's volumes on DIR, not /dev/shm)
  bench-scale
          memory per tracked volume and restart time with 10,000 and 100,000 volumes
          in the store (--volumes N[,N...]); --etcd N also writes N of the records to
          a real etcd and reports what one costs there and what its quota holds
  bench-nodes
          N agents' sessions over mutual TLS against one server: memory per session, CPU
          per heartbeat, time to join and attach, to attach again after a kill -9, and
          desired-set bytes per reconnect (--agents N[,N...], default 100,1000; --loaded 4
          nodes holding --volumes 50 each; --steady 30 s; --heartbeat 5 s); --failover adds
          three servers on etcd: etcd writes/s at steady state and a leader kill's
          reattach (--lease-ttl 5 s)
  bench-failover
          three servers on a three-member etcd: time from killing the leader until a
          volume is created and published through a follower (--kills N, --lease-ttl S;
          --volumes N fills the store first with N volumes of realistic size; --python runs
          the three Python sample guests as the cluster's policy set)
  nemesis partitions, packet loss, kill -9 and SIGSTOP (as root: a network namespace per
          host) against three servers on a three-member etcd and three agents while a
          workload runs; then a checker of what must never happen and each fault's recovery
          time (--seconds N, default 3600; --seed S, default 1)
          bench-e2e to nemesis take --driver-from-tests: the driver is built as the tests
          are (reusing `cargo xtask test`'s build, not a second optimised one), and still
          starts the release binaries
  reliability
          the long reliability runs: kill -9 twenty times during 2,000 operations, 400
          volumes through a plugin that fails, hangs and restarts, 10,000 cases of each
          hostile-input property, and the leader of three servers on etcd killed ten
          times during 2,000 operations (the test suite runs short versions of each)
  demo-docker
          Berth as a plain Docker engine's volume plugin (installs docker.io and
          busybox-static): a container writes, the next reads, two share a volume, the
          volume removed and nothing left on the plugin; and what -v adds to docker run
  lint    cargo fmt --check, cargo clippy --all-targets -D warnings, and the tidy tests
          (layers, links, file circles, module summaries: xtask/src/tidy/)
  docs    build the book (docs/, mdBook from PyPI) into target/book; fail on a broken link
  walks   run every walk of the book and the README (blocks fenced sh,walk) as written,
          after checking that every berth command of the other sh blocks parses
  examples
          check that every berth command of the book's plain sh blocks parses as written
          (also a part of test and walks)
  conformance
          berth plugin check against the sample plugin in every shape it offers and with
          each fault flag: 0 failures, each flag's rule caught, nothing left behind; with
          --csi-sanity PATH (or BERTH_CSI_SANITY), csi-sanity too, and the two compared
  dist    what operators install, into target/dist: the berth, berth-agent and
          berth-hostpath-plugin Debian packages (units, config, man pages, completions)
          and an OCI image built from scratch (--profile P, default dist; --no-image)
  dist-check
          as root: install the packages with dpkg, check them and their units
          (systemd-analyze verify), run every walk with the installed binaries, run the
          image with podman (a server in a container publishes a volume), purge";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("demo") => demo::demo(),
        Some("demo-cluster") => demo::demo_cluster(),
        Some("demo-docker") => demo_docker::demo_docker(),
        Some("test") => test(&args[1..]),
        Some("lint") => lint(),
        Some("docs") => docs::docs(),
        Some("walks") => docs::walks(),
        Some("examples") => build_bins().and_then(|()| docs::examples()),
        Some("dist") => dist::dist(&args[1..]),
        Some("conformance") => conformance::conformance(&args[1..]),
        Some("dist-check") => dist_check::dist_check(),
        Some("guests") => guests(),
        Some("policy-new") => build_bins().and_then(|()| scaffold::check()),
        Some("bench") => bench(&args[1..]),
        Some("bench-e2e") => ensure_etcd().and_then(|()| release_bench("lifecycle", &args[1..])),
        Some("bench-scale") => release_bench("scale", &args[1..]),
        Some("bench-nodes") => ensure_etcd().and_then(|()| release_bench("nodes", &args[1..])),
        Some("bench-failover") => ensure_etcd().and_then(|()| release_bench("failover", &args[1..])),
        Some("nemesis") => nemesis(&args[1..]),
        Some("js-types") => js_types::write().map(|changed| {
            let path = js_types::contract_file();
            match changed {
                true => println!("wrote {}", path.display()),
                false => println!("{} is up to date", path.display()),
            }
        }),
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

/// A tool's release pinned in a file of the repository (`guests/...version`).
fn pinned_version(file: &str) -> anyhow::Result<String> {
    let path = root().join(file);
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text.trim().to_string())
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
    run(cmd)?;
    python::build_guests()?;
    js::build_guests()?;
    // Go guests are made components by `berth policy component`. Every
    // binary of the workspace, as the tests build them: `berth` alone
    // resolves its dependencies' features apart, and the next build of
    // the workspace's binaries compiled a third of the tree again.
    build_bins()?;
    go::build_guests(&root().join("target/debug/berth"))
}

fn test(extra: &[String]) -> anyhow::Result<()> {
    ensure_etcd()?;
    ensure_registry()?;
    ensure_pynacl()?;
    ensure_docker()?;
    ensure_browser()?;
    ensure_promtool()?;
    guests()?;
    python::native_cases()?;
    go::sdk_tests()?;
    build_bins()?;
    docs::examples()?;
    scaffold::check()?;
    let mut cmd = cargo();
    cmd.env("BERTH_TEST_PREBUILT", "1")
        .args(["test", "--workspace"])
        .args(extra);
    run(cmd)
}

/// The etcd store's tests start real etcd members: the Debian package
/// `etcd-server`, installed with apt-get when `etcd` is not on the PATH.
fn ensure_etcd() -> anyhow::Result<()> {
    ensure_package("etcd", "etcd-server")
}

/// The Docker volume plugin tests start a real dockerd (Debian's docker.io)
/// and Podman, and run containers of a static busybox (busybox-static), no
/// registry needed.
pub(crate) fn ensure_docker() -> anyhow::Result<()> {
    ensure_package("dockerd", "docker.io")?;
    ensure_podman()?;
    ensure_installed("/bin/busybox", "busybox-static", || {
        succeeds(Command::new("/bin/busybox").arg("true"))
    })
}

/// Podman with both OCI runtimes Debian offers: crun, which podman prefers,
/// and runc, which it is told to use where crun refuses the host's cgroup
/// layout (`dist_image::cgroups_hybrid`), whichever was installed first.
pub(crate) fn ensure_podman() -> anyhow::Result<()> {
    ensure_package("podman", "podman")?;
    ensure_package("crun", "crun")?;
    ensure_package("runc", "runc")
}

/// The console's tests drive a real headless browser over WebDriver:
/// Debian's `chromium` and `chromium-driver` (/usr/bin/chromedriver).
fn ensure_browser() -> anyhow::Result<()> {
    ensure_package("chromium", "chromium")?;
    ensure_package("chromedriver", "chromium-driver")
}

/// The packaged alert rules and dashboard are checked with Prometheus's
/// `promtool` (the Debian package `prometheus`).
pub(crate) fn ensure_promtool() -> anyhow::Result<()> {
    ensure_package("promtool", "prometheus")
}

/// The policy delivery tests push to and pull from a real registry: the
/// Debian package `docker-registry` (the CNCF distribution registry).
fn ensure_registry() -> anyhow::Result<()> {
    ensure_package("docker-registry", "docker-registry")
}

/// The sealed-key tests open and seal cosign's encrypted keys with an
/// implementation that is not Berth's: Python's scrypt and PyNaCl's secretbox
/// (the Debian package `python3-nacl`, for the system's /usr/bin/python3).
fn ensure_pynacl() -> anyhow::Result<()> {
    ensure_installed("/usr/bin/python3 with nacl", "python3-nacl", || {
        succeeds(Command::new("/usr/bin/python3").args(["-c", "import nacl.secret"]))
    })
}

/// `program` on the PATH, from Debian's `package` (apt-get, as root
/// directly, otherwise through sudo) when it is not there yet.
pub(crate) fn ensure_package(program: &str, package: &str) -> anyhow::Result<()> {
    ensure_installed(program, package, || {
        succeeds(Command::new(program).arg("--version"))
    })
}

pub(crate) fn succeeds(cmd: &mut Command) -> bool {
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

pub(crate) fn ensure_installed(program: &str, package: &str, found: impl Fn() -> bool) -> anyhow::Result<()> {
    if found() {
        return Ok(());
    }
    eprintln!(
        "xtask: {program} not found; installing Debian's {package} with apt-get \
         (which may also upgrade packages it depends on)"
    );
    let root = found_root();
    let apt = |args: &[&str]| {
        let mut cmd = if root {
            Command::new("apt-get")
        } else {
            let mut c = Command::new("sudo");
            c.arg("apt-get");
            c
        };
        cmd.args(args).env("DEBIAN_FRONTEND", "noninteractive");
        run(cmd)
    };
    if apt(&["install", "-y", "--no-install-recommends", package]).is_err() {
        apt(&["update"])?;
        apt(&["install", "-y", "--no-install-recommends", package])?;
    }
    anyhow::ensure!(found(), "{package} is installed but {program} is still not found");
    Ok(())
}

/// Whether this process runs as root (uid 0).
pub(crate) fn found_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|v| v.split_whitespace().next())
            == Some("0")
    })
}

fn bench(extra: &[String]) -> anyhow::Result<()> {
    guests()?;
    let mut cmd = cargo();
    if extra.iter().any(|a| a == "--quick") {
        // The whole workspace's features, as `cargo xtask test` builds it:
        // only the benchmark itself is compiled, not a second optimised
        // build of every dependency (a dozen minutes on two cores).
        cmd.args(["test", "--workspace", "--bench", "policy", "--"]);
    } else {
        cmd.args(["bench", "--package", "berth-policy", "--bench", "policy", "--"]);
    }
    cmd.args(extra);
    run(cmd)
}

/// The long versions of the reliability tests, one after the other.
fn reliability(extra: &[String]) -> anyhow::Result<()> {
    ensure_etcd()?;
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
            "suite",
            "--",
            "reliability::",
            "hostile_input::",
            "etcd_servers::",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .args(extra);
    run(cmd)
}

/// The binaries Berth ships (`berth`, `berth-agent`, the sample plugin),
/// built with cargo profile `profile`.
fn build_shipped(profile: &str) -> anyhow::Result<()> {
    let mut bins = cargo();
    bins.args(["build", "--profile", profile, "--bins"]);
    for package in ["berth", "berth-agent-bin", "hostpath-plugin"] {
        bins.args(["--package", package]);
    }
    run(bins)
}

/// The nemesis run (`tests/benches/nemesis/`): as root, with etcd,
/// iproute2 and iptables from Debian's packages; an hour unless told.
fn nemesis(extra: &[String]) -> anyhow::Result<()> {
    anyhow::ensure!(
        found_root(),
        "the nemesis makes network namespaces and iptables rules: run it as root"
    );
    ensure_etcd()?;
    ensure_installed("ip", "iproute2", || succeeds(Command::new("ip").arg("-V")))?;
    ensure_package("iptables", "iptables")?;
    let mut args = extra.to_vec();
    if !args.iter().any(|a| a == "--seconds") {
        args.extend(["--seconds".to_string(), "3600".to_string()]);
    }
    release_bench("nemesis", &args)
}

/// A benchmark of `berth-tests` that starts the release binaries.
///
/// `--driver-from-tests` builds the benchmark's own driver the way `cargo
/// xtask test` builds the tests (unoptimised, the workspace's features), so
/// that it reuses that build instead of a second optimised build of every
/// dependency; the servers, agents and plugins it starts are still the
/// release binaries. CI's short runs take it.
fn release_bench(name: &str, extra: &[String]) -> anyhow::Result<()> {
    guests()?;
    build_shipped("release")?;
    let from_tests = extra.iter().any(|a| a == "--driver-from-tests");
    let extra = extra.iter().filter(|a| *a != "--driver-from-tests");
    let mut cmd = cargo();
    cmd.env("BERTH_TEST_PREBUILT", "1");
    if from_tests {
        cmd.env("BERTH_TEST_BINS", root().join("target").join("release"))
            .args(["test", "--workspace", "--bench", name, "--"]);
    } else {
        cmd.args(["bench", "--package", "berth-tests", "--bench", name, "--"]);
    }
    cmd.args(extra);
    run(cmd)
}

fn lint() -> anyhow::Result<()> {
    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--check"]);
    run(fmt)?;
    let mut clippy = cargo();
    clippy.args(["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"]);
    run(clippy)?;
    // The tree's shape: layers, links, file circles, module summaries.
    let mut tidy = cargo();
    tidy.args(["test", "--package", "xtask", "--bin", "xtask", "--", "tidy::"]);
    run(tidy)
}
