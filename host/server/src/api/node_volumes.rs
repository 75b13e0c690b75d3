//! `NodeVolumes`: the API's volume calls as an agent's node makes them (for
//! the Docker plugin it serves), bounded to that node. The caller is the
//! node its certificate was issued to (TLS endpoint) or the one the
//! `berth-node` header names (the unix endpoint, guarded by its mode).

use std::sync::Arc;

use berth_proto::berth::v1 as api;
use berth_proto::berth::v1::berth_server::Berth;
use tonic::{Request, Response, Status};

use super::BerthApi;
use super::codes::{Refusal, status};
use crate::cluster::directory::Directory;
use crate::cluster::service::certified_node;
use crate::model::NODE_HEADER;

/// What a node's own calls may not do.
#[derive(Debug, thiserror::Error)]
pub(super) enum NodeBound {
    #[error("node {caller} may publish and unpublish volumes on itself only, not on {asked}")]
    OtherNode { caller: String, asked: String },
    #[error("this certificate was issued to node {certified}, not {claimed}")]
    OtherCertificate { certified: String, claimed: String },
    #[error(
        "node {0}'s Docker may use Berth's volumes but not create or remove them (docker_create_from in the server's berth.toml allows it)"
    )]
    NoCreate(String),
    #[error("{name} is published on {on} (in use there): unmount it there first")]
    InUse { name: String, on: String },
}

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

    /// The node a publish or unpublish goes to: the caller's own.
    fn own(&self, caller: String, asked: &str) -> Result<String, Status> {
        if asked.is_empty() || asked == caller {
            return Ok(caller);
        }
        Err(status(NodeBound::OtherNode {
            caller,
            asked: crate::model::text::echo(asked),
        }))
    }

    fn may_create<T>(&self, request: &Request<T>) -> Result<(), Status> {
        let caller = self.caller(request)?;
        match self.api.manager.config().docker_create_from.allows(&caller) {
            true => Ok(()),
            false => Err(status(NodeBound::NoCreate(caller))),
        }
    }
}

#[tonic::async_trait]
impl api::node_volumes_server::NodeVolumes for NodeVolumesApi {
    async fn get_volume(&self, req: Request<api::GetVolumeRequest>) -> Result<Response<api::Volume>, Status> {
        self.caller(&req)?;
        self.api.get_volume(req).await
    }

    async fn list_volumes(
        &self,
        req: Request<api::ListVolumesRequest>,
    ) -> Result<Response<api::ListVolumesResponse>, Status> {
        self.caller(&req)?;
        self.api.list_volumes(req).await
    }

    async fn create_volume(
        &self,
        req: Request<api::CreateVolumeRequest>,
    ) -> Result<Response<api::Volume>, Status> {
        self.may_create(&req)?;
        self.api.create_volume(req).await
    }

    async fn delete_volume(
        &self,
        req: Request<api::DeleteVolumeRequest>,
    ) -> Result<Response<api::Volume>, Status> {
        self.may_create(&req)?;
        // A node removes no volume from under another's containers.
        if let Some(r) = self.api.manager.get(&req.get_ref().name) {
            let on: Vec<&str> = r.publications.keys().map(String::as_str).collect();
            if !on.is_empty() {
                return Err(status(NodeBound::InUse {
                    name: r.spec.name.clone(),
                    on: on.join(", "),
                }));
            }
        }
        self.api.delete_volume(req).await
    }

    async fn publish_volume(
        &self,
        req: Request<api::PublishVolumeRequest>,
    ) -> Result<Response<api::Volume>, Status> {
        let node = self.own(self.caller(&req)?, &req.get_ref().node)?;
        let mut req = req;
        req.get_mut().node = node;
        self.api.publish_volume(req).await
    }

    async fn unpublish_volume(
        &self,
        req: Request<api::UnpublishVolumeRequest>,
    ) -> Result<Response<api::Volume>, Status> {
        let node = self.own(self.caller(&req)?, &req.get_ref().node)?;
        let mut req = req;
        req.get_mut().node = node;
        self.api.unpublish_volume(req).await
    }
}
