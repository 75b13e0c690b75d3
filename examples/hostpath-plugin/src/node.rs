//! The Node service: stage, publish and their reverse, on this node's paths.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use berth_proto::csi::v1 as csi;
use csi::node_service_capability::rpc::Type as Cap;
use tonic::{Request, Response, Status};

use crate::answers::{PUBLISHED_NODE_KEY, check_capability};
use crate::config::{Config, Misbehaviour, Omit};
use crate::controller::check_secrets;
use crate::faults::Faults;
use crate::journal::{Entry, Journal};
use crate::mounts::Mounter;
use crate::targets::Targets;
use crate::volumes::{NodeRecord, VolumeRecord, Volumes, reachable};

pub struct Node {
    config: Arc<Config>,
    volumes: Arc<Volumes>,
    mounter: Mounter,
    faults: Arc<Faults>,
    targets: Targets,
    journal: Journal,
}

impl Node {
    pub fn new(
        config: Arc<Config>,
        volumes: Arc<Volumes>,
        mounter: Mounter,
        faults: Arc<Faults>,
        journal: Journal,
    ) -> Self {
        // The controller reads this to check topology and limits on ControllerPublish.
        let record = NodeRecord {
            node_id: config.node_id.clone(),
            topology: config.topology_map(),
            max_volumes: config.max_volumes,
        };
        if let Err(e) = volumes.register_node(&record) {
            tracing::warn!(error = %e.message(), "could not register node");
        }
        Node {
            targets: Targets::new(&config.state_dir, &config.node_id),
            config,
            volumes,
            mounter,
            faults,
            journal,
        }
    }

    /// The volume, which must exist, be reachable from this node, and be
    /// controller-published here when the plugin offers that step.
    fn usable_volume(
        &self,
        id: &str,
        publish_context: &std::collections::HashMap<String, String>,
    ) -> Result<VolumeRecord, Status> {
        let rec = self
            .volumes
            .get(id)?
            .ok_or_else(|| Status::not_found(format!("volume {id} does not exist")))?;
        if !reachable(&rec.accessible_topology, &self.config.topology_map()) {
            return Err(Status::failed_precondition(format!(
                "volume {id} is not accessible from node {}",
                self.config.node_id
            )));
        }
        // Without a publish context, the shared state says where it is published.
        let published_here = if self.config.omits(Omit::PublishContext) {
            rec.published_nodes.contains(&self.config.node_id)
        } else {
            publish_context.get(PUBLISHED_NODE_KEY) == Some(&self.config.node_id)
        };
        if self.config.publish_unpublish && !published_here {
            return Err(Status::failed_precondition(format!(
                "volume {id} was not controller-published to node {}",
                self.config.node_id
            )));
        }
        Ok(rec)
    }

    /// The checks NodeStage and NodePublish share, then the volume they act on.
    fn volume_for_attach(
        &self,
        volume_id: &str,
        capability: Option<&csi::VolumeCapability>,
        secrets: &std::collections::HashMap<String, String>,
        publish_context: &std::collections::HashMap<String, String>,
    ) -> Result<VolumeRecord, Status> {
        require_volume_id(volume_id)?;
        check_capability(
            &self.config,
            capability.ok_or_else(|| Status::invalid_argument("volume_capability is required"))?,
        )?;
        check_secrets(&self.config, secrets)?;
        self.usable_volume(volume_id, publish_context)
    }

    /// CSI: a SINGLE_NODE_SINGLE_WRITER volume is published at one target
    /// path of a node at most; another is FAILED_PRECONDITION. Targets that
    /// no longer show the volume (a crash between attach and record) do not count.
    fn one_writer(
        &self,
        rec: &VolumeRecord,
        capability: Option<&csi::VolumeCapability>,
        target: &Path,
    ) -> Result<(), Status> {
        use csi::volume_capability::access_mode::Mode;
        let mode = capability
            .and_then(|c| c.access_mode.as_ref())
            .map_or(0, |m| m.mode);
        if mode != Mode::SingleNodeSingleWriter as i32 || self.config.misbehaves(Misbehaviour::SecondWriter) {
            return Ok(());
        }
        let data = self.volumes.data_path(&rec.id);
        let elsewhere = self
            .targets
            .of(&rec.id)
            .into_iter()
            .find(|t| Path::new(t) != target && self.mounter.shows(&data, Path::new(t)));
        match elsewhere {
            Some(other) => Err(Status::failed_precondition(format!(
                "volume {} is SINGLE_NODE_SINGLE_WRITER and already published at {other}",
                rec.id
            ))),
            None => Ok(()),
        }
    }

