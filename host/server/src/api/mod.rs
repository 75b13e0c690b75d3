//! The `berth.v1` API: a tonic service over a unix socket, translating between
//! the wire messages and the volume manager.

use std::sync::Arc;

use berth_proto::berth::v1 as api;
use tonic::{Request, Response, Status};

mod codes;
mod convert;
mod docker_calls;
mod fleet;
pub mod introspection;
mod node_volumes;
mod policies;
mod socket;

use convert::volume_summary;
pub use convert::{spec_from_api, volume_to_api};
pub use node_volumes::NodeVolumesApi;
pub use policies::{PolicyReload, ReloadError, SetInService};
pub use socket::{SocketError, bind};

use crate::manager::{RequestError, VolumeManager};
use codes::{Refusal, status};
use docker_calls::{DockerCall, docker_node};
use policies::{counters, policy_set};

pub struct BerthApi {
    manager: Arc<VolumeManager>,
    reloader: Arc<dyn PolicyReload>,
    /// The TLS cluster endpoint, when there is one (join tokens come from its CA).
    cluster: Option<Arc<crate::cluster::service::ClusterTls>>,
    /// With the etcd store: this server's part in the election (it leads
    /// while this API answers).
    election: Option<Arc<crate::leadership::Election>>,
}

impl BerthApi {
    pub fn new(
        manager: Arc<VolumeManager>,
        reloader: Arc<dyn PolicyReload>,
        cluster: Option<Arc<crate::cluster::service::ClusterTls>>,
        election: Option<Arc<crate::leadership::Election>>,
    ) -> Self {
        BerthApi {
            manager,
            reloader,
            cluster,
            election,
        }
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
            .docker()
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
        let r = self
            .manager
            .requests()
            .delete(&req.name, req.force)
            .await
            .map_err(status)?;
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
            .requests()
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
            .requests()
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
            .requests()
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
            .requests()
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
        let r = self
            .manager
            .requests()
            .import(spec, &req.volume_id)
            .await
            .map_err(status)?;
        Ok(Response::new(volume_to_api(&self.manager, &r)))
    }

    async fn forget_volume(
        &self,
        req: Request<api::ForgetVolumeRequest>,
    ) -> Result<Response<api::Volume>, Status> {
        let r = self
            .manager
            .requests()
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
            .docker()
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
            .requests()
            .health(&req.into_inner().name)
            .await
            .map_err(status)?;
        Ok(Response::new(convert::views::health_to_api(h)))
    }

    async fn create_snapshot(
        &self,
        req: Request<api::CreateSnapshotRequest>,
    ) -> Result<Response<api::Snapshot>, Status> {
        let req = req.into_inner();
        let s = self
            .manager
            .snapshots()
            .create_snapshot(&req.name, &req.volume)
            .await
            .map_err(status)?;
        Ok(Response::new(convert::views::snapshot_to_api(&s)))
    }

    async fn delete_snapshot(
        &self,
        req: Request<api::DeleteSnapshotRequest>,
    ) -> Result<Response<api::Snapshot>, Status> {
        let s = self
            .manager
            .snapshots()
            .delete_snapshot(&req.into_inner().name)
            .await
            .map_err(status)?;
        Ok(Response::new(convert::views::snapshot_to_api(&s)))
    }

    async fn get_snapshot(
        &self,
        req: Request<api::GetSnapshotRequest>,
    ) -> Result<Response<api::Snapshot>, Status> {
        let s = self
            .manager
            .snapshots()
            .get_snapshot(&req.into_inner().name)
            .map_err(status)?;
        Ok(Response::new(convert::views::snapshot_to_api(&s)))
    }

    async fn list_snapshots(
        &self,
        req: Request<api::ListSnapshotsRequest>,
    ) -> Result<Response<api::ListSnapshotsResponse>, Status> {
        let volume = req.into_inner().volume;
        let all = self
            .manager
            .snapshots()
            .list_snapshots((!volume.is_empty()).then_some(volume.as_str()))
            .map_err(status)?;
        Ok(Response::new(api::ListSnapshotsResponse {
            snapshots: all.iter().map(convert::views::snapshot_to_api).collect(),
        }))
    }

    async fn create_group_snapshot(
        &self,
        req: Request<api::CreateGroupSnapshotRequest>,
    ) -> Result<Response<api::GroupSnapshot>, Status> {
        let req = req.into_inner();
        let g = self
            .manager
            .snapshots()
            .create_group_snapshot(&req.name, &req.volumes)
            .await
            .map_err(status)?;
        Ok(Response::new(convert::views::group_to_api(&g)))
    }

