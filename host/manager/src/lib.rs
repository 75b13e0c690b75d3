//! The volume manager: desired and observed state of every volume, and the
//! reconciler that drives CSI plugins until they match.
//!
//! - `table` — the records and their durable changes; `indexes` — kept in step with them;
//! - `requests` — the operators' requests;
//! - `plan` — the next step for a record (pure);
//! - `outcome` — what a step changes in a record, and how a step fails;
//! - `reconcile` — the loop, write batching, failures and retries;
//! - `steps` — the CSI call of each step;
//! - `decisions` — guest decisions: naming and placement;
//! - `decision_log` — every decision, kept in the store for replay and explain;
//! - `snapshots` — snapshot requests; `adoption` — import and forget;
//! - `inquiries` — health and orphans, asked of the plugins on request;
//! - `capacity` — GET_CAPACITY in placement;
//! - `node_view` — nodes as placement and the API see them;
//! - `nodes` — node-side operations; `queue` — the work queue;
//! - `node_sync` — what a (re)registering node is told, and records it lost.
//!
//! On start, the manager loads the store and queues every volume, so
//! unfinished work resumes.

mod adoption;
mod capacity;
mod conflict;
mod deadlines;
pub mod decision_log;
mod decisions;
mod gauges;
mod groups;
mod indexes;
mod inquiries;
mod missing;
mod node_admin;
mod node_sync;
mod node_view;
pub mod nodes;
mod outcome;
mod plan;
mod plugin_waits;
mod queue;
mod reconcile;
mod records;
mod requests;
pub mod secrets;
mod snapshot_steps;
mod snapshots;
mod steps;
mod table;
mod taken;
pub mod tenancy;
mod topology_checks;
mod unready;

pub use groups::{GroupView, MAX_GROUP_MEMBERS};
pub use inquiries::{Health, NodeHealth, Orphans};
pub use node_sync::as_sync;
pub use node_view::NodePluginView;
pub use requests::validate_spec;
pub use snapshots::SnapshotView;
pub use table::{Counts, Waiting};

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::secrets::Secrets;
use berth_config::Config;
use berth_csi::registry::Registry;
use berth_model::{VolumeRecord, VolumeState};
use berth_policy::Policies;
use berth_store::{Store, StoreError};
pub use conflict::{Conflict, Unforgettable};
pub use missing::Missing;
use queue::Queue;
use table::VolumeTable;
pub use taken::Taken;
pub use unready::Unready;

/// Why an operator's request was refused. The API maps these to gRPC codes.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    NotFound(#[from] Missing),
    #[error(transparent)]
    Conflict(#[from] Conflict),
    /// A name already taken by something else: a volume with another spec,
    /// a snapshot of another volume, a backend volume already Berth's, a
    /// publication with other access (CSI's ALREADY_EXISTS, every time).
    #[error(transparent)]
    AlreadyExists(#[from] Taken),
    /// A limit would be passed: a node's volume limit.
    #[error(
        "node {node:?} already has {published} volumes of {plugin:?} published, its plugin's limit is {max}"
    )]
    NodeFull {
        node: String,
        plugin: String,
        published: u64,
        max: u64,
    },
    #[error(transparent)]
    Unavailable(#[from] Unready),
    /// What the caller may not touch (a node's Docker, beyond its scope).
    #[error(transparent)]
    Denied(#[from] tenancy::Denied),
    #[error(transparent)]
    InUse(#[from] InUse),
    /// A field beyond its bounds (a new volume's name outside the rule...).
    #[error(transparent)]
    OutOfBounds(#[from] berth_model::bounds::OutOfBounds),
}

/// A volume asked to be deleted while it is published: a workload may be
/// using it. Deleting it anyway (`force`) unpublishes it first.
#[derive(Debug, thiserror::Error)]
#[error(
    "volume {volume} is published on {}: unpublish it first (`berth volume unpublish {volume}`), or delete it with --force to unpublish it everywhere and then delete it",
    nodes.join(", ")
)]
pub struct InUse {
    /// The volume's name, as the caller wrote it (shown escaped).
    pub volume: String,
    pub nodes: Vec<String>,
}

/// Counts for operators and monitoring, without listing every volume.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub volumes: u64,
    pub states: Vec<(VolumeState, u64)>,
    /// Volumes with work queued or running.
    pub busy: u64,
    /// Volumes waiting to retry a failed call.
    pub retrying: u64,
    /// Volumes that cannot progress until something else happens.
    pub waiting: u64,
}

pub struct VolumeManager {
    config: Config,
    table: VolumeTable,
    registry: Arc<Registry>,
    policies: Arc<Policies>,
    secrets: Secrets,
    /// Every node, through its agent.
    nodes: Arc<dyn nodes::NodeAgent>,
    queue: Queue,
    /// When each retrying volume is due, by the monotonic clock.
    deadlines: deadlines::Deadlines,
    capacity: capacity::CapacityCache,
    /// With several servers: whether this one may still act as the leader.
    tenure: std::sync::OnceLock<Tenure>,
    /// When this manager (a term) started, by the monotonic clock: until a
    /// heartbeat timeout after it, a node not heard from yet may be an agent
    /// still reattaching, not a node gone.
    started: tokio::time::Instant,
    /// Where decisions are logged; started with the workers.
    store: Arc<dyn Store>,
    decision_log: std::sync::OnceLock<decision_log::DecisionLog>,
}