    /// The volume published at `volume_path` (NodeGetVolumeStats,
    /// NodeExpandVolume): NOT_FOUND unless it exists and the path shows it.
    fn published_at(&self, volume_id: &str, volume_path: &str) -> Result<(VolumeRecord, PathBuf), Status> {
        require_volume_id(volume_id)?;
        if volume_path.is_empty() {
            return Err(Status::invalid_argument("volume_path is required"));
        }
        // Any other path the volume is not at (a relative one included) is
        // NOT_FOUND, as the spec has it for a path that does not exist.
        let path = PathBuf::from(volume_path);
        let rec = self
            .volumes
            .get(volume_id)?
            .ok_or_else(|| Status::not_found(format!("volume {volume_id} does not exist")))?;
        if !self.mounter.shows(&self.volumes.data_path(&rec.id), &path) {
            return Err(Status::not_found(format!(
                "volume {} is not published at {}",
                rec.id,
                path.display()
            )));
        }
        Ok((rec, path))
    }

    /// NodeStageVolume of a volume that does not exist, answered OK (a
    /// node-local driver that does not ask): an empty directory is staged,
    /// and stays until NodeUnstageVolume.
    fn stage_unknown(
        &self,
        volume_id: &str,
        staging: &Path,
    ) -> Result<Response<csi::NodeStageVolumeResponse>, Status> {
        require_volume_id(volume_id)?;
        let empty = self.config.state_dir.join("staged-unknown");
        std::fs::create_dir_all(&empty).map_err(|e| io_status("making", &empty, e))?;
        self.mounter
            .attach(&empty, staging, false)
            .map_err(|e| io_status("staging at", staging, e))?;
        tracing::warn!(volume = %volume_id, path = %staging.display(), "staged a volume that does not exist");
        Ok(Response::new(csi::NodeStageVolumeResponse {}))
    }

    /// A node call that changed something, in the journal.
    fn note(&self, call: &str, volume: &str, path: &str, capability: Option<&csi::VolumeCapability>) {
        use csi::volume_capability::access_mode::Mode;
        let mode = capability
            .and_then(|c| c.access_mode.as_ref())
            .and_then(|m| Mode::try_from(m.mode).ok())
            .map_or("", |m| m.as_str_name());
        self.journal.note(Entry {
            call,
            volume,
            node: &self.config.node_id,
            path,
            mode,
            ..Default::default()
        });
    }

    /// NodeUnstage and NodeUnpublish: remove what attach made at `path`.
    fn detach(&self, volume_id: &str, field: &str, path: &str) -> Result<(), Status> {
        require_volume_id(volume_id)?;
        let path = required_path(field, path)?;
        self.mounter
            .detach(&path)
            .map_err(|e| io_status("detaching", &path, e))
    }
}

fn require_volume_id(id: &str) -> Result<(), Status> {
    if id.is_empty() {
        return Err(Status::invalid_argument("volume_id is required"));
    }
    Ok(())
}

fn required_path(field: &str, value: &str) -> Result<PathBuf, Status> {
    if value.is_empty() {
        return Err(Status::invalid_argument(format!("{field} is required")));
    }
    let p = PathBuf::from(value);
    if !p.is_absolute() {
        return Err(Status::invalid_argument(format!(
            "{field} must be an absolute path"
        )));
    }
    Ok(p)
}

fn io_status(what: &str, path: &Path, e: std::io::Error) -> Status {
    match e.kind() {
        std::io::ErrorKind::AlreadyExists => {
            Status::already_exists(format!("{what} {}: {e}", path.display()))
        }
        _ => crate::disk::disk_status(format!("{what} {}: {e}", path.display()), &e),
    }
}

#[tonic::async_trait]
impl csi::node_server::Node for Node {
    async fn node_stage_volume(
        &self,
        request: Request<csi::NodeStageVolumeRequest>,
    ) -> Result<Response<csi::NodeStageVolumeResponse>, Status> {
        self.faults.inject("NodeStageVolume").await?;
        if !self.config.stage_unstage {
            return Err(Status::unimplemented("STAGE_UNSTAGE_VOLUME is not offered"));
        }
        let req = request.into_inner();
        let staging = required_path("staging_target_path", &req.staging_target_path)?;
        if self.config.like_reference_driver && self.volumes.get(&req.volume_id)?.is_none() {
            return self.stage_unknown(&req.volume_id, &staging);
        }
        let any_capability = self
            .config
            .misbehaves(Misbehaviour::StagesWithoutCapability)
            .then(crate::answers::plain_capability);
        let rec = self.volume_for_attach(
            &req.volume_id,
            req.volume_capability.as_ref().or(any_capability.as_ref()),
            &req.secrets,
            &req.publish_context,
        )?;
        self.mounter
            .attach(&self.volumes.data_path(&rec.id), &staging, false)
            .map_err(|e| io_status("staging at", &staging, e))?;
        tracing::info!(volume = %rec.id, path = %staging.display(), "staged on the node");
        self.note("NodeStageVolume", &rec.id, &req.staging_target_path, None);
        Ok(Response::new(csi::NodeStageVolumeResponse {}))
    }

