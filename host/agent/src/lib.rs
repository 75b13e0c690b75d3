//! The node side of Berth: `berth agent`, one per node, and the in-process
//! agent that serves `[[node]]` in `berth.toml` through the same code.
//!
//! - `command` — `berth agent`'s arguments and what running it does; `config` — `agent.toml`;
//! - `dial` — reaching the server (a unix socket, or the TLS endpoint) and dialling again;
//!   `tls` — joining with a token and the certificate the node keeps;
//! - `plugins` — the node's CSI node plugins (configured and discovered), fingerprinted;
//! - `record` — the durable record of what the node holds;
//! - `converge` — driving each volume to the level the server wants;
//! - `calls` — the node plugin calls, at the agent's paths;
//! - `mounts` — the mount table; `mount_check` — the record checked against it on start;
//! - `failures` — a node call's failure as the cluster protocol carries it;
//! - `docker` — Docker's and Podman's volume plugin protocol, served for the node.
//!
//! An agent keeps one session with the server at a time ([`Agent::session`]):
//! it registers (plugins, what it holds), receives the complete desired set,
//! then operations, and reports every outcome. When the session ends the
//! agent keeps tearing down what it was told to and dials again.

pub mod calls;
pub mod command;
pub mod config;
pub mod converge;
pub mod dial;
pub mod docker;
pub mod failures;
mod mount_check;
pub mod mounts;
pub mod plugins;
pub mod record;
pub mod tls;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use berth_proto::berth::v1 as wire;
use berth_proto::berth::v1::agent_message::Message as Up;
use berth_proto::berth::v1::server_message::Message as Down;
use tokio::sync::{mpsc, watch};
use tokio_stream::{Stream, StreamExt};

use berth_csi::{CsiError, Endpoint};
use berth_metrics::readiness::NotReady;
use calls::Paths;
use converge::Converger;
use failures::failure_to_wire;
use plugins::NodePlugins;
use record::{NodeRecord, RecordPlace};

/// What an agent is started with, from `agent.toml` or a `[[node]]`.
#[derive(Clone, Debug)]
pub struct AgentSpec {
    pub node: String,
    pub labels: BTreeMap<String, String>,
    /// Where the node's record is kept; staging and publish paths are in `paths`.
    pub record: RecordPlace,
    pub paths: Paths,
    pub plugins: BTreeMap<String, Endpoint>,
    pub plugin_dir: Option<PathBuf>,
    pub fingerprint_interval: Duration,
    pub heartbeat_interval: Duration,
    pub deadline: Duration,
    /// What the node holds if its record is new: written to the record, then
    /// checked against the mount table like the rest.
    pub seed: Seed,
}

/// What a new node record starts from, asked for only when the record
/// turns out new: a server's `[[node]]` asks the server's table, a walk
/// over every volume it tracks.
#[derive(Clone, Default)]
pub struct Seed(Option<Arc<dyn Fn() -> Vec<wire::Held> + Send + Sync>>);

impl Seed {
    pub fn from_fn(held: impl Fn() -> Vec<wire::Held> + Send + Sync + 'static) -> Seed {
        Seed(Some(Arc::new(held)))
    }

    fn held(&self) -> Vec<wire::Held> {
        self.0.as_ref().map(|f| f()).unwrap_or_default()
    }
}

impl std::fmt::Debug for Seed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Seed(asked when the record is new)"
        } else {
            "Seed(none)"
        })
    }
}

/// Why an agent could not start on its node.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Record(#[from] berth_store::StoreError),
    #[error(
        "the node record {record} does not name {count} volume path(s) in use ({shown}): it was lost or damaged. Restore it from a backup, or unpublish those paths by hand (umount, then remove them) and start again"
    )]
    UnknownMounts {
        record: String,
        count: usize,
        shown: String,
    },
}

/// How a session ended.
#[derive(Debug)]
pub enum SessionEnd {
    /// The stream closed or went quiet; dial again.
    Lost(String),
    /// The server refused this agent; dialing again will not help.
    Refused(String),
}

