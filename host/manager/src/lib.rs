//! The volume manager: desired and observed state of every volume, and the
//! reconciler that drives CSI plugins until they match.
//!
//! One [`VolumeManager`] is made per term; what its parts share is one
//! `Core`, and each concern is a view of it with methods of its own, in a
//! folder of its own:
//!
//! - `shared` — the [`Core`] and the few primitives every concern uses;
//! - `requests/` — [`Requests`]: what the API asks of volumes (declare,
//!   change, publish, unpublish, delete, retry, import, forget), the
//!   topology checks at declaration and publish, and the health and orphans
//!   asked of the plugins. Every request passes here: it is checked, made
//!   durable, then queued.
//! - `tenancy.rs` — [`Docker`](tenancy::Docker): the same requests bounded by a node's Docker scope.
//! - `snapshots/` — [`Snapshots`]: snapshots and group snapshots.
//! - `worker/` — [`Worker`]: the loop (`mod.rs`) that takes a volume from the
//!   queue, plans its next step (`plan.rs`, pure), makes the call
//!   (`steps.rs`, `snapshot_steps.rs`), applies the outcome (`outcome.rs`)
//!   and retries (`deadlines.rs`); what holds steps back (`plugin_waits.rs`);
//!   what it owns, the queue, the retries' deadlines and the tenure (`work.rs`).
//! - `decisions/` — [`Decisions`]: naming and placement by policy, the
//!   capacity placement asks for, and the decision log.
//! - `fleet/` — [`Fleet`]: nodes as placement and the API see them, their
//!   drains, forgets and removals, and what a (re)registering node is told.
//! - `nodes.rs` — the node side's interface ([`nodes::NodeAgent`],
//!   [`nodes::NodeSync`]), which `cluster` implements.
//! - `table/` — the records, their indexes and their durable changes.
//! - `quotas` — what each namespace may hold, admitted against the table's usage.
//! - `checks` — conformance reports recorded with the server, each
//!   plugin's latest.
//! - `admission` — the admission decision asked before a request is
//!   accepted, as the caller the API names.
//! - `errors/` — why a request is refused; `secrets` — the operator's CSI
//!   secrets, read when a call needs them; `gauges` — the state as metrics.
//!
//! On start, the manager loads the store and queues every volume, so
//! unfinished work resumes.

pub mod admission;
pub mod checks;
mod decisions;
mod errors;
mod fleet;
mod gauges;
pub mod nodes;
pub mod quotas;
mod requests;
pub mod secrets;
mod shared;
mod snapshots;
mod table;
pub mod tenancy;
mod worker;

pub use decisions::Decisions;
pub use fleet::Fleet;
pub use fleet::NodePluginView;
pub use fleet::sync::as_sync;
pub use requests::Requests;
pub use requests::inquiries::{Health, NodeHealth, Orphans};
pub use requests::validate_spec;
pub use shared::Core;
pub use snapshots::SnapshotView;
pub use snapshots::Snapshots;
pub use snapshots::groups::{GroupView, MAX_GROUP_MEMBERS};
pub use table::{Counts, PAGE_SCAN, Pages, Waiting};
pub use worker::Worker;

use std::sync::Arc;

use tokio::sync::watch;