    async fn node_unstage_volume(
        &self,
        request: Request<csi::NodeUnstageVolumeRequest>,
    ) -> Result<Response<csi::NodeUnstageVolumeResponse>, Status> {
        self.faults.inject("NodeUnstageVolume").await?;
        let req = request.into_inner();
        self.detach(&req.volume_id, "staging_target_path", &req.staging_target_path)?;
        self.note(
            "NodeUnstageVolume",
            &req.volume_id,
            &req.staging_target_path,
            None,
        );
        Ok(Response::new(csi::NodeUnstageVolumeResponse {}))
    }

    async fn node_publish_volume(
        &self,
        request: Request<csi::NodePublishVolumeRequest>,
    ) -> Result<Response<csi::NodePublishVolumeResponse>, Status> {
        self.faults.inject("NodePublishVolume").await?;
        let req = request.into_inner();
        let target = required_path("target_path", &req.target_path)?;
        // CSI: the CO makes the target's parent; the plugin, the target.
        if !target.parent().is_some_and(Path::is_dir) {
            return Err(Status::failed_precondition(format!(
                "the parent of target_path {} is not a directory: the CO makes it",
                target.display()
            )));
        }
        let rec = self.volume_for_attach(
            &req.volume_id,
            req.volume_capability.as_ref(),
            &req.secrets,
            &req.publish_context,
        )?;
        let data = self.volumes.data_path(&rec.id);
        let source = if self.config.stage_unstage {
            let staging = required_path("staging_target_path", &req.staging_target_path)?;
            if !self.mounter.shows(&data, &staging) {
                return Err(Status::failed_precondition(format!(
                    "volume {} is not staged at {}",
                    rec.id,
                    staging.display()
                )));
            }
            staging
        } else {
            data
        };
        self.one_writer(&rec, req.volume_capability.as_ref(), &target)?;
        self.mounter
            .attach(&source, &target, req.readonly)
            .map_err(|e| io_status("publishing at", &target, e))?;
        self.targets.add(&rec.id, &target)?;
        tracing::info!(volume = %rec.id, path = %target.display(), "published on the node");
        self.note(
            "NodePublishVolume",
            &rec.id,
            &req.target_path,
            req.volume_capability.as_ref(),
        );
        Ok(Response::new(csi::NodePublishVolumeResponse {}))
    }

    async fn node_unpublish_volume(
        &self,
        request: Request<csi::NodeUnpublishVolumeRequest>,
    ) -> Result<Response<csi::NodeUnpublishVolumeResponse>, Status> {
        self.faults.inject("NodeUnpublishVolume").await?;
        let req = request.into_inner();
        if self.config.like_reference_driver
            && !req.volume_id.is_empty()
            && self.volumes.get(&req.volume_id)?.is_none()
        {
            return Err(Status::not_found(format!(
                "volume {} does not exist",
                req.volume_id
            )));
        }
        if self.faults.lies("NodeUnpublishVolume") {
            require_volume_id(&req.volume_id)?;
            self.journal.note(Entry {
                call: "NodeUnpublishVolume",
                volume: &req.volume_id,
                node: &self.config.node_id,
                path: &req.target_path,
                lied: true,
                ..Default::default()
            });
            return Ok(Response::new(csi::NodeUnpublishVolumeResponse {}));
        }
        self.detach(&req.volume_id, "target_path", &req.target_path)?;
        self.targets.remove(&req.volume_id, &req.target_path)?;
        self.note("NodeUnpublishVolume", &req.volume_id, &req.target_path, None);
        if self.config.misbehaves(Misbehaviour::KeepsTargetPath) {
            std::fs::create_dir_all(&req.target_path)
                .map_err(|e| io_status("keeping", Path::new(&req.target_path), e))?;
        }
        Ok(Response::new(csi::NodeUnpublishVolumeResponse {}))
    }

