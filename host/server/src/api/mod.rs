//! The `berth.v1` API: a tonic service over a unix socket, translating between
//! the wire messages and the volume manager.

use std::sync::Arc;

use berth_proto::berth::v1 as api;
use tonic::{Request, Response, Status};

pub mod access;
pub use access::Access;
mod acl_calls;
pub mod audit;
mod codes;
mod convert;
mod docker_calls;
mod fleet;
pub mod introspection;
mod listing;
mod node_volumes;
mod plugins;
mod policies;
mod scope;
mod snapshots;
mod socket;

pub use convert::{spec_from_api, volume_to_api};
pub use node_volumes::NodeVolumesApi;
pub use policies::{PolicyReload, ReloadError, SetInService};
pub use socket::{SocketError, bind};

use crate::manager::{RequestError, VolumeManager};
use codes::{Refusal, status};
use docker_calls::{DockerCall, docker_node};
use policies::{counters, policy_set};
use scope::namespace;

pub struct BerthApi {
    manager: Arc<VolumeManager>,
    reloader: Arc<dyn PolicyReload>,
    /// The TLS cluster endpoint, when there is one (join tokens come from its CA).
    cluster: Option<Arc<crate::cluster::service::ClusterTls>>,
    /// With the etcd store: this server's part in the election (it leads
    /// while this API answers).
    election: Option<Arc<crate::leadership::Election>>,
    /// Who may do what (checked by [`access::Guard`] before each call).
    acl: Arc<crate::acl::Acl>,
    audit: Arc<audit::Audit>,
}

impl BerthApi {
    pub fn new(
        manager: Arc<VolumeManager>,
        reloader: Arc<dyn PolicyReload>,
        cluster: Option<Arc<crate::cluster::service::ClusterTls>>,
        election: Option<Arc<crate::leadership::Election>>,
        access: Access,
    ) -> Self {
        BerthApi {
            manager,
            reloader,
            cluster,
            election,
            acl: access.acl,
            audit: access.audit,
        }
    }
}

#[tonic::async_trait]
impl api::berth_server::Berth for BerthApi {
    async fn create_volume(
        &self,
        req: Request<api::CreateVolumeRequest>,
    ) -> Result<Response<api::Volume>, Status> {
        let docker = docker_node(&req)?;
        let ns = namespace(&req).map_err(status)?;
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
        let mut spec = spec_from_api(spec).map_err(status)?;
        spec.namespace = ns;
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
        let ns = namespace(&req).map_err(status)?;
        let name = req.into_inner().name;
        if let Some(node) = docker {
            return self
                .docker_call(&node, DockerCall::Get(name))
                .await
                .map(Response::new);
        }
        let name = berth_model::VolumeName::new(ns, name);
        let r = self.manager.get(&name).ok_or_else(|| {
            status(RequestError::from(berth_manager::Missing::Volume(
                name.to_string(),
            )))
        })?;
        Ok(Response::new(volume_to_api(&self.manager, &r)))
    }

    async fn list_volumes(
        &self,
        req: Request<api::ListVolumesRequest>,
    ) -> Result<Response<api::ListVolumesResponse>, Status> {
        if let Some(node) = docker_node(&req)? {
            return Ok(Response::new(self.docker_list(&node)));
        }
        listing::list_volumes(self, req)
    }

    async fn delete_volume(
        &self,
        req: Request<api::DeleteVolumeRequest>,
    ) -> Result<Response<api::Volume>, Status> {
        let ns = namespace(&req).map_err(status)?;
        if let Some(node) = docker_node(&req)? {
            let call = DockerCall::Delete(req.into_inner().name);
            return self.docker_call(&node, call).await.map(Response::new);
        }
        let req = req.into_inner();
        let r = self
            .manager
            .requests_in(ns)
            .delete(&req.name, req.force)
            .await
            .map_err(status)?;
        Ok(Response::new(volume_to_api(&self.manager, &r)))
    }

