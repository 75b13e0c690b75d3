//! Every node the server knows, with its agent's session: the plugins it
//! reported, its paths, when it was last heard from, and the operations
//! waiting for an outcome. Implements the manager's [`NodeAgent`]: each
//! node operation is sent down the node's session and answered by the
//! agent's report.

mod operations;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};
use std::time::{Duration, SystemTime};

use berth_proto::berth::v1 as wire;
use berth_proto::berth::v1::server_message::Message as Down;
use tokio::sync::{mpsc, oneshot};

use crate::node_ids::NodeIds;
use berth_agent::plugins::status_of;
use berth_csi::fingerprint::{Fingerprint, NodeInfo};
use berth_csi::registry::{Health, PluginStatus};
use berth_manager::nodes::{NodeState, NodeSummary, NodeSync};
use berth_model::Paths;
use berth_store::NodeRecord;
use operations::{Waiter, fail_waiting};

/// Messages waiting for an agent to read them. An agent that lets this
/// many pile up is not reading its session: the session is closed rather
/// than the server's memory growing with what it does not read.
pub const DOWN_QUEUE: usize = 4096;

/// The server's half of a session's downstream.
pub type ToAgent = mpsc::Sender<wire::ServerMessage>;

/// A queue for one session's messages to its agent.
pub fn to_agent() -> (ToAgent, mpsc::Receiver<wire::ServerMessage>) {
    mpsc::channel(DOWN_QUEUE)
}

pub(super) struct Link {
    id: u64,
    pub(super) to_agent: ToAgent,
    /// Told when the directory lets go of the session (a newer one, the
    /// node removed or forgotten), so its task ends.
    pub(super) closed: Arc<tokio::sync::Notify>,
    /// The complete set has been sent: operations may follow.
    pub(super) synced: bool,
}

#[derive(Default)]
pub(super) struct Node {
    labels: BTreeMap<String, String>,
    pub(super) plugins: BTreeMap<String, PluginStatus>,
    paths: Option<Paths>,
    pub(super) link: Option<Link>,
    /// When the agent was last heard from: shown (wall clock), and judged
    /// by the monotonic clock, so a step of the wall clock changes no
    /// node's freshness.
    last_seen: Option<SystemTime>,
    last_heard: Option<tokio::time::Instant>,
    pub(super) version: u64,
    pub(super) attempt: u64,
    waiters: HashMap<String, Vec<Waiter>>,
    pub(super) calls: HashMap<u64, oneshot::Sender<wire::answer::Answer>>,
    pub(super) next_call: u64,
    draining: bool,
    forgotten: bool,
    cert: Option<String>,
    /// As last written to the store.
    remembered: Option<NodeRecord>,
}

/// Why a node may not join or register; its agent is told.
#[derive(Debug, thiserror::Error)]
pub enum NodeRefused {
    #[error("node {0:?} was forgotten (`berth node forget`); `berth node remove {0}` lets it join again")]
    Forgotten(String),
    #[error("this agent's certificate is for node {certified:?}, not {node:?}")]
    OtherNode { certified: String, node: String },
    #[error("node {0}")]
    Name(#[source] berth_model::bounds::OutOfBounds),
    #[error("node {node:?} claims too much: {why}")]
    Claims {
        node: String,
        #[source]
        why: berth_model::bounds::OutOfBounds,
    },
}

pub struct Directory {
    pub(super) nodes: RwLock<BTreeMap<String, Arc<Mutex<Node>>>>,
    sync: OnceLock<Weak<dyn NodeSync>>,
    /// A node silent this long is down.
    pub(super) heartbeat_timeout: Duration,
    /// How long an operation waits for the agent's outcome.
    pub(super) operation_timeout: Duration,
    /// The driver name each plugin must report, when configured.
    drivers: BTreeMap<String, Option<String>>,
    sessions: std::sync::atomic::AtomicU64,
    /// Which node each (driver, CSI node id) is: a node id is one node's,
    /// down or not, until that node is removed.
    node_ids: NodeIds,
    /// The fleet's heartbeats, paced to what the server takes in a second.
    pub pace: crate::pace::Pace,
    /// Which node holds each certificate (by fingerprint): every attach on
    /// the TLS endpoint asks, so it is an index, not a walk of every node.
    /// Taken after a node's own lock, never held while taking one.
    certs: RwLock<HashMap<String, String>>,
}

/// Lets go of a session: its agent is told why (and logs it), its task ends.
fn close(link: Link, reason: String) {
    let _ = link
        .to_agent
        .try_send(down(Down::Refusal(wire::Refusal { reason })));
    link.closed.notify_one();
}

pub(super) fn lock(node: &Mutex<Node>) -> std::sync::MutexGuard<'_, Node> {
    node.lock().unwrap_or_else(|p| p.into_inner())
}