    async fn delete_group_snapshot(
        &self,
        req: Request<api::DeleteGroupSnapshotRequest>,
    ) -> Result<Response<api::GroupSnapshot>, Status> {
        let g = self
            .manager
            .snapshots()
            .delete_group_snapshot(&req.into_inner().name)
            .await
            .map_err(status)?;
        Ok(Response::new(convert::views::group_to_api(&g)))
    }

    async fn get_group_snapshot(
        &self,
        req: Request<api::GetGroupSnapshotRequest>,
    ) -> Result<Response<api::GroupSnapshot>, Status> {
        let g = self
            .manager
            .snapshots()
            .get_group_snapshot(&req.into_inner().name)
            .map_err(status)?;
        Ok(Response::new(convert::views::group_to_api(&g)))
    }

    async fn list_group_snapshots(
        &self,
        _: Request<api::ListGroupSnapshotsRequest>,
    ) -> Result<Response<api::ListGroupSnapshotsResponse>, Status> {
        let groups = self.manager.snapshots().list_group_snapshots();
        Ok(Response::new(api::ListGroupSnapshotsResponse {
            groups: groups.iter().map(convert::views::group_to_api).collect(),
        }))
    }

    async fn plugin_orphans(
        &self,
        req: Request<api::PluginOrphansRequest>,
    ) -> Result<Response<api::PluginOrphansResponse>, Status> {
        let o = self
            .manager
            .requests()
            .orphans(&req.into_inner().plugin)
            .await
            .map_err(status)?;
        Ok(Response::new(convert::views::orphans_to_api(o)))
    }

    async fn list_nodes(
        &self,
        req: Request<api::ListNodesRequest>,
    ) -> Result<Response<api::ListNodesResponse>, Status> {
        self.answer_list_nodes(req).await
    }

    async fn create_join_token(
        &self,
        req: Request<api::CreateJoinTokenRequest>,
    ) -> Result<Response<api::CreateJoinTokenResponse>, Status> {
        self.answer_create_join_token(req).await
    }

    async fn list_join_tokens(
        &self,
        req: Request<api::ListJoinTokensRequest>,
    ) -> Result<Response<api::ListJoinTokensResponse>, Status> {
        self.answer_list_join_tokens(req).await
    }

    async fn list_decisions(
        &self,
        req: Request<api::ListDecisionsRequest>,
    ) -> Result<Response<api::ListDecisionsResponse>, Status> {
        self.answer_list_decisions(req).await
    }

    async fn policy_diff(
        &self,
        req: Request<api::PolicyDiffRequest>,
    ) -> Result<Response<api::PolicyDiffResponse>, Status> {
        self.answer_policy_diff(req).await
    }

    async fn plugin_status(
        &self,
        req: Request<api::PluginStatusRequest>,
    ) -> Result<Response<api::PluginStatusResponse>, Status> {
        self.answer_plugin_status(req).await
    }

    async fn retry_volume(
        &self,
        req: Request<api::RetryVolumeRequest>,
    ) -> Result<Response<api::Volume>, Status> {
        let r = self
            .manager
            .requests()
            .retry(&req.into_inner().name)
            .await
            .map_err(status)?;
        Ok(Response::new(volume_to_api(&self.manager, &r)))
    }

    async fn drain_node(
        &self,
        req: Request<api::DrainNodeRequest>,
    ) -> Result<Response<api::NodeChangeResponse>, Status> {
        let r = req.into_inner();
        let publications = self
            .manager
            .fleet()
            .drain_node(&r.name, r.undo)
            .await
            .map_err(status)?;
        Ok(Response::new(api::NodeChangeResponse { publications }))
    }

    async fn forget_node(
        &self,
        req: Request<api::ForgetNodeRequest>,
    ) -> Result<Response<api::NodeChangeResponse>, Status> {
        let r = req.into_inner();
        let publications = self
            .manager
            .fleet()
            .forget_node(&r.name, r.force)
            .await
            .map_err(status)?;
        Ok(Response::new(api::NodeChangeResponse { publications }))
    }

    async fn remove_node(
        &self,
        req: Request<api::RemoveNodeRequest>,
    ) -> Result<Response<api::NodeChangeResponse>, Status> {
        self.manager
            .fleet()
            .remove_node(&req.into_inner().name)
            .await
            .map_err(status)?;
        Ok(Response::new(api::NodeChangeResponse { publications: 0 }))
    }

    async fn revoke_join_token(
        &self,
        req: Request<api::RevokeJoinTokenRequest>,
    ) -> Result<Response<api::RevokeJoinTokenResponse>, Status> {
        self.answer_revoke_join_token(req).await
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
}
