//! The Controller service: create, delete, publish and unpublish volumes.

use std::collections::BTreeMap;
use std::sync::Arc;

use berth_proto::csi::v1 as csi;
use csi::controller_service_capability::rpc::Type as Cap;
use tonic::{Request, Response, Status};

use crate::answers::{self, check_capability};
use crate::config::{Config, Misbehaviour, Omit};
use crate::faults::Faults;
use crate::journal::{Entry, Journal};
use crate::snapshots::Snapshots;
use crate::volumes::{NewVolume, Source, Volumes, reachable};

mod groups;
mod modify;
mod rules;
mod snapshot;

pub use rules::{check_secrets, condition};
use rules::{page, require, segments, single_node};

pub struct Controller {
    config: Arc<Config>,
    volumes: Arc<Volumes>,
    snapshots: Snapshots,
    faults: Arc<Faults>,
    journal: Journal,
}

impl Controller {
    pub fn new(
        config: Arc<Config>,
        volumes: Arc<Volumes>,
        snapshots: Snapshots,
        faults: Arc<Faults>,
        journal: Journal,
    ) -> Self {
        Controller {
            config,
            volumes,
            snapshots,
            faults,
            journal,
        }
    }

    /// UNIMPLEMENTED unless the plugin offers `capability`.
    fn offered(&self, capability: &str) -> Result<(), Status> {
        if self.config.offers(capability) {
            Ok(())
        } else {
            Err(Status::unimplemented(format!("{capability} is not offered")))
        }
    }

    /// A content source's id, where its data is, and its size.
    fn source(&self, source: &csi::VolumeContentSource) -> Result<(Source, std::path::PathBuf, i64), Status> {
        use csi::volume_content_source::Type;
        match &source.r#type {
            Some(Type::Snapshot(s)) => {
                self.offered("CREATE_DELETE_SNAPSHOT")?;
                let snap = self
                    .snapshots
                    .get(&s.snapshot_id)
                    .ok_or_else(|| Status::not_found(format!("snapshot {} does not exist", s.snapshot_id)))?;
                if !answers::snapshot_ready(&self.config, &snap) {
                    return Err(Status::failed_precondition(format!(
                        "snapshot {} is not ready to use yet",
                        snap.id
                    )));
                }
                Ok((
                    Source::Snapshot(snap.id.clone()),
                    self.snapshots.data_path(&snap.id),
                    snap.size_bytes,
                ))
            }
            Some(Type::Volume(v)) => {
                self.offered("CLONE_VOLUME")?;
                let vol = self
                    .volumes
                    .get(&v.volume_id)?
                    .ok_or_else(|| Status::not_found(format!("volume {} does not exist", v.volume_id)))?;
                Ok((
                    Source::Volume(vol.id.clone()),
                    self.volumes.data_path(&vol.id),
                    vol.capacity_bytes,
                ))
            }
            None => Err(Status::invalid_argument("volume_content_source has no type")),
        }
    }

    /// VOLUME_CONDITION's view of a volume.
    fn condition(&self, id: &str) -> Option<csi::VolumeCondition> {
        self.config
            .offers("VOLUME_CONDITION")
            .then(|| condition(&self.volumes.data_path(id)))
    }

    fn check_secrets(&self, secrets: &std::collections::HashMap<String, String>) -> Result<(), Status> {
        check_secrets(&self.config, secrets)
    }
}

