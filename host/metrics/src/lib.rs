//! Prometheus metrics, in OpenMetrics text from `prometheus-client`, served
//! with `/healthz` and `/readyz` by [`http`] when `metrics = "host:port"` is
//! configured. Off by default: until [`install`] is called every recording
//! function returns at its first load, so an unscraped Berth pays nothing.
//!
//! The registry is process-wide, not per term: counters keep counting
//! across leadership changes, as Prometheus expects of a process.

pub mod allocator;
mod client_hello;
pub mod http;
mod labels;
pub mod listener;
pub mod live;
pub mod logging;
pub mod notify;
pub mod readiness;

use std::sync::{LazyLock, OnceLock};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

pub use labels::{Text, code_name};
use live::Live;
use readiness::Readiness;

/// The Kubernetes CSI sidecars' buckets for `csi_sidecar_operations_seconds`
/// (kubernetes-csi/csi-lib-utils), so their dashboards read Berth's histogram.
pub const CSI_BUCKETS: [f64; 13] = [
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 25.0, 50.0, 120.0, 300.0, 600.0,
];

type Labels<const N: usize> = [(&'static str, Text); N];
type Histograms<const N: usize> = Family<Labels<N>, Histogram, fn() -> Histogram>;

/// Every metric Berth records. Gauges that describe current state (volumes
/// by state, queue depth, plugin and node health) are read at scrape time
/// from whatever registered with [`Metrics::live`].
pub struct Metrics {
    registry: Registry,
    csi_operations: Histograms<3>,
    policy_seconds: Histograms<2>,
    policy_decisions: Family<Labels<3>, Counter>,
    policy_traps: Family<Labels<2>, Counter>,
    policy_shadow: Family<Labels<3>, Counter>,
    admission_verdicts: Family<Labels<2>, Counter>,
    policy_rollbacks: Family<Labels<1>, Counter>,
    retries: Family<Labels<1>, Counter>,
    give_ups: Family<Labels<1>, Counter>,
    api_requests: Family<Labels<2>, Counter>,
    store_commit_seconds: Histogram,
    store_commit_batch: Histogram,
    leader: Gauge,
    store_compacted: Gauge,
    agent_connected: Family<Labels<1>, Gauge>,
    agent_sessions: Family<Labels<1>, Counter>,
    desired_sets: Counter,
    desired_set_bytes: Counter,
    heartbeats: Counter,
    live: std::sync::Arc<Live>,
}

static METRICS: OnceLock<Metrics> = OnceLock::new();
static READINESS: LazyLock<Readiness> = LazyLock::new(Readiness::default);

/// This process's readiness checks, answered on `/readyz`.
pub fn readiness() -> &'static Readiness {
    &READINESS
}

/// The metrics, once [`install`]ed.
pub fn get() -> Option<&'static Metrics> {
    METRICS.get()
}

/// Turns recording on for the rest of the process.
pub fn install() -> &'static Metrics {
    METRICS.get_or_init(Metrics::new)
}

fn csi_histogram() -> Histogram {
    Histogram::new(CSI_BUCKETS)
}

fn policy_histogram() -> Histogram {
    // 5 µs to ~1.3 s: a Rust guest decides in microseconds, a Python one in
    // about a millisecond, a deadline is near a second.
    Histogram::new(exponential_buckets(5e-6, 2.0, 19))
}

fn store_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1e-4, 2.0, 16))
}