use crate::secrets::Secrets;
use berth_config::Config;
use berth_csi::registry::Registry;
use berth_model::{Namespace, VolumeRecord, VolumeState};
use berth_policy::Policies;
use berth_store::{Store, StoreError};
pub use errors::conflict::{Conflict, Unforgettable};
pub use errors::missing::Missing;
pub use errors::taken::Taken;
pub use errors::unready::Unready;
use table::VolumeTable;

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
    /// The namespace would pass its quota.
    #[error(transparent)]
    OverQuota(#[from] quotas::OverQuota),
    /// A secret the namespace was not given.
    #[error(transparent)]
    SecretNotGiven(#[from] secrets::NotGiven),
    /// The admission policy did not admit the request.
    #[error(transparent)]
    Refused(#[from] admission::Refused),
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

/// The volume manager, as the server sees it: made from the store, the
/// plugins, the policies and the node side; started once; asked through
/// its concerns (`requests()`, `snapshots()`, `nodes()`, `docker()`), each
/// a view of the one [`Core`] they share.
pub struct VolumeManager {
    core: Arc<Core>,
}

/// Asked before every call to a plugin; false once the lease it leads by
/// may have run out.
pub type Tenure = Box<dyn Fn() -> bool + Send + Sync>;

pub use berth_model::clock::now_ms;

impl std::ops::Deref for VolumeManager {
    type Target = Arc<Core>;
    fn deref(&self) -> &Arc<Core> {
        &self.core
    }
}

impl VolumeManager {
    /// Loads every volume from the store; call [`VolumeManager::start`] to reconcile.
    pub fn new(
        config: Config,
        store: Arc<dyn Store>,
        registry: Arc<Registry>,
        policies: Arc<Policies>,
        nodes: Arc<dyn nodes::NodeAgent>,
    ) -> Result<Arc<Self>, StoreError> {
        let core = Core {
            table: VolumeTable::load(store.clone())?,
            quotas: quotas::Quotas::load(store.clone())?,
            store,
            decision_log: std::sync::OnceLock::new(),
            secrets: Secrets::new(config.secrets_dir.clone()),
            config,
            registry,
            policies,
            nodes,
            work: Default::default(),
            capacity: Default::default(),
            started: tokio::time::Instant::now(),
        };
        Ok(Arc::new(VolumeManager { core: Arc::new(core) }))
    }

    /// Makes every plugin call wait on `tenure` (set once, before `start`):
    /// a leader that cannot vouch for its lease calls nothing, and its term
    /// is ended around the waiting step.
    pub fn act_only_while(&self, tenure: Tenure) {
        let _ = self.work.tenure.set(tenure);
    }

    /// Whether this server may act (always, with one server).
    pub fn may_act(&self) -> bool {
        self.core.may_act()
    }

    /// Queues every stored volume for the workers' first look (once a
    /// term): a term queues them as it starts, so `busy` counts them from
    /// the API's first answer, and starts the workers once the API answers
    /// (a restart's first pass does not take the cores from the API).
    pub fn queue_every_volume(&self) {
        if self
            .work
            .first_pass_queued
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            return;
        }
        let ids = self.table.ids();
        tracing::info!(
            volumes = ids.len(),
            "every volume queued for the reconciler's first look"
        );
        self.work.queue.push_all(ids);
    }

    /// Starts the workers, and queues every stored volume if
    /// [`VolumeManager::queue_every_volume`] has not.
    pub fn start(self: &Arc<Self>) -> tokio::task::JoinSet<()> {
        self.decision_log
            .get_or_init(|| decisions::log::DecisionLog::start(self.store.clone(), self.config.decision_log));
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..self.config.workers {
            let m = self.core.clone();
            workers.spawn(async move {
                loop {
                    let id = m.work.queue.take().await;
                    m.worker().reconcile(&id).await;
                    m.work.queue.done(&id);
                    // A queue that is never empty (a restart's every volume)
                    // and volumes that need no call never wait: without this,
                    // workers kept the runtime's threads from the API until
                    // the queue drained.
                    tokio::task::consume_budget().await;
                }
            });
        }
        self.work
            .started
            .store(true, std::sync::atomic::Ordering::Release);
        self.queue_every_volume();
        tracing::info!(
            queued = self.work.queue.len(),
            workers = self.config.workers,
            "reconciler started"
        );
        workers
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Decisions that went unlogged.
    pub fn decisions_unlogged(&self) -> u64 {
        self.decision_log.get().map_or(0, |l| l.dropped())
    }

    /// A page of the decision log: see [`decisions::log::read`].
    pub async fn logged_decisions(
        &self,
        decision: berth_policy::Decision,
        after: &str,
        limit: usize,
    ) -> Result<Vec<(String, berth_policy::logged::Logged)>, StoreError> {
        decisions::log::read(self.store.as_ref(), decision, after, limit).await
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
        self.table.waits().get(id)
    }

    /// Every volume in the namespaces `within` takes (every namespace
    /// with `None`), by namespace and name.
    pub fn list(&self, within: Option<&dyn Fn(&Namespace) -> bool>) -> Vec<VolumeRecord> {
        self.table.list(within)
    }

    /// A page of the volumes by namespace and name (see [`Pages`]): up to
    /// `max` after `after` that `matches` takes, and the token the next
    /// page starts after, if there is one. A page looks at no more than
    /// [`PAGE_SCAN`] volumes: a filter that takes few may answer
    /// fewer than `max` (none, even) with a token to go on from.
    pub fn list_page(
        &self,
        pages: Pages<'_>,
        after: &str,
        max: usize,
        matches: &dyn Fn(&VolumeRecord) -> bool,
    ) -> (Vec<VolumeRecord>, Option<String>) {
        self.table.page(pages, after, max, matches)
    }

    /// What each namespace holding volumes holds, by name.
    pub fn namespace_usage(&self) -> Vec<(Namespace, quotas::Usage)> {
        self.table.counts().namespaces
    }

    /// Writes the outcomes workers parked for the volumes' next writes:
    /// at the end of a term, so the next one does not make their calls
    /// again. How many volumes were written.
    pub async fn write_parked(&self) -> usize {
        self.table.parked().write_all().await
    }

    /// The table's counts (by state, by namespace, held as stored).
    pub fn volume_counts(&self) -> Counts {
        self.table.counts()
    }

    pub fn summary(&self) -> Summary {
        let Counts {
            volumes,
            states,
            retrying,
            waiting,
            ..
        } = self.table.counts();
        Summary {
            volumes,
            states,
            busy: self.work.queue.len() as u64,
            retrying,
            waiting,
        }
    }
}
