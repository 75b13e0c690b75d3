//! The API's side of policy: what reloads and rolls out policy sets (served
//! by `berth serve`), and the answers about sets, decisions and shadows.

use berth_proto::berth::v1 as api;
use tonic::{Request, Response, Status};

use super::BerthApi;
use super::codes::status;
use crate::policy::{OnError, PolicyStats};

/// The most decisions one ListDecisions answer carries (each up to 256 KiB
/// logged, most a few hundred bytes).
const DECISIONS_PAGE: usize = 500;
const DECISIONS_PAGE_BYTES: usize = 3 << 20;

/// What reloads the policy modules from the config file, all or none
/// (`berth serve` implements it; the API only asks).
#[tonic::async_trait]
pub trait PolicyReload: Send + Sync {
    async fn reload(&self) -> Result<Vec<PolicyStats>, ReloadError>;
    /// Puts a set file's `[[policy]]` tables in service as the cluster's set
    /// (relative module paths from `base`).
    async fn apply(&self, text: &str, base: &std::path::Path) -> Result<SetInService, ReloadError>;
    async fn in_service(&self) -> SetInService;
    /// Makes the module shadowing `decision` (every shadowed one when `None`) live.
    async fn promote(&self, decision: Option<crate::policy::Decision>) -> Result<SetInService, ReloadError>;
    /// Returns to version `to` (the one before when `None`).
    async fn rollback(&self, to: Option<u64>) -> Result<SetInService, ReloadError>;
}

/// The policy set in service and its modules' counters.
pub struct SetInService {
    pub set: Option<crate::store::PolicySetRecord>,
    pub stats: Vec<PolicyStats>,
}