    async fn node_get_volume_stats(
        &self,
        request: Request<csi::NodeGetVolumeStatsRequest>,
    ) -> Result<Response<csi::NodeGetVolumeStatsResponse>, Status> {
        self.faults.inject("NodeGetVolumeStats").await?;
        if !self.config.offers("GET_VOLUME_STATS") {
            return Err(Status::unimplemented("GET_VOLUME_STATS is not offered"));
        }
        let req = request.into_inner();
        if self.config.misbehaves(Misbehaviour::StatsForUnknownVolume)
            && self.volumes.get(&req.volume_id)?.is_none()
        {
            return Ok(Response::new(csi::NodeGetVolumeStatsResponse::default()));
        }
        let (rec, _) = self.published_at(&req.volume_id, &req.volume_path)?;
        let data = self.volumes.data_path(&rec.id);
        let used = crate::disk::used_bytes(&data).map_err(|e| io_status("measuring", &data, e))? as i64;
        Ok(Response::new(csi::NodeGetVolumeStatsResponse {
            usage: vec![csi::VolumeUsage {
                available: (rec.capacity_bytes - used).max(0),
                total: rec.capacity_bytes,
                used,
                unit: csi::volume_usage::Unit::Bytes as i32,
            }],
            volume_condition: self
                .config
                .offers("VOLUME_CONDITION")
                .then(|| crate::controller::condition(&data)),
        }))
    }

    async fn node_expand_volume(
        &self,
        request: Request<csi::NodeExpandVolumeRequest>,
    ) -> Result<Response<csi::NodeExpandVolumeResponse>, Status> {
        self.faults.inject("NodeExpandVolume").await?;
        if !self.config.offers("EXPAND_VOLUME") {
            return Err(Status::unimplemented("EXPAND_VOLUME is not offered"));
        }
        let req = request.into_inner();
        // NodeExpandVolumeRequest.secrets (CSI 1.10): held to --require-secret like the others.
        check_secrets(&self.config, &req.secrets)?;
        let (rec, path) = self.published_at(&req.volume_id, &req.volume_path)?;
        // A directory has no file system to grow: the new size is the record's.
        tracing::info!(volume = %rec.id, path = %path.display(), capacity = rec.capacity_bytes, "volume expanded on the node");
        Ok(Response::new(csi::NodeExpandVolumeResponse {
            capacity_bytes: rec.capacity_bytes,
        }))
    }

    async fn node_get_capabilities(
        &self,
        _: Request<csi::NodeGetCapabilitiesRequest>,
    ) -> Result<Response<csi::NodeGetCapabilitiesResponse>, Status> {
        self.faults.inject("NodeGetCapabilities").await?;
        let optional = [
            ("EXPAND_VOLUME", Cap::ExpandVolume),
            ("GET_VOLUME_STATS", Cap::GetVolumeStats),
            ("VOLUME_CONDITION", Cap::VolumeCondition),
            ("SINGLE_NODE_MULTI_WRITER", Cap::SingleNodeMultiWriter),
        ];
        let capabilities = self
            .config
            .stage_unstage
            .then_some(Cap::StageUnstageVolume)
            .into_iter()
            .chain(
                optional
                    .into_iter()
                    .filter(|(name, _)| self.config.offers(name))
                    .map(|(_, cap)| cap),
            )
            .map(|t| csi::NodeServiceCapability {
                r#type: Some(csi::node_service_capability::Type::Rpc(
                    csi::node_service_capability::Rpc { r#type: t as i32 },
                )),
            })
            .collect();
        Ok(Response::new(csi::NodeGetCapabilitiesResponse { capabilities }))
    }

    async fn node_get_info(
        &self,
        _: Request<csi::NodeGetInfoRequest>,
    ) -> Result<Response<csi::NodeGetInfoResponse>, Status> {
        self.faults.inject("NodeGetInfo").await?;
        let mut resp = csi::NodeGetInfoResponse {
            node_id: self.config.node_id.clone(),
            max_volumes_per_node: self.config.max_volumes as i64,
            accessible_topology: (!self.config.topology.is_empty()).then(|| csi::Topology {
                segments: self.config.topology.iter().cloned().collect(),
            }),
        };
        for m in &self.config.misbehave {
            match m {
                Misbehaviour::EmptyNodeId => resp.node_id.clear(),
                Misbehaviour::NegativeMaxVolumes => resp.max_volumes_per_node = -1,
                _ => {}
            }
        }
        Ok(Response::new(resp))
    }
}