#[tonic::async_trait]
impl csi::controller_server::Controller for Controller {
    async fn create_volume(
        &self,
        request: Request<csi::CreateVolumeRequest>,
    ) -> Result<Response<csi::CreateVolumeResponse>, Status> {
        self.faults.inject("CreateVolume").await?;
        let mut req = request.into_inner();
        if self.config.misbehaves(Misbehaviour::AcceptsMissingName) && req.name.is_empty() {
            req.name = "unnamed".to_string();
        }
        require("name", &req.name)?;
        if req.volume_capabilities.is_empty() {
            return Err(Status::invalid_argument("volume_capabilities is required"));
        }
        req.volume_capabilities
            .iter()
            .try_for_each(|c| check_capability(&self.config, c))?;
        self.check_secrets(&req.secrets)?;
        let modes: Vec<&str> = req
            .volume_capabilities
            .iter()
            .filter_map(|c| c.access_mode.as_ref())
            .filter_map(|m| csi::volume_capability::access_mode::Mode::try_from(m.mode).ok())
            .map(|m| m.as_str_name())
            .collect();
        let source = req
            .volume_content_source
            .as_ref()
            .map(|s| self.source(s))
            .transpose()?;
        let (required, limit) = req
            .capacity_range
            .map_or((0, 0), |c| (c.required_bytes, c.limit_bytes));
        // The reference driver refuses a size below the source's, an
        // unset one (0) included.
        if let Some((_, _, source_size)) = &source
            && self.config.like_reference_driver
            && required < *source_size
        {
            return Err(Status::out_of_range(format!(
                "the source's size {source_size} is greater than the requested volume size {required}"
            )));
        }
        if required < 0 || limit < 0 || (limit > 0 && required > limit) {
            return Err(Status::out_of_range(format!(
                "capacity range required={required} limit={limit} is not satisfiable"
            )));
        }
        // Accessible from the first preferred topology, else the first requisite one.
        let accessible = if self.config.topology.is_empty() {
            vec![]
        } else {
            req.accessibility_requirements
                .as_ref()
                .and_then(|r| r.preferred.first().or(r.requisite.first()))
                .map(|t| vec![segments(t)])
                .unwrap_or_else(|| vec![self.config.topology_map()])
        };
        let parameters: BTreeMap<String, String> = req.parameters.into_iter().collect();
        let mutable_parameters = match req.mutable_parameters.is_empty() {
            true => BTreeMap::new(),
            // The spec: set only for a plugin that offers MODIFY_VOLUME.
            false if !self.config.offers("MODIFY_VOLUME") => {
                return Err(Status::invalid_argument(
                    "mutable_parameters given, but MODIFY_VOLUME is not offered",
                ));
            }
            false => modify::mutable(req.mutable_parameters)?,
        };
        let (rec, created) = self.volumes.create(
            NewVolume {
                name: req.name,
                required,
                limit,
                parameters,
                mutable_parameters,
                accessible_topology: accessible,
                source,
                segment_capacity: self.config.segment_capacity.clone(),
            },
            !self.config.misbehaves(Misbehaviour::IgnoresSizeConflict),
        )?;
        tracing::info!(name = %rec.name, id = %rec.id, ?modes, "volume created");
        self.journal.note(Entry {
            call: "CreateVolume",
            volume: &rec.id,
            name: &rec.name,
            created: Some(created),
            ..Default::default()
        });
        self.faults.reply("CreateVolume").await;
        Ok(Response::new(csi::CreateVolumeResponse {
            volume: Some(answers::volume(&self.config, &rec)),
        }))
    }

    async fn delete_volume(
        &self,
        request: Request<csi::DeleteVolumeRequest>,
    ) -> Result<Response<csi::DeleteVolumeResponse>, Status> {
        self.faults.inject("DeleteVolume").await?;
        let req = request.into_inner();
        require("volume_id", &req.volume_id)?;
        self.check_secrets(&req.secrets)?;
        if self.config.misbehaves(Misbehaviour::NotFoundOnDelete)
            && self.volumes.get(&req.volume_id)?.is_none()
        {
            return Err(Status::not_found(format!(
                "volume {} does not exist",
                req.volume_id
            )));
        }
        let lied = self.faults.lies("DeleteVolume");
        if !lied {
            self.volumes.delete(&req.volume_id)?;
        }
        self.journal.note(Entry {
            call: "DeleteVolume",
            volume: &req.volume_id,
            lied,
            ..Default::default()
        });
        Ok(Response::new(csi::DeleteVolumeResponse {}))
    }