/// Why a reload put nothing in service (the modules in service stay).
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("berth serve was started without a config file to reload from")]
    NoConfig,
    #[error(transparent)]
    Config(#[from] crate::model::settings::ConfigError),
    #[error(transparent)]
    Policies(#[from] crate::policy::SetError),
    #[error(transparent)]
    Fetch(#[from] berth_oci::FetchError),
    /// The set in service (or asked for) is not signed by a key
    /// `[policy_trust]` trusts now: what the operator can do about it.
    #[error(
        "{0}; the modules in service keep running: roll back to a version signed by a trusted key (`berth policy rollback --to N`), or sign the module with a trusted key (`berth policy sign`) and reload"
    )]
    Untrusted(#[source] berth_oci::FetchError),
    #[error("storing the policy set: {0}")]
    Store(#[from] crate::store::StoreError),
    #[error("starting the WebAssembly engine: {0}")]
    Engine(String),
    #[error("the reload stopped: {0}")]
    Stopped(tokio::task::JoinError),
    /// A promotion or rollback that cannot be done as asked.
    #[error("{0}")]
    Rollout(String),
}

impl ReloadError {
    /// Whether a module's signature did not pass (what a stored set that
    /// no key of this server's trusts fails with).
    pub fn is_trust_failure(&self) -> bool {
        match self {
            ReloadError::Untrusted(_) => true,
            ReloadError::Fetch(e) => matches!(*e.error, berth_oci::OciError::Signature { .. }),
            _ => false,
        }
    }

    /// The same error, said as a trust failure when a module's signature
    /// did not pass.
    pub fn as_trust_failure(self) -> ReloadError {
        match self {
            ReloadError::Fetch(e) if matches!(*e.error, berth_oci::OciError::Signature { .. }) => {
                ReloadError::Untrusted(e)
            }
            other => other,
        }
    }
}

pub(super) fn counters(stats: Vec<PolicyStats>) -> Vec<api::PolicyCounters> {
    stats
        .into_iter()
        .map(|s| api::PolicyCounters {
            module: s.module,
            decisions: s.decisions.iter().map(ToString::to_string).collect(),
            on_error: match s.on_error {
                OnError::Fail => "fail",
                OnError::Builtin => "builtin",
            }
            .into(),
            calls: s.calls,
            failures: s.failures,
            fallbacks: s.fallbacks,
            made_ahead: s.made_ahead,
            digest: s.digest,
            signed_by: s.signed_by,
        })
        .collect()
}

pub(super) fn policy_set(s: SetInService, servers: Vec<api::Server>) -> api::PolicySet {
    let set = s.set.unwrap_or_else(|| crate::store::PolicySetRecord {
        version: 0,
        applied_ms: 0,
        ..crate::store::PolicySetRecord::first(String::new(), "", String::new())
    });
    api::PolicySet {
        version: set.version,
        applied_ms: set.applied_ms,
        applied_by: set.applied_by,
        text: set.text,
        policies: counters(s.stats),
        servers,
        change: set.change,
        history: set
            .history
            .into_iter()
            .map(|p| api::PriorPolicySet {
                version: p.version,
                applied_ms: p.applied_ms,
                applied_by: p.applied_by,
                change: p.change,
                text: p.text,
            })
            .collect(),
        promoted: set.promoted,
    }
}

impl BerthApi {
    pub(super) async fn answer_list_decisions(
        &self,
        request: Request<api::ListDecisionsRequest>,
    ) -> Result<Response<api::ListDecisionsResponse>, Status> {
        let r = request.into_inner();
        let decision: crate::policy::Decision = r.decision.parse().map_err(Status::invalid_argument)?;
        let limit = (r.limit as usize).clamp(1, DECISIONS_PAGE);
        let page = self
            .manager
            .logged_decisions(decision, &r.after, limit)
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        let mut decisions = Vec::new();
        let mut bytes = 0;
        for (key, entry) in page {
            let json = serde_json::to_string(&entry).unwrap_or_default();
            bytes += json.len();
            // Within a gRPC message's default 4 MiB: the rest is the next page.
            if bytes > DECISIONS_PAGE_BYTES && !decisions.is_empty() {
                break;
            }
            decisions.push(api::LoggedDecision { key, json });
        }
        Ok(Response::new(api::ListDecisionsResponse {
            decisions,
            unlogged: self.manager.decisions_unlogged(),
        }))
    }

    pub(super) async fn answer_policy_diff(
        &self,
        _: Request<api::PolicyDiffRequest>,
    ) -> Result<Response<api::PolicyDiffResponse>, Status> {
        fn json<T: serde::Serialize>(all: Vec<T>) -> Vec<String> {
            all.iter()
                .map(|v| serde_json::to_string(v).unwrap_or_default())
                .collect()
        }
        let (counts, diffs) = match self.manager.policies().shadows() {
            Some(s) => (json(s.counts()), json(s.diffs())),
            None => (Vec::new(), Vec::new()),
        };
        Ok(Response::new(api::PolicyDiffResponse { counts, diffs }))
    }
}

impl BerthApi {
    pub(super) async fn answer_apply_policy_set(
        &self,
        request: Request<api::ApplyPolicySetRequest>,
    ) -> Result<Response<api::PolicySet>, Status> {
        let r = request.into_inner();
        if !std::path::Path::new(&r.base_dir).is_absolute() {
            return Err(Status::invalid_argument("base_dir: an absolute path is required"));
        }
        let set = self
            .reloader
            .apply(&r.text, std::path::Path::new(&r.base_dir))
            .await
            .map_err(status)?;
        Ok(Response::new(policy_set(set, self.servers().await)))
    }

    pub(super) async fn answer_promote_policy(
        &self,
        request: Request<api::PromotePolicyRequest>,
    ) -> Result<Response<api::PolicySet>, Status> {
        let r = request.into_inner();
        let decision = match r.decision.as_str() {
            "" => None,
            d => Some(d.parse().map_err(Status::invalid_argument)?),
        };
        let set = self.reloader.promote(decision).await.map_err(status)?;
        Ok(Response::new(policy_set(set, self.servers().await)))
    }

    pub(super) async fn answer_rollback_policy(
        &self,
        request: Request<api::RollbackPolicyRequest>,
    ) -> Result<Response<api::PolicySet>, Status> {
        let to = Some(request.into_inner().version).filter(|v| *v > 0);
        let set = self.reloader.rollback(to).await.map_err(status)?;
        Ok(Response::new(policy_set(set, self.servers().await)))
    }
}