pub struct Agent {
    spec: AgentSpec,
    plugins: Arc<NodePlugins>,
    converger: Arc<Converger>,
    /// Bumped whenever the plugins' reports change.
    plugins_changed: watch::Sender<Vec<wire::NodePluginReport>>,
    /// Bumped when the node let go of volumes it did not show at start:
    /// the session ends, and the next registration tells the server.
    reregister: watch::Sender<u64>,
    /// Whether a session with the server is open.
    connected: std::sync::atomic::AtomicBool,
    /// The channel of the session with the leader, while there is one.
    leader: watch::Sender<Option<tonic::transport::Channel>>,
}

/// A server silent for this many heartbeats is taken as gone.
const QUIET_HEARTBEATS: u32 = 3;
/// Messages waiting for the server to read them. A server that lets this
/// many pile up is not reading: the session is given up and dialed again
/// (the complete set on the next one says what the node should hold).
pub const UP_QUEUE: usize = 4096;

/// The agent's half of a session's upstream.
pub type ToServer = mpsc::Sender<wire::AgentMessage>;

/// A queue for one session's messages to the server.
pub fn to_server() -> (ToServer, mpsc::Receiver<wire::AgentMessage>) {
    mpsc::channel(UP_QUEUE)
}

impl Agent {
    /// Opens the record (checking it against the mount table), fingerprints
    /// the plugins once, and keeps fingerprinting them in the background.
    pub async fn open(spec: AgentSpec) -> Result<Arc<Agent>, OpenError> {
        let (record, new) = NodeRecord::open_at(&spec.record).await?;
        let plugins = NodePlugins::new(spec.plugins.clone(), spec.plugin_dir.clone(), spec.deadline);
        plugins.scan().await;
        plugins.refresh().await;
        if new {
            let seed = spec.seed.held();
            for h in &seed {
                let held = record::Held {
                    plugin: h.plugin.clone().into(),
                    volume_id: h.volume_id.clone(),
                    level: record::Level::from_wire(h.level),
                    staged: plugins.stages(&h.plugin),
                };
                record.put(&h.berth_id, &held).await?;
            }
            if !seed.is_empty() {
                tracing::info!(node = %spec.node, volumes = seed.len(), "node record started from the store's publications");
            }
        }
        let converger = Converger::open(
            record,
            plugins.clone(),
            spec.paths.clone(),
            &spec.record.describe(),
        )
        .await?;
        let (plugins_changed, _) = watch::channel(plugins.reports());
        let agent = Arc::new(Agent {
            spec,
            plugins,
            converger,
            plugins_changed,
            reregister: watch::channel(0).0,
            connected: Default::default(),
            leader: watch::channel(None).0,
        });
        let watcher = Arc::downgrade(&agent);
        tokio::spawn(async move { watch_plugins(watcher).await });
        Ok(agent)
    }

    pub fn name(&self) -> &str {
        &self.spec.node
    }

    /// The channel to the server this agent has a session with (the
    /// leader), while it has one: what the node's Docker plugin calls.
    pub fn leader(&self) -> watch::Receiver<Option<tonic::transport::Channel>> {
        self.leader.subscribe()
    }

    fn register(&self) -> wire::AgentMessage {
        up(Up::Register(wire::Register {
            node: self.spec.node.clone(),
            labels: self.spec.labels.clone().into_iter().collect(),
            plugins: self.plugins.reports(),
            held: self.converger.held(),
            staging_dir: self.spec.paths.staging_dir.display().to_string(),
            publish_dir: self.spec.paths.publish_dir.display().to_string(),
            version: env!("CARGO_PKG_VERSION").into(),
        }))
    }

    /// One session: registers, then follows the server until the stream ends.
    pub async fn session(
        self: &Arc<Self>,
        to_server: ToServer,
        mut from_server: impl Stream<Item = Result<wire::ServerMessage, tonic::Status>> + Unpin,
    ) -> SessionEnd {
        if to_server.try_send(self.register()).is_err() {
            return SessionEnd::Lost("the server closed the stream".into());
        }
        self.converger.set_link(Some(to_server.clone()));
        self.set_connected(true);
        let end = self.follow(&to_server, &mut from_server).await;
        self.set_connected(false);
        self.converger.set_link(None);
        end
    }

    fn set_connected(&self, connected: bool) {
        self.connected
            .store(connected, std::sync::atomic::Ordering::Relaxed);
        berth_metrics::agent_session(&self.spec.node, connected);
    }