impl Directory {
    pub fn new(
        heartbeat_timeout: Duration,
        operation_timeout: Duration,
        drivers: BTreeMap<String, Option<String>>,
    ) -> Arc<Self> {
        Arc::new(Directory {
            nodes: RwLock::new(BTreeMap::new()),
            sync: OnceLock::new(),
            heartbeat_timeout,
            operation_timeout,
            drivers,
            sessions: Default::default(),
            node_ids: Default::default(),
            pace: Default::default(),
            certs: Default::default(),
        })
    }

    /// Who is told when nodes register; set once, after the manager exists.
    pub fn set_sync(&self, sync: Weak<dyn NodeSync>) {
        let _ = self.sync.set(sync);
    }

    pub(super) fn syncer(&self) -> Option<Arc<dyn NodeSync>> {
        self.sync.get().and_then(Weak::upgrade)
    }

    /// A node known before its agent registers (remembered in the store,
    /// or a `[[node]]`), shown as unknown with what was last known of its
    /// plugins (their health unknown).
    pub fn expect(&self, record: NodeRecord) {
        let mut nodes = self.nodes.write().unwrap_or_else(|p| p.into_inner());
        let mut n = lock(nodes.entry(record.name.clone()).or_default());
        n.labels = record.labels.clone();
        for (plugin, info) in &record.plugins {
            let status = n.plugins.entry(plugin.clone()).or_insert_with(|| PluginStatus {
                health: Health::Unknown,
                fingerprint: None,
                last_checked: None,
                transitions: 0,
            });
            if status.fingerprint.is_none() {
                status.fingerprint = info
                    .clone()
                    .map(|info| Arc::new(remembered_fingerprint(&record.name, plugin, info)));
            }
        }
        self.node_ids.remember(&record.name, n.plugins.values());
        n.draining |= record.draining;
        n.forgotten |= record.forgotten;
        if let Some(cert) = &record.cert {
            self.index_cert(record.name.as_str(), n.cert.as_deref(), cert);
        }
        n.cert = record.cert.clone().or(n.cert.take());
        // A configured node's own paths come first; the store's are as the agent last registered.
        n.paths = n.paths.take().or(record.paths.clone());
        n.remembered = Some(record);
    }

    /// The node as the store keeps it.
    fn record(name: &str, n: &Node) -> NodeRecord {
        NodeRecord {
            name: name.to_string(),
            labels: n.labels.clone(),
            plugins: n
                .plugins
                .iter()
                .map(|(p, s)| (p.clone(), s.fingerprint.as_ref().and_then(|f| f.node.clone())))
                .collect(),
            draining: n.draining,
            forgotten: n.forgotten,
            cert: n.cert.clone(),
            paths: n.paths.clone(),
        }
    }

    /// The node whose agent joined with the certificate of fingerprint `cert`.
    pub fn node_for_cert(&self, cert: &str) -> Option<String> {
        let name = self
            .certs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(cert)
            .cloned()?;
        // The node itself has the last word: the index only finds it.
        let node = self.get(&name)?;
        let holds = lock(&node).cert.as_deref() == Some(cert);
        holds.then_some(name)
    }

    /// `node` now holds `cert`, in place of `old`.
    fn index_cert(&self, node: &str, old: Option<&str>, cert: &str) {
        let mut certs = self.certs.write().unwrap_or_else(|p| p.into_inner());
        if let Some(old) = old.filter(|o| *o != cert) {
            certs.remove(old);
        }
        certs.insert(cert.to_string(), node.to_string());
    }

    /// Whether `node` has an identity a join would take over: a
    /// certificate, or a session now.
    pub fn holds_identity(&self, node: &str) -> bool {
        self.get(node).is_some_and(|n| {
            let n = lock(&n);
            n.cert.is_some() || n.link.is_some()
        })
    }

    /// Records the certificate `node` joined with (replacing an earlier one,
    /// which is refused from now on, its session ended); the node as it is
    /// to be remembered.
    pub fn joined(&self, node: &str, cert: String) -> Result<NodeRecord, NodeRefused> {
        let entry = {
            let mut nodes = self.nodes.write().unwrap_or_else(|p| p.into_inner());
            nodes.entry(node.to_string()).or_default().clone()
        };
        let mut n = lock(&entry);
        if n.forgotten {
            return Err(NodeRefused::Forgotten(node.to_string()));
        }
        if n.cert.is_some()
            && let Some(link) = self.unlink(&mut n)
        {
            close(
                link,
                format!(
                    "node {node:?} joined again with a replacing token: this agent's certificate is revoked"
                ),
            );
            fail_waiting(&mut n, node, "the node joined again");
        }
        self.index_cert(node, n.cert.as_deref(), &cert);
        n.cert = Some(cert);
        let record = Self::record(node, &n);
        n.remembered = Some(record.clone());
        Ok(record)
    }