    async fn controller_publish_volume(
        &self,
        request: Request<csi::ControllerPublishVolumeRequest>,
    ) -> Result<Response<csi::ControllerPublishVolumeResponse>, Status> {
        self.faults.inject("ControllerPublishVolume").await?;
        if !self.config.publish_unpublish {
            return Err(Status::unimplemented("PUBLISH_UNPUBLISH_VOLUME is not offered"));
        }
        let req = request.into_inner();
        require("volume_id", &req.volume_id)?;
        require("node_id", &req.node_id)?;
        let cap = req
            .volume_capability
            .as_ref()
            .ok_or_else(|| Status::invalid_argument("volume_capability is required"))?;
        check_capability(&self.config, cap)?;
        self.check_secrets(&req.secrets)?;
        let Some(node) = self.volumes.node(&req.node_id)? else {
            if self.config.misbehaves(Misbehaviour::AcceptsUnknownNode)
                && self.volumes.get(&req.volume_id)?.is_some()
            {
                let publish_context = answers::publish_context(&self.config, req.node_id);
                return Ok(Response::new(csi::ControllerPublishVolumeResponse {
                    publish_context,
                }));
            }
            return Err(Status::not_found(format!("node {:?} is not known", req.node_id)));
        };
        let node_id = req.node_id.clone();
        let single = single_node(cap);
        let outcome = self.volumes.update(&req.volume_id, |index, rec| {
            if rec.published_nodes.contains(&node_id) {
                return Ok(());
            }
            if single && !rec.published_nodes.is_empty() {
                return Err(Status::failed_precondition(format!(
                    "volume is single-node and already published to {:?}",
                    rec.published_nodes
                )));
            }
            if !reachable(&rec.accessible_topology, &node.topology) {
                return Err(Status::failed_precondition(format!(
                    "volume is not accessible from node {node_id:?}"
                )));
            }
            let published_here = index.published_on(&node_id);
            if node.max_volumes > 0 && published_here >= node.max_volumes {
                return Err(Status::resource_exhausted(format!(
                    "node {node_id:?} already has {published_here} of {} volumes",
                    node.max_volumes
                )));
            }
            rec.published_nodes.insert(node_id.clone());
            Ok(())
        })?;
        if outcome.is_none() {
            return Err(self.unknown_volume(&req.volume_id));
        }
        self.journal.note(Entry {
            call: "ControllerPublishVolume",
            volume: &req.volume_id,
            node: &req.node_id,
            ..Default::default()
        });
        Ok(Response::new(csi::ControllerPublishVolumeResponse {
            publish_context: answers::publish_context(&self.config, req.node_id),
        }))
    }

    async fn controller_unpublish_volume(
        &self,
        request: Request<csi::ControllerUnpublishVolumeRequest>,
    ) -> Result<Response<csi::ControllerUnpublishVolumeResponse>, Status> {
        self.faults.inject("ControllerUnpublishVolume").await?;
        if !self.config.publish_unpublish {
            return Err(Status::unimplemented("PUBLISH_UNPUBLISH_VOLUME is not offered"));
        }
        let req = request.into_inner();
        require("volume_id", &req.volume_id)?;
        self.check_secrets(&req.secrets)?;
        // A missing volume, or one not published there, is already unpublished.
        self.volumes.update(&req.volume_id, |_, rec| {
            if req.node_id.is_empty() {
                rec.published_nodes.clear();
            } else {
                rec.published_nodes.remove(&req.node_id);
            }
            Ok(())
        })?;
        self.journal.note(Entry {
            call: "ControllerUnpublishVolume",
            volume: &req.volume_id,
            node: &req.node_id,
            ..Default::default()
        });
        Ok(Response::new(csi::ControllerUnpublishVolumeResponse {}))
    }

