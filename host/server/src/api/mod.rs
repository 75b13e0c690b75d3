//! The `berth.v1` API: a tonic service over a unix socket, translating between
//! the wire messages and the volume manager.

use std::sync::Arc;

use berth_proto::berth::v1 as api;
use tonic::{Request, Response, Status};

mod codes;
mod convert;
mod docker_calls;
mod inquiries;
pub mod introspection;
mod node_volumes;
mod socket;

use convert::volume_summary;
pub use convert::{spec_from_api, volume_to_api};
pub use node_volumes::NodeVolumesApi;
pub use socket::{SocketError, bind};

use crate::csi::registry::Health;
use crate::manager::{RequestError, VolumeManager};
use crate::policy::{OnError, PolicyStats};
use codes::{Refusal, status};
use docker_calls::{DockerCall, docker_node};

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

pub struct BerthApi {
    manager: Arc<VolumeManager>,
    reloader: Arc<dyn PolicyReload>,
    /// The TLS cluster endpoint, when there is one (join tokens come from its CA).
    cluster: Option<Arc<crate::cluster::pki::ClusterTls>>,
    /// With the etcd store: this server's part in the election (it leads
    /// while this API answers).
    election: Option<Arc<crate::leadership::Election>>,
}

impl ReloadError {
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

impl BerthApi {
    pub fn new(
        manager: Arc<VolumeManager>,
        reloader: Arc<dyn PolicyReload>,
        cluster: Option<Arc<crate::cluster::pki::ClusterTls>>,
        election: Option<Arc<crate::leadership::Election>>,
    ) -> Self {
        BerthApi {
            manager,
            reloader,
            cluster,
            election,
        }
    }

    /// The TLS cluster endpoint, which join tokens are for.
    fn cluster(&self) -> Result<&crate::cluster::pki::ClusterTls, Status> {
        self.cluster.as_deref().ok_or_else(|| status(Refusal::NoCluster))
    }

    /// The servers sharing the etcd store, this one (the leader) first.
    async fn servers(&self) -> Vec<api::Server> {
        let Some(election) = &self.election else {
            return Vec::new();
        };
        let mut members = election.members().await.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "listing the servers in etcd failed");
            vec![election.me().clone()]
        });
        members.sort_by_key(|m| (m.name != election.me().name, m.name.clone()));
        members
            .into_iter()
            .map(|m| api::Server {
                leader: m.name == election.me().name,
                name: m.name,
                api: m.api,
                cluster_address: m.forward.unwrap_or_default(),
                policy_set: m.policy_set.unwrap_or_default(),
                policy_error: m.policy_error.unwrap_or_default(),
            })
            .collect()
    }
}

fn counters(stats: Vec<PolicyStats>) -> Vec<api::PolicyCounters> {
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
            digest: s.digest,
        })
        .collect()
}

fn health(h: &Health) -> (&'static str, String) {
    match h {
        Health::Unknown => ("unknown", String::new()),
        Health::Healthy => ("healthy", String::new()),
        Health::Unhealthy { reason } => ("unhealthy", reason.clone()),
    }
}

#[tonic::async_trait]
impl api::berth_server::Berth for BerthApi {
    async fn create_volume(
        &self,
        req: Request<api::CreateVolumeRequest>,
    ) -> Result<Response<api::Volume>, Status> {
        let docker = docker_node(&req)?;
        let spec = req
            .into_inner()
            .spec
            .ok_or_else(|| status(Refusal::Missing("spec")))?;
        if let Some(node) = docker {
            return self
                .docker_call(&node, DockerCall::Create(Box::new(spec)))
                .await
                .map(Response::new);
        }
        let scope = spec
            .docker_scope
            .parse()
            .map_err(|e| status(RequestError::Invalid(format!("docker_scope: {e}"))))?;
        let spec = spec_from_api(spec).map_err(status)?;
        let r = self
            .manager
            .create_with_scope(spec, scope)
            .await
            .map_err(status)?;
        Ok(Response::new(volume_to_api(&self.manager, &r)))
    }

    async fn get_volume(&self, req: Request<api::GetVolumeRequest>) -> Result<Response<api::Volume>, Status> {
        let docker = docker_node(&req)?;
        let name = req.into_inner().name;
        if let Some(node) = docker {
            return self
                .docker_call(&node, DockerCall::Get(name))
                .await
                .map(Response::new);
        }
        let r = self
            .manager
            .get(&name)
            .ok_or_else(|| status(RequestError::from(berth_manager::Missing::Volume(name.clone()))))?;
        Ok(Response::new(volume_to_api(&self.manager, &r)))
    }

