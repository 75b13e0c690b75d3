//! Shared harness for the integration tests: finds the built binaries, starts
//! the sample CSI plugin as a real process on a real socket, and runs the CLI.

mod agents;
pub mod api_load;
mod bins;
pub mod browser;
mod cluster;
pub mod cpu;
pub mod direct;
pub mod docker;
mod etcd;
pub mod faultfs;
pub mod interpreted;
pub mod nemesis;
mod plugin;
mod registry;
pub mod scrape;
mod serves;
pub mod storm;

pub use agents::AgentProcess;
pub use bins::bin;
pub use cluster::{Cluster, ClusterSpec, create_args};
pub use etcd::{EtcdCluster, fence, put, stored};
pub use plugin::{Plugin, PluginBuilder};
pub use registry::{RegistryServer, cosign_key, openssl_keys};
pub use serves::ServeProcess;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use berth_proto::berth::v1 as api;
use berth_proto::berth::v1::berth_client::BerthClient;
use tonic::transport::Channel;

/// The summary of volumes by state and outstanding work (cheap at any scale).
pub async fn summary(client: &mut BerthClient<Channel>) -> Result<api::SummaryResponse, tonic::Status> {
    Ok(client.summary(api::SummaryRequest {}).await?.into_inner())
}

/// Waits until `done`, checking every 50 ms; fails after `within` with
/// `context` (what the test was looking at).
pub fn wait_for(what: &str, within: Duration, mut done: impl FnMut() -> bool, context: impl Fn() -> String) {
    let started = std::time::Instant::now();
    while !done() {
        assert!(
            started.elapsed() < within,
            "{what}: not within {within:?}\n{}",
            context()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A TCP port free on loopback now (the tests' servers bind it next),
/// never one handed out before in this process: the kernel may give the
/// same ephemeral port to two binds in a row, and two etcd members given
/// one port cannot start.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port on loopback");
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// Starts `berth COMMAND --config CONFIG` (info logs appended to `log`).
pub fn berth_logged(command: &str, config: &Path, log: &Path) -> Child {
    logged(Command::new(bin("berth")).arg(command), config, log)
}

/// Starts the `berth-agent` binary (what nodes install) with `--config CONFIG`.
pub fn agent_logged(config: &Path, log: &Path, env: &[(&str, &Path)]) -> Child {
    let mut command = Command::new(bin("berth-agent"));
    command.envs(env.iter().copied());
    logged(&mut command, config, log)
}

fn logged(command: &mut Command, config: &Path, log: &Path) -> Child {
    let shown = format!("{command:?}");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    command
        .arg("--config")
        .arg(config)
        .env(
            "BERTH_LOG",
            std::env::var("BERTH_TEST_LOG").unwrap_or_else(|_| "info".into()),
        )
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {shown}: {e}"))
}

/// Runs the `berth` CLI to completion.
pub fn berth(args: &[&str]) -> Output {
    berth_with(&[], args)
}

/// The CLI with `env` set besides the test's own environment.
pub fn berth_with(env: &[(&str, &str)], args: &[&str]) -> Output {
    Command::new(bin("berth"))
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("running berth")
}

/// stdout and stderr as text, for assertions and failure messages.
pub fn texts(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A fresh directory for one test, short enough for unix socket paths.
pub fn test_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("berth-")
        .tempdir_in("/tmp")
        .expect("temporary directory")
}

/// A policy guest component built for wasm32-wasip2 (`berth_naming_guest`,
/// ...) by this crate's build script.
pub fn guest(name: &str) -> PathBuf {
    let path = Path::new(env!("BERTH_GUESTS_DIR")).join(format!("{name}.wasm"));
    assert!(path.exists(), "{} is not built", path.display());
    path
}

/// Runs a future (a policy decision, say) to completion from synchronous
/// test code, on a runtime the whole test binary shares.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RUNTIME
        .get_or_init(|| tokio::runtime::Runtime::new().expect("a tokio runtime"))
        .block_on(future)
}