    async fn publish_volume(
        &self,
        req: Request<api::PublishVolumeRequest>,
    ) -> Result<Response<api::Volume>, Status> {
        let ns = namespace(&req).map_err(status)?;
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
            .requests_in(ns)
            .publish(&req.name, node, req.readonly)
            .await
            .map_err(status)?;
        Ok(Response::new(volume_to_api(&self.manager, &r)))
    }

    async fn unpublish_volume(
        &self,
        req: Request<api::UnpublishVolumeRequest>,
    ) -> Result<Response<api::Volume>, Status> {
        let ns = namespace(&req).map_err(status)?;
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
            .requests_in(ns)
            .unpublish(&req.name, &req.node)
            .await
            .map_err(status)?;
        Ok(Response::new(volume_to_api(&self.manager, &r)))
    }

    async fn expand_volume(
        &self,
        req: Request<api::ExpandVolumeRequest>,
    ) -> Result<Response<api::Volume>, Status> {
        let ns = namespace(&req).map_err(status)?;
        let req = req.into_inner();
        let r = self
            .manager
            .requests_in(ns)
            .expand(&req.name, req.required_bytes)
            .await
            .map_err(status)?;
        Ok(Response::new(volume_to_api(&self.manager, &r)))
    }

    async fn modify_volume(
        &self,
        req: Request<api::ModifyVolumeRequest>,
    ) -> Result<Response<api::Volume>, Status> {
        let ns = namespace(&req).map_err(status)?;
        let req = req.into_inner();
        let changes = req.mutable_parameters.into_iter().collect();
        let r = self
            .manager
            .requests_in(ns)
            .modify_parameters(&req.name, changes)
            .await
            .map_err(status)?;
        Ok(Response::new(volume_to_api(&self.manager, &r)))
    }

    async fn import_volume(
        &self,
        req: Request<api::ImportVolumeRequest>,
    ) -> Result<Response<api::Volume>, Status> {
        let ns = namespace(&req).map_err(status)?;
        let req = req.into_inner();
        let spec = req.spec.ok_or_else(|| status(Refusal::Missing("spec")))?;
        let spec = spec_from_api(spec).map_err(status)?;
        let r = self
            .manager
            .requests_in(ns)
            .import(spec, &req.volume_id)
            .await
            .map_err(status)?;
        Ok(Response::new(volume_to_api(&self.manager, &r)))
    }

    async fn forget_volume(
        &self,
        req: Request<api::ForgetVolumeRequest>,
    ) -> Result<Response<api::Volume>, Status> {
        let ns = namespace(&req).map_err(status)?;
        let r = self
            .manager
            .requests_in(ns)
            .forget(&req.into_inner().name)
            .await
            .map_err(status)?;
        Ok(Response::new(volume_to_api(&self.manager, &r)))
    }

    async fn set_docker_scope(
        &self,
        req: Request<api::SetDockerScopeRequest>,
    ) -> Result<Response<api::Volume>, Status> {
        let ns = namespace(&req).map_err(status)?;
        let req = req.into_inner();
        let scope = req
            .scope
            .parse()
            .map_err(|e| status(RequestError::Invalid(format!("scope: {e}"))))?;
        let r = self
            .manager
            .docker()
            .set_docker_scope(&berth_model::VolumeName::new(ns, req.name), scope)
            .await
            .map_err(status)?;
        Ok(Response::new(volume_to_api(&self.manager, &r)))
    }

    async fn volume_health(
        &self,
        req: Request<api::VolumeHealthRequest>,
    ) -> Result<Response<api::VolumeHealthResponse>, Status> {
        let ns = namespace(&req).map_err(status)?;
        let h = self
            .manager
            .requests_in(ns)
            .health(&req.into_inner().name)
            .await
            .map_err(status)?;
        Ok(Response::new(convert::views::health_to_api(h)))
    }