    async fn list_volumes(
        &self,
        req: Request<api::ListVolumesRequest>,
    ) -> Result<Response<api::ListVolumesResponse>, Status> {
        if let Some(node) = docker_node(&req)? {
            return Ok(Response::new(self.docker_list(&node)));
        }
        let req = req.into_inner();
        // No page size: every volume at once, as before paging existed.
        let (records, next) = match req.max_entries {
            0 => (self.manager.list(), None),
            max => {
                // A token is a volume's name, longer ones of earlier releases included.
                berth_model::bounds::text("starting_token", &req.starting_token, 1024)
                    .map_err(|e| status(RequestError::from(e)))?;
                self.manager.list_page(&req.starting_token, max as usize)
            }
        };
        let volumes = records.iter().map(|r| volume_summary(&self.manager, r)).collect();
        Ok(Response::new(api::ListVolumesResponse {
            volumes,
            next_token: next.unwrap_or_default(),
        }))
    }

    async fn delete_volume(
        &self,
        req: Request<api::DeleteVolumeRequest>,
    ) -> Result<Response<api::Volume>, Status> {
        if let Some(node) = docker_node(&req)? {
            let call = DockerCall::Delete(req.into_inner().name);
            return self.docker_call(&node, call).await.map(Response::new);
        }
        let req = req.into_inner();
        let r = self.manager.delete(&req.name, req.force).await.map_err(status)?;
        Ok(Response::new(volume_to_api(&self.manager, &r)))
    }

    async fn publish_volume(
        &self,
        req: Request<api::PublishVolumeRequest>,
    ) -> Result<Response<api::Volume>, Status> {
        let docker = docker_node(&req)?;
        let req = req.into_inner();
        if let Some(node) = docker {
            let call = DockerCall::Publish {
                name: req.name,
                readonly: req.readonly,
            };
            return self.docker_call(&node, call).await.map(Response::new);
        }
        let node = (!req.node.is_empty()).then_some(req.node.as_str());
        let r = self
            .manager
            .publish(&req.name, node, req.readonly)
            .await
            .map_err(status)?;
        Ok(Response::new(volume_to_api(&self.manager, &r)))
    }

    async fn unpublish_volume(
        &self,
        req: Request<api::UnpublishVolumeRequest>,
    ) -> Result<Response<api::Volume>, Status> {
        let docker = docker_node(&req)?;
        let req = req.into_inner();
        if let Some(node) = docker {
            let call = DockerCall::Unpublish(req.name);
            return self.docker_call(&node, call).await.map(Response::new);
        }
        if req.node.is_empty() {
            return Err(status(Refusal::Missing("node")));
        }
        let r = self
            .manager
            .unpublish(&req.name, &req.node)
            .await
            .map_err(status)?;
        Ok(Response::new(volume_to_api(&self.manager, &r)))
    }

    async fn expand_volume(
        &self,
        req: Request<api::ExpandVolumeRequest>,
    ) -> Result<Response<api::Volume>, Status> {
        let req = req.into_inner();
        let r = self
            .manager
            .expand(&req.name, req.required_bytes)
            .await
            .map_err(status)?;
        Ok(Response::new(volume_to_api(&self.manager, &r)))
    }

    async fn modify_volume(
        &self,
        req: Request<api::ModifyVolumeRequest>,
    ) -> Result<Response<api::Volume>, Status> {
        let req = req.into_inner();
        let changes = req.mutable_parameters.into_iter().collect();
        let r = self
            .manager
            .modify_parameters(&req.name, changes)
            .await
            .map_err(status)?;
        Ok(Response::new(volume_to_api(&self.manager, &r)))
    }

    async fn import_volume(
        &self,
        req: Request<api::ImportVolumeRequest>,
    ) -> Result<Response<api::Volume>, Status> {
        let req = req.into_inner();
        let spec = req.spec.ok_or_else(|| status(Refusal::Missing("spec")))?;
        let spec = spec_from_api(spec).map_err(status)?;
        let r = self.manager.import(spec, &req.volume_id).await.map_err(status)?;
        Ok(Response::new(volume_to_api(&self.manager, &r)))
    }

