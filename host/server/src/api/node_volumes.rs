//! `NodeVolumes`: the API's volume calls as an agent's node makes them (for
//! the Docker plugin it serves), bounded to that node's Docker
//! (`docker_calls.rs`): only the volumes in its Docker scope, only the
//! fields Docker's protocol shows. The caller is the node its certificate
//! was issued to (TLS endpoint) or the one the `berth-node` header names
//! (the unix endpoint, guarded by its mode).

use std::sync::Arc;

use berth_proto::berth::v1 as api;
use tonic::{Request, Response, Status};

use super::BerthApi;
use super::codes::{NodeBound, Refusal, status};
use super::docker_calls::DockerCall;
use crate::cluster::directory::Directory;
use crate::cluster::service::certified_node;
use crate::model::NODE_HEADER;

pub struct NodeVolumesApi {
    api: Arc<BerthApi>,
    directory: Arc<Directory>,
    /// On the TLS endpoint (the certificate names the caller).
    tls: bool,
}

impl NodeVolumesApi {
    pub fn new(api: Arc<BerthApi>, directory: Arc<Directory>, tls: bool) -> NodeVolumesApi {
        NodeVolumesApi { api, directory, tls }
    }

    fn caller<T>(&self, request: &Request<T>) -> Result<String, Status> {
        let claimed = request
            .metadata()
            .get(NODE_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        if !self.tls {
            return claimed
                .filter(|n| crate::model::bounds::name(n).is_ok())
                .ok_or_else(|| status(Refusal::Missing("the berth-node header (a plain node name)")));
        }
        let certified = certified_node(&self.directory, request)?;
        match claimed {
            Some(claimed) if claimed != certified => Err(status(NodeBound::OtherCertificate {
                certified,
                claimed: crate::model::text::echo(&claimed),
            })),
            _ => Ok(certified),
        }
    }

    /// A publish or unpublish goes to the caller's own node only.
    fn own(&self, caller: &str, asked: &str) -> Result<(), Status> {
        if asked.is_empty() || asked == caller {
            return Ok(());
        }
        Err(status(NodeBound::OtherNode {
            caller: caller.into(),
            asked: crate::model::text::echo(asked),
        }))
    }
}

#[tonic::async_trait]
impl api::node_volumes_server::NodeVolumes for NodeVolumesApi {
    async fn get_volume(&self, req: Request<api::GetVolumeRequest>) -> Result<Response<api::Volume>, Status> {
        let node = self.caller(&req)?;
        let call = DockerCall::Get(req.into_inner().name);
        self.api.docker_call(&node, call).await.map(Response::new)
    }

    async fn list_volumes(
        &self,
        req: Request<api::ListVolumesRequest>,
    ) -> Result<Response<api::ListVolumesResponse>, Status> {
        let node = self.caller(&req)?;
        Ok(Response::new(self.api.docker_list(&node)))
    }

    async fn create_volume(
        &self,
        req: Request<api::CreateVolumeRequest>,
    ) -> Result<Response<api::Volume>, Status> {
        let node = self.caller(&req)?;
        let spec = req
            .into_inner()
            .spec
            .ok_or_else(|| status(Refusal::Missing("spec")))?;
        self.api
            .docker_call(&node, DockerCall::Create(Box::new(spec)))
            .await
            .map(Response::new)
    }

    async fn delete_volume(
        &self,
        req: Request<api::DeleteVolumeRequest>,
    ) -> Result<Response<api::Volume>, Status> {
        let node = self.caller(&req)?;
        let call = DockerCall::Delete(req.into_inner().name);
        self.api.docker_call(&node, call).await.map(Response::new)
    }

    async fn publish_volume(
        &self,
        req: Request<api::PublishVolumeRequest>,
    ) -> Result<Response<api::Volume>, Status> {
        let node = self.caller(&req)?;
        let req = req.into_inner();
        self.own(&node, &req.node)?;
        let call = DockerCall::Publish {
            name: req.name,
            readonly: req.readonly,
        };
        self.api.docker_call(&node, call).await.map(Response::new)
    }

    async fn unpublish_volume(
        &self,
        req: Request<api::UnpublishVolumeRequest>,
    ) -> Result<Response<api::Volume>, Status> {
        let node = self.caller(&req)?;
        let req = req.into_inner();
        self.own(&node, &req.node)?;
        let call = DockerCall::Unpublish(req.name);
        self.api.docker_call(&node, call).await.map(Response::new)
    }
}