impl Metrics {
    fn new() -> Self {
        let m = Metrics {
            registry: Registry::default(),
            csi_operations: Family::new_with_constructor(csi_histogram),
            policy_seconds: Family::new_with_constructor(policy_histogram),
            policy_decisions: Family::default(),
            policy_traps: Family::default(),
            policy_shadow: Family::default(),
            admission_verdicts: Family::default(),
            policy_rollbacks: Family::default(),
            retries: Family::default(),
            give_ups: Family::default(),
            api_requests: Family::default(),
            store_commit_seconds: store_histogram(),
            store_commit_batch: Histogram::new(exponential_buckets(1.0, 2.0, 12)),
            leader: Gauge::default(),
            store_compacted: Gauge::default(),
            agent_connected: Family::default(),
            agent_sessions: Family::default(),
            desired_sets: Counter::default(),
            desired_set_bytes: Counter::default(),
            heartbeats: Counter::default(),
            live: Default::default(),
        };
        // Families are shared handles: the registry encodes what `m` records.
        let mut r = Registry::default();
        r.register(
            "berth_csi_operations_seconds",
            "CSI calls made by Berth, by driver, method and gRPC status (the CSI sidecars' histogram)",
            m.csi_operations.clone(),
        );
        r.register(
            "berth_api_requests",
            "Calls of the Berth API that changed something or were refused for who asked, by identity (`management` or `token:<accessor>`) and gRPC status",
            m.api_requests.clone(),
        );
        r.register(
            "berth_policy_decision_seconds",
            "Time to decide, by policy module (or builtin) and decision",
            m.policy_seconds.clone(),
        );
        r.register(
            "berth_policy_decisions",
            "Policy decisions by module, decision and outcome (ok, guest_error, fallback)",
            m.policy_decisions.clone(),
        );
        r.register(
            "berth_admission_verdicts",
            "Admission answers by module and verdict (allow, deny, allow_with, failed: no answer Berth could use, so not admitted)",
            m.admission_verdicts.clone(),
        );
        r.register(
            "berth_policy_shadow_decisions",
            "Decisions a shadowed module made beside the live one, by outcome (same, different, failed, dropped)",
            m.policy_shadow.clone(),
        );
        r.register(
            "berth_policy_rollbacks",
            "Policy sets rolled back, by reason (operator, guard)",
            m.policy_rollbacks.clone(),
        );
        r.register(
            "berth_policy_traps",
            "Guests that trapped (including deadlines and memory limits), by module and decision",
            m.policy_traps.clone(),
        );
        r.register(
            "berth_retries",
            "Failed CSI steps scheduled for another attempt, by operation",
            m.retries.clone(),
        );
        r.register(
            "berth_give_ups",
            "Failed CSI steps given up on (the volume waits for an operator), by operation",
            m.give_ups.clone(),
        );
        r.register(
            "berth_store_commit_seconds",
            "Time for one durable store commit",
            m.store_commit_seconds.clone(),
        );
        r.register(
            "berth_store_commit_batch_size",
            "Record changes written together in one store commit",
            m.store_commit_batch.clone(),
        );
        r.register(
            "berth_leader",
            "1 while this server leads (always, with the embedded store)",
            m.leader.clone(),
        );
        r.register(
            "berth_store_compacted_revision",
            "The etcd revision this server, leading, last compacted history to (0: none yet)",
            m.store_compacted.clone(),
        );
        r.register(
            "berth_agent_connected",
            "1 while a node's agent has a session with the leading server",
            m.agent_connected.clone(),
        );
        r.register(
            "berth_agent_sessions",
            "Sessions a node's agent opened with a server",
            m.agent_sessions.clone(),
        );
        r.register(
            "berth_desired_sets",
            "Complete desired sets sent to agents (one each time a session starts)",
            m.desired_sets.clone(),
        );
        r.register(
            "berth_desired_set_bytes",
            "Bytes of complete desired sets sent to agents, as encoded on the wire",
            m.desired_set_bytes.clone(),
        );
        r.register(
            "berth_agent_heartbeats",
            "Heartbeats received from agents",
            m.heartbeats.clone(),
        );
        r.register_collector(Box::new(m.live.clone()));
        Metrics { registry: r, ..m }
    }

    /// The OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(16 * 1024);
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Where current-state gauges come from.
    pub fn live(&self) -> &Live {
        &self.live
    }
}

/// One CSI call: `method` as the sidecars name it (`/csi.v1.Controller/CreateVolume`).
pub fn csi_call(driver: &Text, method: &'static str, code: tonic::Code, took: Duration) {
    if let Some(m) = get() {
        let labels = [
            ("driver_name", driver.clone()),
            ("method_name", Text::from_static(method)),
            ("grpc_status_code", Text::from_static(code_name(code))),
        ];
        m.csi_operations
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }
}