    async fn validate_volume_capabilities(
        &self,
        request: Request<csi::ValidateVolumeCapabilitiesRequest>,
    ) -> Result<Response<csi::ValidateVolumeCapabilitiesResponse>, Status> {
        self.faults.inject("ValidateVolumeCapabilities").await?;
        let req = request.into_inner();
        require("volume_id", &req.volume_id)?;
        if req.volume_capabilities.is_empty() {
            return Err(Status::invalid_argument("volume_capabilities is required"));
        }
        if self.volumes.get(&req.volume_id)?.is_none()
            && !self.config.misbehaves(Misbehaviour::ConfirmsUnknownVolume)
        {
            return Err(Status::not_found(format!(
                "volume {} does not exist",
                req.volume_id
            )));
        }
        let resp = match req
            .volume_capabilities
            .iter()
            .try_for_each(|c| check_capability(&self.config, c))
        {
            Ok(()) => csi::ValidateVolumeCapabilitiesResponse {
                confirmed: Some(csi::validate_volume_capabilities_response::Confirmed {
                    volume_context: req.volume_context,
                    volume_capabilities: req.volume_capabilities,
                    parameters: req.parameters,
                    mutable_parameters: Default::default(),
                }),
                message: String::new(),
            },
            Err(status) => csi::ValidateVolumeCapabilitiesResponse {
                confirmed: None,
                message: status.message().to_string(),
            },
        };
        Ok(Response::new(resp))
    }

    async fn list_volumes(
        &self,
        request: Request<csi::ListVolumesRequest>,
    ) -> Result<Response<csi::ListVolumesResponse>, Status> {
        self.faults.inject("ListVolumes").await?;
        self.offered("LIST_VOLUMES")?;
        let req = request.into_inner();
        let (page, next_token) = page(self.volumes.list()?, &req.starting_token, req.max_entries)?;
        let entries = page
            .into_iter()
            .map(|rec| csi::list_volumes_response::Entry {
                status: Some(csi::list_volumes_response::VolumeStatus {
                    published_node_ids: rec.published_nodes.iter().cloned().collect(),
                    volume_condition: self.condition(&rec.id),
                }),
                volume: Some(answers::volume(&self.config, &rec)),
            })
            .collect();
        Ok(Response::new(csi::ListVolumesResponse { entries, next_token }))
    }

    async fn get_capacity(
        &self,
        request: Request<csi::GetCapacityRequest>,
    ) -> Result<Response<csi::GetCapacityResponse>, Status> {
        self.faults.inject("GetCapacity").await?;
        self.offered("GET_CAPACITY")?;
        let req = request.into_inner();
        let mut free = self.volumes.total_bytes() - self.volumes.used_bytes()?;
        // The least of the pools the asked topology falls in.
        if let Some(t) = &req.accessible_topology {
            for (k, v, bytes) in &self.config.segment_capacity {
                if t.segments.get(k) == Some(v) {
                    free = free.min(bytes - self.volumes.used_in(k, v)?);
                }
            }
        }
        Ok(Response::new(csi::GetCapacityResponse {
            available_capacity: free.max(0),
            maximum_volume_size: (!self.config.omits(Omit::VolumeSizeBounds))
                .then(|| self.volumes.total_bytes()),
            minimum_volume_size: None,
        }))
    }

