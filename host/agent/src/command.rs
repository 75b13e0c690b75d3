//! `berth agent` (and the `berth-agent` binary): the node side, one per
//! node: its command-line arguments and what running it does.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use berth_metrics as metrics;
use berth_model::Paths;
use clap::Args;

use crate::config::{AgentConfig, AgentDocker};
use crate::docker::{DockerPlugin, DockerSettings, LeaderVolumes, bind, serve};
use crate::{Agent, AgentSpec, dial};

/// What `berth-agent --help` and its man page say it is.
pub const ABOUT: &str = "The Berth node agent: this node's CSI node plugins, driven by `berth serve`.";

#[derive(Debug, Args)]
#[command(after_help = "\
The agent owns this node's CSI node plugins: it fingerprints them, registers the node with
`berth serve` (its `cluster` endpoint), stages and publishes what the server asks, and keeps
a record of what the node holds in `dir`, so a restart neither publishes again nor forgets.
Teardown goes on while the server is away. With `[docker]`, it also serves Docker's and
Podman's volume plugin protocol for this node (`docker volume create -d berth`, `docker run -v`).
Every key of agent.toml is in agent.toml(5) and the book's configuration reference.")]
pub struct AgentArgs {
    /// The agent's configuration file (TOML).
    #[arg(long, short, default_value = "agent.toml", env = "BERTH_AGENT_CONFIG")]
    pub config: PathBuf,
    /// The join token (`berth cluster token` on the server), needed only until the
    /// agent has its certificate; overrides `token` in the config.
    #[arg(long, env = "BERTH_JOIN_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Read and check the configuration, say what it sets up, and exit
    /// (0 when valid); nothing is dialed or opened.
    #[arg(long)]
    pub check: bool,
}

/// Runs the agent until SIGTERM or Ctrl-C (or the server refuses it).
pub async fn run(args: AgentArgs) -> anyhow::Result<ExitCode> {
    let c = AgentConfig::load(&args.config).map_err(anyhow::Error::msg)?;
    let token = args.token.or(c.token.clone());
    // A token that cannot be one is this agent's to report, before any dial.
    if let Some(t) = &token {
        berth_model::credentials::JoinToken::parse(t).map_err(|e| {
            anyhow::anyhow!(
                "the join token given (--token, BERTH_JOIN_TOKEN or `token` in agent.toml) is malformed: {e}"
            )
        })?;
    }
    if args.check {
        let watched = c.plugin_dir.as_ref().map_or(String::new(), |d| {
            format!(" and those appearing in {}", d.display())
        });
        println!(
            "{}: valid; node {}, {} server(s), {} node plugin(s){watched}, Docker's plugin {}",
            args.config.display(),
            c.node,
            c.servers.len(),
            c.plugins.len(),
            if c.docker.is_some() { "on" } else { "off" },
        );
        return Ok(ExitCode::SUCCESS);
    }
    metrics::listener::raise_descriptor_limit();
    let readiness = metrics::readiness();
    let _http = match c.metrics {
        Some(address) => Some(
            metrics::http::serve(address, readiness.clone())
                .await
                .map_err(anyhow::Error::msg)?,
        ),
        None => None,
    };
    let servers = c.servers.clone();
    let dir = c.dir.clone();
    let docker = c.docker.clone();
    let agent = Agent::open(AgentSpec {
        node: c.node,
        labels: c.labels,
        record: crate::record::RecordPlace::File(c.dir.join("agent.redb")),
        paths: Paths::under(&c.dir),
        plugins: c.plugins,
        plugin_dir: c.plugin_dir,
        fingerprint_interval: c.fingerprint_interval,
        heartbeat_interval: c.heartbeat_interval,
        deadline: c.deadline,
        seed: Default::default(),
    })
    .await
    .map_err(anyhow::Error::msg)?;
    let asks =
        |check: fn(&Agent) -> Result<String, metrics::readiness::NotReady>| -> metrics::readiness::Check {
            let weak = Arc::downgrade(&agent);
            Box::new(move || weak.upgrade().map_or(Err("stopping".into()), |a| check(&a)))
        };
    readiness.set("record", asks(Agent::record_ready));
    readiness.set("server", asks(Agent::session_ready));
    readiness.set("plugins", asks(Agent::plugins_ready));
    let docker = match docker {
        Some(d) => Some(docker_plugin(&agent, &d, &dir)?),
        None => None,
    };
    let notify = metrics::notify::when_ready(readiness.clone());
    let listed: Vec<String> = servers.iter().map(ToString::to_string).collect();
    tracing::info!(node = %agent.name(), servers = ?listed, "agent started");
    let ended = tokio::select! {
        why = dial::run(agent, servers, token, dir) => Err(anyhow::anyhow!("the server refused this agent: {why}")),
        () = shutdown() => Ok(ExitCode::SUCCESS),
    };
    metrics::notify::stopping();
    if let Some(notify) = notify {
        notify.abort();
    }
    if let Some((task, socket)) = docker {
        task.abort();
        let _ = std::fs::remove_file(socket);
    }
    ended
}

/// Serves Docker's volume plugin protocol for this node, through the
/// leader's node-bounded volume calls on the session's channel.
fn docker_plugin(
    agent: &Arc<Agent>,
    d: &AgentDocker,
    dir: &Path,
) -> anyhow::Result<(tokio::task::JoinHandle<()>, PathBuf)> {
    let listener = bind(&d.socket.socket, d.socket.socket_mode)?;
    let settings = DockerSettings {
        node: agent.name().to_string(),
        // The server says which nodes' Docker may (docker_create_from).
        create_volumes: true,
        plugin: d.plugin.clone(),
        wait: d.socket.wait,
        holders: dir.join("docker-holders.json"),
    };
    let api = LeaderVolumes::new(agent.leader(), agent.name(), d.socket.wait);
    let plugin = DockerPlugin::new(Box::new(api), settings)
        .context("reading which containers hold which volume (docker-holders.json)")?;
    tracing::info!(socket = %d.socket.socket.display(), node = %agent.name(), "serving Docker's volume plugin protocol");
    Ok((serve(listener, Arc::new(plugin)), d.socket.socket.clone()))
}

/// Until SIGTERM or Ctrl-C: when a Berth process (`serve`, an agent) stops.
pub async fn shutdown() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
    tracing::info!("shutting down");
}