/// How a policy decision ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// The guest failed and the decision failed with it (`on_error = "fail"`).
    GuestError,
    /// The guest failed and the built-in policy decided (`on_error = "builtin"`).
    Fallback,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::GuestError => "guest_error",
            Outcome::Fallback => "fallback",
        }
    }
}

/// One policy decision by `module` ("builtin" for the built-in policies).
pub fn decision(module: &Text, decision: &'static str, outcome: Outcome, trapped: bool, took: Duration) {
    let Some(m) = get() else { return };
    let labels = [
        ("module", module.clone()),
        ("decision", Text::from_static(decision)),
    ];
    m.policy_seconds
        .get_or_create(&labels)
        .observe(took.as_secs_f64());
    if trapped {
        m.policy_traps.get_or_create(&labels).inc();
    }
    let [module, decision] = labels;
    m.policy_decisions
        .get_or_create(&[module, decision, ("outcome", Text::from_static(outcome.as_str()))])
        .inc();
}

/// An admission answer of `module`: `allow`, `deny`, `allow_with` or
/// `failed` (the request was not admitted for want of an answer).
pub fn admission(module: &str, verdict: &'static str) {
    if let Some(m) = get() {
        m.admission_verdicts
            .get_or_create(&[
                ("module", Text::from(module)),
                ("verdict", Text::from_static(verdict)),
            ])
            .inc();
    }
}

/// A shadowed module's decision, compared with the live one's.
pub fn shadow(module: &str, decision: &'static str, outcome: &'static str) {
    if let Some(m) = get() {
        m.policy_shadow
            .get_or_create(&[
                ("decision", Text::from_static(decision)),
                ("module", Text::from(module)),
                ("outcome", Text::from_static(outcome)),
            ])
            .inc();
    }
}

/// A policy set rolled back (`operator`, or `guard` on its own).
pub fn rollback(reason: &'static str) {
    if let Some(m) = get() {
        m.policy_rollbacks
            .get_or_create(&[("reason", Text::from_static(reason))])
            .inc();
    }
}

/// A failed step that will be tried again.
pub fn retry(operation: &str) {
    if let Some(m) = get() {
        m.retries
            .get_or_create(&[("operation", Text::from(operation))])
            .inc();
    }
}

/// An API call the audit log records, by who made it and how it ended.
pub fn api_request(identity: &str, code: tonic::Code) {
    if let Some(m) = get() {
        m.api_requests
            .get_or_create(&[
                ("identity", Text::from(identity)),
                ("code", Text::from_static(code_name(code))),
            ])
            .inc();
    }
}

/// A failed step given up on.
pub fn give_up(operation: &str) {
    if let Some(m) = get() {
        m.give_ups
            .get_or_create(&[("operation", Text::from(operation))])
            .inc();
    }
}

/// One store commit of `records` changes.
pub fn store_commit(records: usize, took: Duration) {
    if let Some(m) = get() {
        m.store_commit_seconds.observe(took.as_secs_f64());
        m.store_commit_batch.observe(records as f64);
    }
}

/// The leader compacted etcd's history up to `revision`.
pub fn store_compacted(revision: i64) {
    if let Some(m) = get() {
        m.store_compacted.set(revision);
    }
}

/// Whether this server leads.
pub fn set_leader(leads: bool) {
    if let Some(m) = get() {
        m.leader.set(i64::from(leads));
    }
}

/// A complete desired set of `bytes` (encoded) was sent to an agent.
pub fn desired_set(bytes: usize) {
    if let Some(m) = get() {
        m.desired_sets.inc();
        m.desired_set_bytes.inc_by(bytes as u64);
    }
}

/// A heartbeat was received from an agent.
pub fn heartbeat() {
    if let Some(m) = get() {
        m.heartbeats.inc();
    }
}

/// A node's agent opened (true) or ended (false) its session with the server.
pub fn agent_session(node: &str, connected: bool) {
    if let Some(m) = get() {
        let labels = [("node", Text::from(node))];
        m.agent_connected.get_or_create(&labels).set(i64::from(connected));
        if connected {
            m.agent_sessions.get_or_create(&labels).inc();
        }
    }
}