    /// For `/readyz`: the node record takes writes (a full disk makes it fail
    /// until space returns).
    pub fn record_ready(&self) -> Result<String, NotReady> {
        self.converger
            .record_health()
            .map(|()| "open and writable".into())
            .map_err(|e| format!("cannot write: {e}").into())
    }

    /// For `/readyz`: a session with the server is open.
    pub fn session_ready(&self) -> Result<String, NotReady> {
        match self.connected.load(std::sync::atomic::Ordering::Relaxed) {
            true => Ok("a session with the server is open".into()),
            false => Err("no session with a server".into()),
        }
    }

    /// For `/readyz`: every node plugin's last fingerprints succeeded.
    pub fn plugins_ready(&self) -> Result<String, NotReady> {
        let reports = self.plugins.reports();
        let problems: Vec<String> = reports
            .iter()
            .filter(|r| r.health != "healthy")
            .map(|r| match r.reason.is_empty() {
                true => format!("{}: {}", r.plugin, r.health),
                false => format!("{}: {}", r.plugin, r.reason),
            })
            .collect();
        match problems.is_empty() {
            true => Ok(format!("{} fingerprinted and healthy", reports.len())),
            false => Err(problems.join("; ").into()),
        }
    }

    async fn follow(
        self: &Arc<Self>,
        to_server: &ToServer,
        from_server: &mut (impl Stream<Item = Result<wire::ServerMessage, tonic::Status>> + Unpin),
    ) -> SessionEnd {
        let mut beat = self.spec.heartbeat_interval;
        let mut ticks = tokio::time::interval(beat);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut plugins = self.plugins_changed.subscribe();
        let mut reregister = self.reregister.subscribe();
        let mut last_heard = tokio::time::Instant::now();
        loop {
            tokio::select! {
                message = from_server.next() => {
                    last_heard = tokio::time::Instant::now();
                    match message {
                        None => return SessionEnd::Lost("the server closed the stream".into()),
                        Some(Err(status)) if status.code() == tonic::Code::PermissionDenied
                            || status.code() == tonic::Code::Unauthenticated => {
                            return SessionEnd::Refused(status.message().to_string());
                        }
                        Some(Err(status)) => return SessionEnd::Lost(status.message().to_string()),
                        Some(Ok(m)) => match m.message {
                            Some(Down::Desired(set)) => self.converger.apply_set(set),
                            Some(Down::Operation(op)) => self.converger.apply_op(op),
                            Some(Down::Call(call)) => self.answer(call, to_server.clone()),
                            Some(Down::Refusal(r)) => return SessionEnd::Refused(r.reason),
                            Some(Down::Terms(t)) => {
                                let asked = paced(self.spec.heartbeat_interval, &t);
                                if asked != beat {
                                    tracing::info!(node = %self.spec.node, interval = %humantime::format_duration(asked), "the server paces this node's heartbeats");
                                    beat = asked;
                                    ticks = tokio::time::interval_at(tokio::time::Instant::now() + beat, beat);
                                    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                                }
                            }
                            Some(Down::Heartbeat(_)) | None => {}
                        },
                    }
                }
                _ = ticks.tick() => {
                    if last_heard.elapsed() > beat * QUIET_HEARTBEATS {
                        return SessionEnd::Lost(format!(
                            "nothing from the server for {}",
                            humantime::format_duration(last_heard.elapsed())
                        ));
                    }
                    let now = berth_model::clock::now_ms();
                    match to_server.try_send(up(Up::Heartbeat(wire::Heartbeat { sent_unix_ms: now }))) {
                        Ok(()) => {}
                        Err(mpsc::error::TrySendError::Full(_)) => {
                            return SessionEnd::Lost(format!(
                                "the server is not reading this session ({UP_QUEUE} messages waiting)"
                            ));
                        }
                        Err(mpsc::error::TrySendError::Closed(_)) => {
                            return SessionEnd::Lost("the server closed the stream".into());
                        }
                    }
                }
                Ok(()) = reregister.changed() => {
                    return SessionEnd::Lost("registering again: the node let go of volumes it did not show".into());
                }
                Ok(()) = plugins.changed() => {
                    let reports = plugins.borrow_and_update().clone();
                    let _ = to_server.try_send(up(Up::Plugins(wire::Plugins { plugins: reports })));
                }
            }
        }
    }