/// Asked before every call to a plugin; false once the lease it leads by
/// may have run out.
pub type Tenure = Box<dyn Fn() -> bool + Send + Sync>;

pub use berth_model::clock::now_ms;

impl VolumeManager {
    /// Loads every volume from the store; call [`VolumeManager::start`] to reconcile.
    pub fn new(
        config: Config,
        store: Arc<dyn Store>,
        registry: Arc<Registry>,
        policies: Arc<Policies>,
        nodes: Arc<dyn nodes::NodeAgent>,
    ) -> Result<Arc<Self>, StoreError> {
        Ok(Arc::new(VolumeManager {
            table: VolumeTable::load(store.clone())?,
            store,
            decision_log: std::sync::OnceLock::new(),
            secrets: Secrets::new(config.secrets_dir.clone()),
            config,
            registry,
            policies,
            nodes,
            queue: Queue::default(),
            deadlines: Default::default(),
            capacity: Default::default(),
            tenure: std::sync::OnceLock::new(),
            started: tokio::time::Instant::now(),
        }))
    }

    /// Makes every plugin call wait on `tenure` (set once, before `start`):
    /// a leader that cannot vouch for its lease calls nothing, and its term
    /// is ended around the waiting step.
    pub fn act_only_while(&self, tenure: Tenure) {
        let _ = self.tenure.set(tenure);
    }

    /// Whether this server may act (always, with one server).
    pub fn may_act(&self) -> bool {
        self.tenure.get().is_none_or(|t| t())
    }

    /// Starts the workers and queues every stored volume.
    pub fn start(self: &Arc<Self>) -> tokio::task::JoinSet<()> {
        self.decision_log
            .get_or_init(|| decision_log::DecisionLog::start(self.store.clone(), self.config.decision_log));
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..self.config.workers {
            let m = self.clone();
            workers.spawn(async move {
                loop {
                    let id = m.queue.take().await;
                    m.reconcile(&id).await;
                    m.queue.done(&id);
                    // A queue that is never empty (a restart's every volume)
                    // and volumes that need no call never wait: without this,
                    // workers kept the runtime's threads from the API until
                    // the queue drained.
                    tokio::task::consume_budget().await;
                }
            });
        }
        let ids = self.table.ids();
        tracing::info!(
            volumes = ids.len(),
            workers = self.config.workers,
            "reconciler started"
        );
        self.queue.push_all(ids);
        workers
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Keeps a decision in the decision log (once the workers started).
    pub(crate) fn log_decision(&self, entry: berth_policy::logged::Logged) {
        if let Some(log) = self.decision_log.get() {
            log.record(entry);
        }
    }

    /// Decisions that went unlogged.
    pub fn decisions_unlogged(&self) -> u64 {
        self.decision_log.get().map_or(0, |l| l.dropped())
    }

    /// A page of the decision log: see [`decision_log::read`].
    pub async fn logged_decisions(
        &self,
        decision: berth_policy::Decision,
        after: &str,
        limit: usize,
    ) -> Result<Vec<(String, berth_policy::logged::Logged)>, StoreError> {
        decision_log::read(self.store.as_ref(), decision, after, limit).await
    }

    pub fn policies(&self) -> &Arc<Policies> {
        &self.policies
    }

    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Every node known, with its agent's state.
    pub fn node_summaries(&self) -> Vec<nodes::NodeSummary> {
        self.nodes.nodes()
    }

    /// Where a volume is (or would be) published on a node.
    pub fn target_path(&self, node: &str, berth_id: &str) -> std::path::PathBuf {
        self.nodes.target_path(node, berth_id)
    }

    /// Bumped on every change of any volume.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.table.subscribe()
    }

    /// Why the volume cannot progress, while it cannot.
    pub fn waiting(&self, id: &str) -> Option<table::Waiting> {
        self.table.waiting(id)
    }

    pub fn get(&self, name: &str) -> Option<VolumeRecord> {
        self.table.by_name(name)
    }

    /// Every volume, by name.
    pub fn list(&self) -> Vec<VolumeRecord> {
        self.table.list()
    }

    /// A page of the volumes by name: up to `max` named after `after`, and
    /// the name the next page starts after, if there is one.
    pub fn list_page(&self, after: &str, max: usize) -> (Vec<VolumeRecord>, Option<String>) {
        self.table.page(after, max)
    }

    pub fn summary(&self) -> Summary {
        let Counts {
            volumes,
            states,
            retrying,
            waiting,
        } = self.table.counts();
        Summary {
            volumes,
            states,
            busy: self.queue.len() as u64,
            retrying,
            waiting,
        }
    }

    /// Removes a volume for good (after DeleteVolume, or if it never existed on a plugin).
    async fn remove_record(&self, id: &str) -> Result<(), StoreError> {
        self.deadlines.clear(id);
        self.table.remove(id).await
    }

    /// Queues a volume again after `delay`.
    fn wake_after(self: &Arc<Self>, id: &str, delay: Duration) {
        let m = Arc::downgrade(self);
        let id = id.to_string();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            if let Some(m) = m.upgrade() {
                m.queue.push(&id);
            }
        });
    }
}