    async fn create_snapshot(
        &self,
        req: Request<api::CreateSnapshotRequest>,
    ) -> Result<Response<api::Snapshot>, Status> {
        snapshots::create_snapshot(self, req).await
    }

    async fn delete_snapshot(
        &self,
        req: Request<api::DeleteSnapshotRequest>,
    ) -> Result<Response<api::Snapshot>, Status> {
        snapshots::delete_snapshot(self, req).await
    }

    async fn get_snapshot(
        &self,
        req: Request<api::GetSnapshotRequest>,
    ) -> Result<Response<api::Snapshot>, Status> {
        snapshots::get_snapshot(self, req).await
    }

    async fn list_snapshots(
        &self,
        req: Request<api::ListSnapshotsRequest>,
    ) -> Result<Response<api::ListSnapshotsResponse>, Status> {
        snapshots::list_snapshots(self, req).await
    }

    async fn create_group_snapshot(
        &self,
        req: Request<api::CreateGroupSnapshotRequest>,
    ) -> Result<Response<api::GroupSnapshot>, Status> {
        snapshots::create_group_snapshot(self, req).await
    }

    async fn delete_group_snapshot(
        &self,
        req: Request<api::DeleteGroupSnapshotRequest>,
    ) -> Result<Response<api::GroupSnapshot>, Status> {
        snapshots::delete_group_snapshot(self, req).await
    }

    async fn get_group_snapshot(
        &self,
        req: Request<api::GetGroupSnapshotRequest>,
    ) -> Result<Response<api::GroupSnapshot>, Status> {
        snapshots::get_group_snapshot(self, req).await
    }

    async fn list_group_snapshots(
        &self,
        req: Request<api::ListGroupSnapshotsRequest>,
    ) -> Result<Response<api::ListGroupSnapshotsResponse>, Status> {
        snapshots::list_group_snapshots(self, req).await
    }