    async fn forget_volume(
        &self,
        req: Request<api::ForgetVolumeRequest>,
    ) -> Result<Response<api::Volume>, Status> {
        let r = self
            .manager
            .forget(&req.into_inner().name)
            .await
            .map_err(status)?;
        Ok(Response::new(volume_to_api(&self.manager, &r)))
    }

    async fn set_docker_scope(
        &self,
        req: Request<api::SetDockerScopeRequest>,
    ) -> Result<Response<api::Volume>, Status> {
        let req = req.into_inner();
        let scope = req
            .scope
            .parse()
            .map_err(|e| status(RequestError::Invalid(format!("scope: {e}"))))?;
        let r = self
            .manager
            .set_docker_scope(&req.name, scope)
            .await
            .map_err(status)?;
        Ok(Response::new(volume_to_api(&self.manager, &r)))
    }

    async fn volume_health(
        &self,
        req: Request<api::VolumeHealthRequest>,
    ) -> Result<Response<api::VolumeHealthResponse>, Status> {
        let h = self
            .manager
            .health(&req.into_inner().name)
            .await
            .map_err(status)?;
        Ok(Response::new(inquiries::health_to_api(h)))
    }

    async fn create_snapshot(
        &self,
        req: Request<api::CreateSnapshotRequest>,
    ) -> Result<Response<api::Snapshot>, Status> {
        let req = req.into_inner();
        let s = self
            .manager
            .create_snapshot(&req.name, &req.volume)
            .await
            .map_err(status)?;
        Ok(Response::new(inquiries::snapshot_to_api(&s)))
    }

    async fn delete_snapshot(
        &self,
        req: Request<api::DeleteSnapshotRequest>,
    ) -> Result<Response<api::Snapshot>, Status> {
        let s = self
            .manager
            .delete_snapshot(&req.into_inner().name)
            .await
            .map_err(status)?;
        Ok(Response::new(inquiries::snapshot_to_api(&s)))
    }

    async fn get_snapshot(
        &self,
        req: Request<api::GetSnapshotRequest>,
    ) -> Result<Response<api::Snapshot>, Status> {
        let s = self
            .manager
            .get_snapshot(&req.into_inner().name)
            .map_err(status)?;
        Ok(Response::new(inquiries::snapshot_to_api(&s)))
    }

    async fn list_snapshots(
        &self,
        req: Request<api::ListSnapshotsRequest>,
    ) -> Result<Response<api::ListSnapshotsResponse>, Status> {
        let volume = req.into_inner().volume;
        let all = self
            .manager
            .list_snapshots((!volume.is_empty()).then_some(volume.as_str()))
            .map_err(status)?;
        Ok(Response::new(api::ListSnapshotsResponse {
            snapshots: all.iter().map(inquiries::snapshot_to_api).collect(),
        }))
    }

    async fn create_group_snapshot(
        &self,
        req: Request<api::CreateGroupSnapshotRequest>,
    ) -> Result<Response<api::GroupSnapshot>, Status> {
        let req = req.into_inner();
        let g = self
            .manager
            .create_group_snapshot(&req.name, &req.volumes)
            .await
            .map_err(status)?;
        Ok(Response::new(inquiries::group_to_api(&g)))
    }

    async fn delete_group_snapshot(
        &self,
        req: Request<api::DeleteGroupSnapshotRequest>,
    ) -> Result<Response<api::GroupSnapshot>, Status> {
        let g = self
            .manager
            .delete_group_snapshot(&req.into_inner().name)
            .await
            .map_err(status)?;
        Ok(Response::new(inquiries::group_to_api(&g)))
    }

    async fn get_group_snapshot(
        &self,
        req: Request<api::GetGroupSnapshotRequest>,
    ) -> Result<Response<api::GroupSnapshot>, Status> {
        let g = self
            .manager
            .get_group_snapshot(&req.into_inner().name)
            .map_err(status)?;
        Ok(Response::new(inquiries::group_to_api(&g)))
    }

    async fn list_group_snapshots(
        &self,
        _: Request<api::ListGroupSnapshotsRequest>,
    ) -> Result<Response<api::ListGroupSnapshotsResponse>, Status> {
        let groups = self.manager.list_group_snapshots();
        Ok(Response::new(api::ListGroupSnapshotsResponse {
            groups: groups.iter().map(inquiries::group_to_api).collect(),
        }))
    }