    async fn controller_get_capabilities(
        &self,
        _: Request<csi::ControllerGetCapabilitiesRequest>,
    ) -> Result<Response<csi::ControllerGetCapabilitiesResponse>, Status> {
        self.faults.inject("ControllerGetCapabilities").await?;
        let mut caps = vec![Cap::CreateDeleteVolume, Cap::ListVolumesPublishedNodes];
        if self.config.publish_unpublish {
            caps.push(Cap::PublishUnpublishVolume);
        }
        for (name, cap) in [
            ("SINGLE_NODE_MULTI_WRITER", Cap::SingleNodeMultiWriter),
            ("LIST_VOLUMES", Cap::ListVolumes),
            ("GET_CAPACITY", Cap::GetCapacity),
            ("GET_VOLUME", Cap::GetVolume),
            ("EXPAND_VOLUME", Cap::ExpandVolume),
            ("CREATE_DELETE_SNAPSHOT", Cap::CreateDeleteSnapshot),
            ("LIST_SNAPSHOTS", Cap::ListSnapshots),
            ("CLONE_VOLUME", Cap::CloneVolume),
            ("VOLUME_CONDITION", Cap::VolumeCondition),
            ("MODIFY_VOLUME", Cap::ModifyVolume),
            ("GET_SNAPSHOT", Cap::GetSnapshot),
        ] {
            if self.config.offers(name) {
                caps.push(cap);
            }
        }
        let capabilities = caps
            .into_iter()
            .map(|t| csi::ControllerServiceCapability {
                r#type: Some(csi::controller_service_capability::Type::Rpc(
                    csi::controller_service_capability::Rpc { r#type: t as i32 },
                )),
            })
            .collect();
        Ok(Response::new(csi::ControllerGetCapabilitiesResponse {
            capabilities,
        }))
    }

    async fn controller_get_volume(
        &self,
        request: Request<csi::ControllerGetVolumeRequest>,
    ) -> Result<Response<csi::ControllerGetVolumeResponse>, Status> {
        self.faults.inject("ControllerGetVolume").await?;
        self.offered("GET_VOLUME")?;
        let req = request.into_inner();
        require("volume_id", &req.volume_id)?;
        let Some(rec) = self.volumes.get(&req.volume_id)? else {
            if self.config.like_reference_driver {
                // Reported as a volume in trouble, for volume health.
                return Ok(Response::new(answers::missing_volume(&req.volume_id)));
            }
            return Err(Status::not_found(format!(
                "volume {} does not exist",
                req.volume_id
            )));
        };
        self.faults.reply("ControllerGetVolume").await;
        Ok(Response::new(csi::ControllerGetVolumeResponse {
            volume: Some(answers::volume(&self.config, &rec)),
            status: Some(csi::controller_get_volume_response::VolumeStatus {
                published_node_ids: rec.published_nodes.iter().cloned().collect(),
                volume_condition: self.condition(&rec.id),
            }),
        }))
    }

    async fn create_snapshot(
        &self,
        request: Request<csi::CreateSnapshotRequest>,
    ) -> Result<Response<csi::CreateSnapshotResponse>, Status> {
        self.create_snapshot_now(request.into_inner()).await
    }

    async fn delete_snapshot(
        &self,
        request: Request<csi::DeleteSnapshotRequest>,
    ) -> Result<Response<csi::DeleteSnapshotResponse>, Status> {
        self.delete_snapshot_now(request.into_inner()).await
    }

    async fn list_snapshots(
        &self,
        request: Request<csi::ListSnapshotsRequest>,
    ) -> Result<Response<csi::ListSnapshotsResponse>, Status> {
        self.list_snapshots_now(request.into_inner()).await
    }

    async fn get_snapshot(
        &self,
        request: Request<csi::GetSnapshotRequest>,
    ) -> Result<Response<csi::GetSnapshotResponse>, Status> {
        self.get_snapshot_now(request.into_inner()).await
    }

    async fn controller_expand_volume(
        &self,
        request: Request<csi::ControllerExpandVolumeRequest>,
    ) -> Result<Response<csi::ControllerExpandVolumeResponse>, Status> {
        self.faults.inject("ControllerExpandVolume").await?;
        self.offered("EXPAND_VOLUME")?;
        let req = request.into_inner();
        require("volume_id", &req.volume_id)?;
        self.check_secrets(&req.secrets)?;
        let range = req
            .capacity_range
            .ok_or_else(|| Status::invalid_argument("capacity_range is required"))?;
        let capacity = self
            .volumes
            .expand(&req.volume_id, range.required_bytes, range.limit_bytes)?
            .ok_or_else(|| Status::not_found(format!("volume {} does not exist", req.volume_id)))?;
        tracing::info!(volume = %req.volume_id, capacity, "volume expanded");
        self.faults.reply("ControllerExpandVolume").await;
        Ok(Response::new(csi::ControllerExpandVolumeResponse {
            capacity_bytes: capacity,
            // A mounted file system grows on the node too.
            node_expansion_required: !matches!(
                req.volume_capability.and_then(|c| c.access_type),
                Some(csi::volume_capability::AccessType::Block(_))
            ),
        }))
    }

    async fn controller_modify_volume(
        &self,
        request: Request<csi::ControllerModifyVolumeRequest>,
    ) -> Result<Response<csi::ControllerModifyVolumeResponse>, Status> {
        self.modify_volume(request.into_inner()).await
    }
}