    /// Marks a node draining (or not), or forgotten; the node as it is now
    /// to be remembered. `None` when there is no such node.
    pub fn mark(&self, node: &str, draining: Option<bool>, forgotten: bool) -> Option<NodeRecord> {
        let entry = self.get(node)?;
        let mut n = lock(&entry);
        if let Some(d) = draining {
            n.draining = d;
        }
        if forgotten {
            n.forgotten = true;
            if let Some(link) = self.unlink(&mut n) {
                close(
                    link,
                    format!(
                        "node {node:?} was forgotten (`berth node forget`); `berth node remove {node}` lets it join again"
                    ),
                );
            }
            fail_waiting(&mut n, node, "the node was forgotten");
        }
        let record = Self::record(node, &n);
        n.remembered = Some(record.clone());
        Some(record)
    }

    /// Drops a node from the directory; its agent's session ends.
    pub fn remove(&self, node: &str) {
        let removed = self.nodes.write().unwrap_or_else(|p| p.into_inner()).remove(node);
        if let Some(entry) = removed {
            let mut n = lock(&entry);
            if let Some(link) = self.unlink(&mut n) {
                close(
                    link,
                    format!("node {node:?} was removed (`berth node remove`): its certificate is revoked"),
                );
            }
            fail_waiting(&mut n, node, "the node was removed");
            if let Some(cert) = &n.cert {
                self.certs.write().unwrap_or_else(|p| p.into_inner()).remove(cert);
            }
            drop(n);
            self.node_ids.release(node);
        }
    }

    /// The node as the store keeps it, when it is known.
    pub fn node_record(&self, node: &str) -> Option<NodeRecord> {
        self.get(node).map(|n| Self::record(node, &lock(&n)))
    }

    pub fn forgotten(&self, node: &str) -> bool {
        self.get(node).is_some_and(|n| lock(&n).forgotten)
    }