    /// Expand and stats: asked once, answered once.
    fn answer(&self, call: wire::Call, to_server: ToServer) {
        let client = self.plugins.client(&call.plugin);
        let paths = self.spec.paths.clone();
        tokio::spawn(async move {
            use wire::answer::Answer as A;
            use wire::call::Call as C;
            let missing = || CsiError {
                plugin: call.plugin.clone(),
                call: "node call",
                failure: berth_csi::Failure::Unreachable(format!(
                    "the agent has no node plugin {:?}",
                    call.plugin
                )),
            };
            let outside = |path: &str, call: &'static str| CsiError {
                plugin: "agent".into(),
                call,
                failure: berth_csi::Failure::Local {
                    code: tonic::Code::InvalidArgument,
                    message: format!("refused: {path:?} is not a volume path of this agent's"),
                },
            };
            let answer = match (client, call.call) {
                (None, _) => A::Failure(failure_to_wire(&missing())),
                (_, Some(C::Expand(req))) if !paths.holds(&req.volume_path) => {
                    A::Failure(failure_to_wire(&outside(&req.volume_path, "NodeExpandVolume")))
                }
                (_, Some(C::Stats(req))) if !paths.holds(&req.volume_path) => {
                    A::Failure(failure_to_wire(&outside(&req.volume_path, "NodeGetVolumeStats")))
                }
                (_, Some(C::Expand(req)))
                    if !req.staging_target_path.is_empty() && !paths.holds(&req.staging_target_path) =>
                {
                    A::Failure(failure_to_wire(&outside(
                        &req.staging_target_path,
                        "NodeExpandVolume",
                    )))
                }
                (_, Some(C::Stats(req)))
                    if !req.staging_target_path.is_empty() && !paths.holds(&req.staging_target_path) =>
                {
                    A::Failure(failure_to_wire(&outside(
                        &req.staging_target_path,
                        "NodeGetVolumeStats",
                    )))
                }
                (Some(c), Some(C::Expand(req))) => c
                    .node_expand_volume(req)
                    .await
                    .map_or_else(|e| A::Failure(failure_to_wire(&e)), A::Expand),
                (Some(c), Some(C::Stats(req))) => c
                    .node_get_volume_stats(req)
                    .await
                    .map_or_else(|e| A::Failure(failure_to_wire(&e)), A::Stats),
                (Some(_), None) => return,
            };
            let _ = to_server.try_send(up(Up::Answer(wire::Answer {
                id: call.id,
                answer: Some(answer),
            })));
        });
    }
}

/// The heartbeat interval for a session: the agent's own, or the server's
/// when it asks for slower beats (at most [`LONGEST_BEAT`]).
fn paced(own: Duration, terms: &wire::Terms) -> Duration {
    own.max(Duration::from_millis(terms.heartbeat_interval_ms).min(LONGEST_BEAT))
}

/// However large the fleet, a node beats at least this often.
pub const LONGEST_BEAT: Duration = Duration::from_secs(120);

fn up(message: Up) -> wire::AgentMessage {
    wire::AgentMessage {
        message: Some(message),
    }
}

/// Scans the plugin directory every second and fingerprints every interval;
/// publishes the reports when they change. Ends with the agent.
async fn watch_plugins(agent: std::sync::Weak<Agent>) {
    let mut last_refresh = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let Some(agent) = agent.upgrade() else { return };
        agent.plugins.scan().await;
        if last_refresh.elapsed() >= agent.spec.fingerprint_interval {
            agent.plugins.refresh().await;
            last_refresh = tokio::time::Instant::now();
        }
        if agent.converger.confirm_lost().await {
            agent.reregister.send_modify(|n| *n += 1);
        }
        let reports = agent.plugins.reports();
        agent.plugins_changed.send_if_modified(|old| {
            let changed = *old != reports;
            if changed {
                *old = reports;
            }
            changed
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_may_slow_heartbeats_never_speed_them_up() {
        let terms = |ms| wire::Terms {
            heartbeat_interval_ms: ms,
        };
        let own = Duration::from_secs(5);
        assert_eq!(paced(own, &terms(0)), own, "no terms: the agent's own");
        assert_eq!(paced(own, &terms(1000)), own, "never faster than its own");
        assert_eq!(paced(own, &terms(25_000)), Duration::from_secs(25));
        assert_eq!(
            paced(own, &terms(u64::MAX)),
            LONGEST_BEAT,
            "and never slower than the longest"
        );
    }
}