    async fn plugin_orphans(
        &self,
        req: Request<api::PluginOrphansRequest>,
    ) -> Result<Response<api::PluginOrphansResponse>, Status> {
        self.answer_plugin_orphans(req).await
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

    async fn record_plugin_check(
        &self,
        req: Request<api::RecordPluginCheckRequest>,
    ) -> Result<Response<api::PluginCheck>, Status> {
        self.answer_record_plugin_check(req).await
    }

    async fn retry_volume(
        &self,
        req: Request<api::RetryVolumeRequest>,
    ) -> Result<Response<api::Volume>, Status> {
        let ns = namespace(&req).map_err(status)?;
        let r = self
            .manager
            .requests_in(ns)
            .retry(&req.into_inner().name)
            .await
            .map_err(status)?;
        Ok(Response::new(volume_to_api(&self.manager, &r)))
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
        Ok(Response::new(self.answer_summary().await))
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

    async fn get_policy_set(
        &self,
        _: Request<api::GetPolicySetRequest>,
    ) -> Result<Response<api::PolicySet>, Status> {
        Ok(Response::new(policy_set(
            self.reloader.in_service().await,
            self.servers().await,
        )))
    }

    async fn bootstrap_acl(
        &self,
        _: Request<api::BootstrapAclRequest>,
    ) -> Result<Response<api::AclTokenSecret>, Status> {
        acl_calls::bootstrap(self).await
    }

    async fn apply_acl_policy(
        &self,
        req: Request<api::ApplyAclPolicyRequest>,
    ) -> Result<Response<api::AclPolicy>, Status> {
        acl_calls::apply_policy(self, req).await
    }

    async fn get_acl_policy(
        &self,
        req: Request<api::GetAclPolicyRequest>,
    ) -> Result<Response<api::AclPolicy>, Status> {
        acl_calls::get_policy(self, &req.into_inner().name)
    }

    async fn list_acl_policies(
        &self,
        _: Request<api::ListAclPoliciesRequest>,
    ) -> Result<Response<api::ListAclPoliciesResponse>, Status> {
        Ok(acl_calls::list_policies(self))
    }

    async fn delete_acl_policy(
        &self,
        req: Request<api::DeleteAclPolicyRequest>,
    ) -> Result<Response<api::AclPolicy>, Status> {
        acl_calls::delete_policy(self, &req.into_inner().name).await
    }

    async fn create_acl_token(
        &self,
        req: Request<api::CreateAclTokenRequest>,
    ) -> Result<Response<api::AclTokenSecret>, Status> {
        acl_calls::create_token(self, req).await
    }

    async fn list_acl_tokens(
        &self,
        _: Request<api::ListAclTokensRequest>,
    ) -> Result<Response<api::ListAclTokensResponse>, Status> {
        Ok(acl_calls::list_tokens(self))
    }

    async fn revoke_acl_token(
        &self,
        req: Request<api::RevokeAclTokenRequest>,
    ) -> Result<Response<api::AclToken>, Status> {
        acl_calls::revoke_token(self, &req.into_inner().accessor).await
    }

    async fn acl_token_self(
        &self,
        req: Request<api::AclTokenSelfRequest>,
    ) -> Result<Response<api::AclToken>, Status> {
        acl_calls::token_self(self, &req)
    }

    async fn set_namespace_quota(
        &self,
        req: Request<api::SetNamespaceQuotaRequest>,
    ) -> Result<Response<api::NamespaceStatus>, Status> {
        listing::set_quota(self, req).await
    }

    async fn list_namespaces(
        &self,
        req: Request<api::ListNamespacesRequest>,
    ) -> Result<Response<api::ListNamespacesResponse>, Status> {
        listing::list_namespaces(self, req)
    }

    async fn tail_audit(
        &self,
        req: Request<api::TailAuditRequest>,
    ) -> Result<Response<api::TailAuditResponse>, Status> {
        acl_calls::tail_audit(self, req.into_inner().lines)
    }

    async fn drain_node(
        &self,
        req: Request<api::DrainNodeRequest>,
    ) -> Result<Response<api::NodeChangeResponse>, Status> {
        self.answer_drain_node(req).await
    }

    async fn forget_node(
        &self,
        req: Request<api::ForgetNodeRequest>,
    ) -> Result<Response<api::NodeChangeResponse>, Status> {
        self.answer_forget_node(req).await
    }

    async fn remove_node(
        &self,
        req: Request<api::RemoveNodeRequest>,
    ) -> Result<Response<api::NodeChangeResponse>, Status> {
        self.answer_remove_node(req).await
    }

    async fn apply_policy_set(
        &self,
        req: Request<api::ApplyPolicySetRequest>,
    ) -> Result<Response<api::PolicySet>, Status> {
        self.answer_apply_policy_set(req).await
    }

    async fn promote_policy(
        &self,
        req: Request<api::PromotePolicyRequest>,
    ) -> Result<Response<api::PolicySet>, Status> {
        self.answer_promote_policy(req).await
    }

    async fn rollback_policy(
        &self,
        req: Request<api::RollbackPolicyRequest>,
    ) -> Result<Response<api::PolicySet>, Status> {
        self.answer_rollback_policy(req).await
    }

    async fn bind_acl_certificate(
        &self,
        req: Request<api::BindAclCertificateRequest>,
    ) -> Result<Response<api::AclCertificate>, Status> {
        acl_calls::bind_certificate(self, req).await
    }

    async fn unbind_acl_certificate(
        &self,
        req: Request<api::UnbindAclCertificateRequest>,
    ) -> Result<Response<api::AclCertificate>, Status> {
        acl_calls::unbind_certificate(self, &req.into_inner().subject).await
    }

    async fn list_acl_certificates(
        &self,
        _: Request<api::ListAclCertificatesRequest>,
    ) -> Result<Response<api::ListAclCertificatesResponse>, Status> {
        Ok(acl_calls::list_certificates(self))
    }
}