    pub(super) fn get(&self, name: &str) -> Option<Arc<Mutex<Node>>> {
        self.nodes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    /// The node's plugins with the server's own judgement: the driver name
    /// must be the configured one, and a CSI node id no other node's.
    fn judged(&self, node: &str, reports: &[wire::NodePluginReport]) -> BTreeMap<String, PluginStatus> {
        let mut judged: BTreeMap<String, PluginStatus> = reports
            .iter()
            .map(|r| (r.plugin.clone(), status_of(node, r)))
            .collect();
        let mut taken = self.node_ids.claim(node, &judged);
        for (plugin, status) in judged.iter_mut() {
            let wrong_driver = match (self.drivers.get(plugin), &status.fingerprint) {
                (Some(Some(expected)), Some(f)) if &f.name != expected => Some(format!(
                    "plugin reports driver name {:?}, expected {expected:?}",
                    f.name
                )),
                _ => None,
            };
            if let Some(reason) = wrong_driver.or_else(|| taken.remove(plugin)) {
                status.health = Health::Unhealthy { reason };
            }
        }
        judged
    }

    /// Takes a registration: the node's session is now this one (an older
    /// one is closed with a refusal its agent logs). Returns the session's
    /// id, what tells it that it was closed, and the node as it is to be
    /// remembered when that changed.
    #[allow(clippy::type_complexity)]
    pub(super) fn attach(
        &self,
        r: &wire::Register,
        to_agent: ToAgent,
    ) -> Result<(u64, Arc<tokio::sync::Notify>, Option<NodeRecord>), NodeRefused> {
        let id = self.sessions.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let node = {
            let mut nodes = self.nodes.write().unwrap_or_else(|p| p.into_inner());
            nodes.entry(r.node.clone()).or_default().clone()
        };
        let mut n = lock(&node);
        if n.forgotten {
            return Err(NodeRefused::Forgotten(r.node.clone()));
        }
        n.labels = r.labels.clone().into_iter().collect();
        n.plugins = self.judged(&r.node, &r.plugins);
        n.paths = Some(Paths {
            staging_dir: PathBuf::from(&r.staging_dir),
            publish_dir: PathBuf::from(&r.publish_dir),
        });
        n.last_seen = Some(SystemTime::now());
        n.last_heard = Some(tokio::time::Instant::now());
        fail_waiting(&mut n, &r.node, "the agent registered again");
        if let Some(older) = self.unlink(&mut n) {
            tracing::warn!(node = %r.node, "a newer session of the node replaces an open one; the older is closed");
            close(
                older,
                format!("a newer session of node {:?} replaced this one", r.node),
            );
        }
        let closed = Arc::new(tokio::sync::Notify::new());
        if let Some(terms) = self.pace.terms() {
            let _ = to_agent.try_send(down(Down::Terms(terms)));
        }
        n.link = Some(Link {
            id,
            to_agent,
            closed: closed.clone(),
            synced: false,
        });
        self.pace.linked(1);
        let record = Self::record(&r.node, &n);
        let changed = n.remembered.as_ref() != Some(&record);
        if changed {
            n.remembered = Some(record.clone());
        }
        Ok((id, closed, changed.then_some(record)))
    }

    /// Sends the complete set; operations may follow it.
    pub(super) fn send_set(&self, node: &str, session: u64, volumes: Vec<wire::Desired>) -> bool {
        let Some(entry) = self.get(node) else { return false };
        let mut n = lock(&entry);
        n.version += 1;
        let version = n.version;
        let Some(link) = n.link.as_mut().filter(|l| l.id == session) else {
            return false;
        };
        let set = down(Down::Desired(wire::DesiredSet { version, volumes }));
        let bytes = prost::Message::encoded_len(&set);
        link.synced = link.to_agent.try_send(set).is_ok();
        if link.synced {
            berth_metrics::desired_set(bytes);
        }
        link.synced
    }

    /// The session ended: what waited on it fails, the node is no longer connected.
    pub(super) fn detach(&self, node: &str, session: u64) {
        let Some(entry) = self.get(node) else { return };
        let mut n = lock(&entry);
        if n.link.as_ref().is_some_and(|l| l.id == session) {
            self.unlink(&mut n);
            fail_waiting(&mut n, node, "the agent's session ended");
        }
    }

    /// Takes the node's session away (to close or drop it), counted.
    fn unlink(&self, n: &mut Node) -> Option<Link> {
        let link = n.link.take();
        if link.is_some() {
            self.pace.linked(-1);
        }
        link
    }

    /// How long a session may be silent before it is closed: the configured
    /// timeout, or three of the beats the fleet was asked for.
    pub fn session_timeout(&self) -> Duration {
        self.heartbeat_timeout.max(self.pace.asked() * 3)
    }

    /// Asks every session for slower beats when the fleet has grown past
    /// what the server takes in a second (never faster: a session's timeout
    /// only grows). Called after a session attaches.
    pub(super) fn repace(&self) {
        let Some(terms) = self.pace.grown() else { return };
        tracing::info!(
            sessions = self.pace.sessions(),
            interval_ms = terms.heartbeat_interval_ms,
            "the fleet's heartbeats are spread out"
        );
        let nodes: Vec<_> = self
            .nodes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        for node in nodes {
            if let Some(link) = &lock(&node).link {
                let _ = link.to_agent.try_send(down(Down::Terms(terms)));
            }
        }
    }

    pub(super) fn heard(&self, node: &str) {
        if let Some(entry) = self.get(node) {
            let mut n = lock(&entry);
            n.last_seen = Some(SystemTime::now());
            n.last_heard = Some(tokio::time::Instant::now());
        }
    }

    pub(super) fn set_plugins(&self, node: &str, reports: &[wire::NodePluginReport]) {
        if let Some(entry) = self.get(node) {
            let mut n = lock(&entry);
            n.plugins = self.judged(node, reports);
        }
    }

    pub(super) fn paths(&self, node: &str) -> Option<Paths> {
        self.get(node).and_then(|e| lock(&e).paths.clone())
    }

    pub(super) fn summary(&self, name: &str, n: &Node) -> NodeSummary {
        let timeout = self.session_timeout();
        let fresh = n.last_heard.is_some_and(|t| t.elapsed() <= timeout);
        let state = match (&n.link, n.last_seen) {
            _ if n.forgotten => NodeState::Forgotten,
            (Some(l), _) if l.synced && fresh => NodeState::Ready,
            (_, None) => NodeState::Unknown,
            _ => NodeState::Down,
        };
        NodeSummary {
            name: name.to_string(),
            labels: n.labels.clone(),
            state,
            last_seen: n.last_seen,
            plugins: n.plugins.clone(),
            draining: n.draining,
        }
    }
}

/// A fingerprint standing for what a node's plugin last reported, until its agent is back.
fn remembered_fingerprint(node: &str, plugin: &str, info: NodeInfo) -> Fingerprint {
    Fingerprint {
        endpoint: format!("agent {node} (remembered)"),
        name: plugin.to_string(),
        vendor_version: String::new(),
        manifest: BTreeMap::new(),
        ready: false,
        plugin_capabilities: Vec::new(),
        controller: None,
        node: Some(info),
        unserved: Vec::new(),
    }
}

pub(super) fn down(message: Down) -> wire::ServerMessage {
    wire::ServerMessage {
        message: Some(message),
    }
}