    async fn plugin_orphans(
        &self,
        req: Request<api::PluginOrphansRequest>,
    ) -> Result<Response<api::PluginOrphansResponse>, Status> {
        let o = self
            .manager
            .orphans(&req.into_inner().plugin)
            .await
            .map_err(status)?;
        Ok(Response::new(inquiries::orphans_to_api(o)))
    }

    async fn retry_volume(
        &self,
        req: Request<api::RetryVolumeRequest>,
    ) -> Result<Response<api::Volume>, Status> {
        let r = self.manager.retry(&req.into_inner().name).await.map_err(status)?;
        Ok(Response::new(volume_to_api(&self.manager, &r)))
    }

    async fn list_nodes(
        &self,
        _: Request<api::ListNodesRequest>,
    ) -> Result<Response<api::ListNodesResponse>, Status> {
        let m = &self.manager;
        let mut nodes: Vec<api::Node> = m
            .node_summaries()
            .into_iter()
            .map(|n| api::Node {
                name: n.name,
                labels: n.labels.into_iter().collect(),
                plugins: vec![],
                state: n.state.as_str().into(),
                draining: n.draining,
                last_seen_unix_ms: n
                    .last_seen
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_millis() as u64),
            })
            .collect();
        for v in m.node_views(None) {
            let (h, reason) = health(&v.health);
            let plugin = api::NodePlugin {
                plugin: v.plugin,
                node_id: v.info.as_ref().map(|i| i.node_id.clone()).unwrap_or_default(),
                health: h.into(),
                reason,
                max_volumes: v
                    .info
                    .as_ref()
                    .and_then(|i| i.max_volumes_per_node)
                    .map_or(0, |n| n as i64),
                published_volumes: v.published_volumes,
                topology: v.info.map(|i| api::Topology {
                    segments: i.accessible_topology.into_iter().collect(),
                }),
            };
            if let Some(n) = nodes.iter_mut().find(|n| n.name == v.node) {
                n.plugins.push(plugin);
            }
        }
        Ok(Response::new(api::ListNodesResponse { nodes }))
    }

    async fn drain_node(
        &self,
        req: Request<api::DrainNodeRequest>,
    ) -> Result<Response<api::NodeChangeResponse>, Status> {
        let r = req.into_inner();
        let publications = self.manager.drain_node(&r.name, r.undo).await.map_err(status)?;
        Ok(Response::new(api::NodeChangeResponse { publications }))
    }

    async fn forget_node(
        &self,
        req: Request<api::ForgetNodeRequest>,
    ) -> Result<Response<api::NodeChangeResponse>, Status> {
        let r = req.into_inner();
        let publications = self.manager.forget_node(&r.name, r.force).await.map_err(status)?;
        Ok(Response::new(api::NodeChangeResponse { publications }))
    }

    async fn remove_node(
        &self,
        req: Request<api::RemoveNodeRequest>,
    ) -> Result<Response<api::NodeChangeResponse>, Status> {
        self.manager
            .remove_node(&req.into_inner().name)
            .await
            .map_err(status)?;
        Ok(Response::new(api::NodeChangeResponse { publications: 0 }))
    }

    async fn create_join_token(
        &self,
        req: Request<api::CreateJoinTokenRequest>,
    ) -> Result<Response<api::CreateJoinTokenResponse>, Status> {
        let cluster = self.cluster()?;
        let r = req.into_inner();
        let request = crate::cluster::tokens::TokenRequest {
            ttl: match r.ttl_seconds {
                0 => std::time::Duration::from_secs(3600).min(cluster.tokens.max_ttl()),
                s => std::time::Duration::from_secs(s),
            },
            node: (!r.node.is_empty()).then_some(r.node),
            uses: r.uses,
            replace: r.replace,
        };
        let (token, record) = cluster.tokens.create(request).await?;
        tracing::warn!(
            token = %record.id,
            node = record.node.as_deref().map(crate::model::text::echo).unwrap_or_else(|| "(any new node)".into()),
            uses = record.uses_left,
            replace = record.replace,
            expires_unix = record.expires_ms / 1000,
            "join token made"
        );
        Ok(Response::new(api::CreateJoinTokenResponse {
            token,
            address: cluster.address.clone(),
            expires_unix: record.expires_ms / 1000,
            id: record.id,
        }))
    }

    async fn list_join_tokens(
        &self,
        _: Request<api::ListJoinTokensRequest>,
    ) -> Result<Response<api::ListJoinTokensResponse>, Status> {
        let tokens = self
            .cluster()?
            .tokens
            .list()
            .await
            .into_iter()
            .map(|t| api::JoinTokenInfo {
                id: t.id,
                node: t.node.unwrap_or_default(),
                uses_left: t.uses_left,
                expires_unix: t.expires_ms / 1000,
                created_unix: t.created_ms / 1000,
                replace: t.replace,
            })
            .collect();
        Ok(Response::new(api::ListJoinTokensResponse { tokens }))
    }

    async fn revoke_join_token(
        &self,
        req: Request<api::RevokeJoinTokenRequest>,
    ) -> Result<Response<api::RevokeJoinTokenResponse>, Status> {
        let id = req.into_inner().id;
        let revoked = self.cluster()?.tokens.revoke(&id).await.map_err(status)?;
        if !revoked {
            return Err(status(RequestError::from(berth_manager::Missing::JoinToken(id))));
        }
        tracing::warn!(token = %crate::model::text::echo(&id), "join token revoked");
        Ok(Response::new(api::RevokeJoinTokenResponse {}))
    }

    async fn summary(
        &self,
        _: Request<api::SummaryRequest>,
    ) -> Result<Response<api::SummaryResponse>, Status> {
        let s = self.manager.summary();
        Ok(Response::new(api::SummaryResponse {
            volumes: s.volumes,
            states: s.states.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
            busy: s.busy,
            retrying: s.retrying,
            policies: counters(self.manager.policies().stats()),
            waiting: s.waiting,
            servers: self.servers().await,
        }))
    }

    async fn reload_policies(
        &self,
        _: Request<api::ReloadPoliciesRequest>,
    ) -> Result<Response<api::ReloadPoliciesResponse>, Status> {
        let stats = self.reloader.reload().await.map_err(status)?;
        Ok(Response::new(api::ReloadPoliciesResponse {
            policies: counters(stats),
        }))
    }

    async fn apply_policy_set(
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

    async fn get_policy_set(
        &self,
        _: Request<api::GetPolicySetRequest>,
    ) -> Result<Response<api::PolicySet>, Status> {
        Ok(Response::new(policy_set(
            self.reloader.in_service().await,
            self.servers().await,
        )))
    }

    async fn list_decisions(
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

    async fn promote_policy(
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

    async fn rollback_policy(
        &self,
        request: Request<api::RollbackPolicyRequest>,
    ) -> Result<Response<api::PolicySet>, Status> {
        let to = Some(request.into_inner().version).filter(|v| *v > 0);
        let set = self.reloader.rollback(to).await.map_err(status)?;
        Ok(Response::new(policy_set(set, self.servers().await)))
    }

    async fn policy_diff(
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

    async fn plugin_status(
        &self,
        _: Request<api::PluginStatusRequest>,
    ) -> Result<Response<api::PluginStatusResponse>, Status> {
        let m = &self.manager;
        let plugins = m
            .config()
            .plugins
            .iter()
            .map(|p| {
                let controller = m.registry().get(&p.name).map(|c| c.status());
                let (h, reason) = match (&p.controller, &controller) {
                    (None, _) => ("none", String::new()),
                    (Some(_), Some(s)) => health(&s.health),
                    (Some(_), None) => ("unknown", String::new()),
                };
                let nodes = m.node_views(Some(&p.name));
                let healthy = nodes.iter().filter(|n| n.health == Health::Healthy).count();
                api::PluginStatus {
                    name: p.name.clone(),
                    driver: controller
                        .as_ref()
                        .and_then(|s| s.fingerprint.as_ref().map(|f| f.name.clone()))
                        .or_else(|| p.driver.clone())
                        .unwrap_or_default(),
                    controller_health: h.into(),
                    controller_reason: reason,
                    nodes_healthy: healthy as u32,
                    nodes_expected: nodes.len() as u32,
                    capabilities: controller
                        .and_then(|s| s.fingerprint)
                        .and_then(|f| f.controller.as_ref().map(|c| c.capabilities.clone()))
                        .unwrap_or_default(),
                }
            })
            .collect();
        Ok(Response::new(api::PluginStatusResponse { plugins }))
    }
}

fn policy_set(s: SetInService, servers: Vec<api::Server>) -> api::PolicySet {
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
