//! Carrying out one step: the CSI call it needs, with what the call needs
//! (node ids, secrets, capabilities, paths), and what it changes in the record.

use crate::worker::Worker;

use crate::nodes::NodeVolume;
use crate::worker::outcome::{
    Apply, StepError, Unwritten, controller_done, done_effect, drop_publication, node_at, sent, step_error,
};
use crate::worker::plan::Step;
use berth_csi::proto;
use berth_csi::proto::controller_service_capability::rpc::Type as ControllerCap;
use berth_csi::proto::node_service_capability::rpc::Type as NodeCap;
use berth_model::{
    AccessMode, AccessType, Backend, NodeLevel, SourceKind, VolumeRecord, VolumeSource, VolumeSpec,
};
use berth_policy::Code;

impl Worker<'_> {
    /// Makes the call `step` needs; returns what it changes in the record.
    pub(crate) async fn execute(
        &self,
        r: &VolumeRecord,
        step: &Step,
        unwritten: &mut Unwritten,
        placed_ahead: &mut Option<proto::TopologyRequirement>,
    ) -> Result<Apply, StepError> {
        if !self.may_act() {
            // Deposed or about to be: the term ends around this step.
            std::future::pending::<()>().await;
        }
        let spec = &r.spec;
        match step {
            Step::Name => self.decisions().name_volume(r, placed_ahead).await,
            Step::Create => self.create_volume(r, unwritten, placed_ahead.take()).await,
            Step::ControllerPublish(node) => {
                let p = &r.publications[node];
                if !self.caps(&spec.plugin, node).controller_publish {
                    return Ok(controller_done(node, true, None));
                }
                let node_id = self.node_id(&spec.plugin, node)?;
                self.announce(r, node, unwritten).await?;
                let b = backend(r);
                let resp = self
                    .controller(&spec.plugin)?
                    .client()
                    .controller_publish_volume(proto::ControllerPublishVolumeRequest {
                        volume_id: b.volume_id.clone(),
                        node_id,
                        volume_capability: Some(self.controller_capability(spec)),
                        readonly: p.readonly,
                        secrets: self.secrets_for(spec)?,
                        volume_context: b.context.clone().into_iter().collect(),
                    })
                    .await?;
                let context = resp.publish_context.into_iter().collect();
                Ok(sent(node, controller_done(node, true, Some(context))))
            }
            Step::NodePublish(node) => {
                let v = self.node_volume(r, node)?;
                let staged = self.caps(&spec.plugin, node).node_stage;
                self.announce(r, node, unwritten).await?;
                self.nodes.publish(node, &spec.plugin, v, staged).await?;
                Ok(sent(node, node_at(node, NodeLevel::Published)))
            }
            Step::NodeUnpublish(node) => {
                self.nodes
                    .unpublish(node, &spec.plugin, &backend(r).volume_id, &r.id)
                    .await?;
                Ok(node_at(node, NodeLevel::Absent))
            }
            Step::ControllerUnpublish(node) => {
                let node_id = self.node_id(&spec.plugin, node)?;
                self.controller(&spec.plugin)?
                    .client()
                    .controller_unpublish_volume(proto::ControllerUnpublishVolumeRequest {
                        volume_id: backend(r).volume_id.clone(),
                        node_id,
                        secrets: self.secrets_for(spec)?,
                    })
                    .await?;
                Ok(controller_done(node, false, None))
            }
            Step::DropPublication(node) => Ok(drop_publication(node)),
            Step::Delete => {
                self.controller(&spec.plugin)?
                    .client()
                    .delete_volume(proto::DeleteVolumeRequest {
                        volume_id: backend(r).volume_id.clone(),
                        secrets: self.secrets_for(spec)?,
                    })
                    .await?;
                Ok(done_effect(step))
            }
            Step::Forget => Ok(Box::new(|_| {})),
            Step::ControllerExpand => self.controller_expand(r).await,
            Step::ControllerModify => self.controller_modify(r).await,
            Step::NodeExpand(node) => {
                let done = {
                    let node = node.clone();
                    move |r: &mut VolumeRecord| {
                        if let Some(p) = r.publications.get_mut(&node) {
                            p.expand_pending = false;
                        }
                        if let Some(b) = r.backend_mut() {
                            b.node_expansion_required = false;
                        }
                    }
                };
                if self.caps(&spec.plugin, node).node_expand {
                    let v = self.node_volume(r, node)?;
                    let staged = self.caps(&spec.plugin, node).node_stage;
                    self.nodes
                        .expand(node, &spec.plugin, v, staged, capacity_range(spec))
                        .await?;
                }
                Ok(Box::new(done))
            }
            Step::CreateSnapshot(name) => self.cut_snapshot(r, name, unwritten).await,
            Step::DeleteSnapshot(name) => {
                let snapshot_id = r.snapshots[name]
                    .backend
                    .as_ref()
                    .map(|b| b.snapshot_id.clone())
                    .unwrap_or_default();
                self.controller(&spec.plugin)?
                    .client()
                    .delete_snapshot(proto::DeleteSnapshotRequest {
                        snapshot_id,
                        secrets: self.secrets_for(spec)?,
                    })
                    .await?;
                Ok(done_effect(step))
            }
            Step::DropSnapshot(_) | Step::DropGroupSnapshot(_) => Ok(done_effect(step)),
            Step::CreateGroupSnapshot(name) => {
                self.snapshots_in(r.spec.namespace.clone())
                    .take_group_snapshot(r, name, unwritten)
                    .await
            }
            Step::DeleteGroupSnapshot(name) => {
                self.snapshots_in(r.spec.namespace.clone())
                    .delete_group_snapshot_now(r, name)
                    .await?;
                Ok(done_effect(step))
            }
        }
    }

    async fn controller_expand(&self, r: &VolumeRecord) -> Result<Apply, StepError> {
        let spec = &r.spec;
        self.offered(&spec.plugin, ControllerCap::ExpandVolume)?;
        let resp = self
            .controller(&spec.plugin)?
            .client()
            .controller_expand_volume(proto::ControllerExpandVolumeRequest {
                volume_id: backend(r).volume_id.clone(),
                capacity_range: Some(capacity_range(spec)),
                secrets: self.secrets_for(spec)?,
                volume_capability: Some(self.controller_capability(spec)),
            })
            .await?;
        // 0 breaks the spec (the field is REQUIRED here) but says no less
        // than CreateVolume's 0 does: unknown.
        if resp.capacity_bytes != 0 && resp.capacity_bytes < spec.required_bytes {
            return Err(step_error(
                Code::OutOfRange,
                format!(
                    "ControllerExpandVolume answered {} bytes, less than the {} asked for",
                    resp.capacity_bytes, spec.required_bytes
                ),
            ));
        }
        let asked = spec.required_bytes;
        Ok(Box::new(move |r: &mut VolumeRecord| {
            let mut any = false;
            if resp.node_expansion_required {
                for p in r.publications.values_mut().filter(|p| p.sent) {
                    p.expand_pending = true;
                    any = true;
                }
            }
            if let Some(b) = r.backend_mut() {
                b.sized(resp.capacity_bytes, asked);
                // Nowhere to do it now: the next publication does.
                b.node_expansion_required = resp.node_expansion_required && !any;
            }
        }))
    }

    /// Sends the spec's mutable parameters, all of them: the plugin changes
    /// what differs, and a repeat after a crash changes nothing.
    async fn controller_modify(&self, r: &VolumeRecord) -> Result<Apply, StepError> {
        let spec = &r.spec;
        self.offered(&spec.plugin, ControllerCap::ModifyVolume)?;
        let sent = spec.mutable_parameters.clone();
        self.controller(&spec.plugin)?
            .client()
            .controller_modify_volume(proto::ControllerModifyVolumeRequest {
                volume_id: backend(r).volume_id.clone(),
                secrets: self.secrets_for(spec)?,
                mutable_parameters: sent.clone().into_iter().collect(),
            })
            .await?;
        Ok(Box::new(move |r: &mut VolumeRecord| {
            if let Some(b) = r.backend_mut() {
                b.mutable_parameters = sent.clone();
            }
        }))
    }

    /// Refuses a step the plugin's controller does not offer, as the
    /// plugin's own answer would (FAILED_PRECONDITION, for the retry policy).
    pub(crate) fn offered(&self, plugin: &str, cap: ControllerCap) -> Result<(), StepError> {
        let offered = self
            .controller(plugin)?
            .status()
            .fingerprint
            .is_some_and(|f| f.has_controller_capability(cap));
        match offered {
            true => Ok(()),
            false => Err(step_error(
                Code::FailedPrecondition,
                format!("plugin {plugin:?} does not offer {}", cap.as_str_name()),
            )),
        }
    }

    async fn create_volume(
        &self,
        r: &VolumeRecord,
        unwritten: &mut Unwritten,
        placed_ahead: Option<proto::TopologyRequirement>,
    ) -> Result<Apply, StepError> {
        let spec = &r.spec;
        let controller = self.controller(&spec.plugin)?;
        // The placement its request decided with the name, if it did.
        let placed_ahead = placed_ahead.or_else(|| self.table.uncalled().create_placement(&r.id));
        let mut placement_note = None;
        let requirements = if self.decisions().constrained(&spec.plugin) == Some(true) && !r.deleting {
            match placed_ahead {
                Some(placed) => Some(placed),
                None => {
                    let (placed, note) = self.decisions().accessibility(r).await?;
                    placement_note = Some(note);
                    Some(placed)
                }
            }
        } else {
            None
        };
        if !spec.mutable_parameters.is_empty() {
            // CSI: only a plugin that offers MODIFY_VOLUME is sent them.
            self.offered(&spec.plugin, ControllerCap::ModifyVolume)?;
        }
        let secrets = self.secrets_for(spec)?;
        let name = r.csi_name.clone().unwrap_or_default();
        if r.create_sent {
            // Marked sent by its request (or by an earlier try): the call
            // goes only if no delete withdrew it since. Whatever failed
            // before this left the request's note, so a delete still
            // forgets the volume without a call.
            let stands = self
                .table
                .first_calls()
                .create(&r.id)
                .await
                .map_err(|e| step_error(Code::Unavailable, e.to_string()))?;
            if !stands {
                return Err(withdrawn_error());
            }
        } else {
            // The intent (and the name) first: after a crash, a delete must ask the plugin.
            // Publications already asked for are about to be sent: saying so
            // now saves each its own write before its first call.
            unwritten.push(Box::new(|r: &mut VolumeRecord| {
                r.create_sent = true;
                mark_wanted_sent(r);
            }));
            if let Err(e) = self.sync(&r.id, unwritten).await {
                self.table.claims().release_csi_name(&name, &r.id);
                return Err(step_error(Code::Unavailable, e.to_string()));
            }
        }
        let resp = controller
            .client()
            .create_volume(proto::CreateVolumeRequest {
                name,
                capacity_range: (spec.required_bytes > 0 || spec.limit_bytes > 0).then_some(
                    proto::CapacityRange {
                        required_bytes: spec.required_bytes,
                        limit_bytes: spec.limit_bytes,
                    },
                ),
                volume_capabilities: vec![self.controller_capability(spec)],
                parameters: spec.parameters.clone().into_iter().collect(),
                secrets,
                volume_content_source: spec.source.as_deref().map(content_source),
                accessibility_requirements: requirements,
                mutable_parameters: spec.mutable_parameters.clone().into_iter().collect(),
            })
            .await?;
        let v = resp
            .volume
            .filter(|v| !v.volume_id.is_empty())
            .ok_or_else(|| step_error(Code::Internal, "CreateVolume answered without a volume id"))?;
        let mut backend = backend_of(v);
        backend.sized(backend.capacity_bytes, spec.required_bytes);
        backend.mutable_parameters = spec.mutable_parameters.clone();
        let backend = std::sync::Arc::new(backend);
        Ok(Box::new(move |r: &mut VolumeRecord| {
            r.backend = Some(backend.clone());
            mark_wanted_sent(r);
            if let Some(note) = &placement_note {
                r.explain_mut().placement = Some(Box::new(note.clone()));
            }
        }))
    }

    /// Makes it durable that a publication is being sent, before its first
    /// call: from then on, undoing it asks the plugins.
    async fn announce(
        &self,
        r: &VolumeRecord,
        node: &str,
        unwritten: &mut Unwritten,
    ) -> Result<(), StepError> {
        // The durable record decides, not this worker's copy: outcomes applied
        // to the copy (CreateVolume's marks publications sent) may not be
        // written yet, and a call must never go out before its `sent` is.
        if r.publications.get(node).is_none() {
            return Ok(());
        }
        if self.table.first_calls().publication_sent(&r.id, node) {
            // Marked sent already (by the request that asked for it,
            // perhaps): the call goes only if no operator withdrew it since.
            let stands = self
                .table
                .first_calls()
                .publication(&r.id, node)
                .await
                .map_err(|e| step_error(Code::Unavailable, e.to_string()))?;
            if !stands {
                return Err(withdrawn_error());
            }
            return Ok(());
        }
        // Marked sent only if still wanted: an operator who withdrew it
        // meanwhile (unwant saw it unsent, so it kept no step to undo) must
        // not have a call go out that nothing would undo.
        let mut withdrawn = false;
        self.write_unwritten(&r.id, unwritten, |latest| {
            // A request may have marked it meanwhile: its note goes now, in
            // turn with a withdrawal, since the call follows this write.
            self.table.uncalled().withdraw(&r.id, node);
            let deleting = latest.deleting;
            match latest.publications.get_mut(node) {
                Some(p) if p.wanted && !deleting => p.sent = true,
                _ => withdrawn = true,
            }
        })
        .await
        .map_err(|e| step_error(Code::Unavailable, e.to_string()))?;
        if withdrawn {
            return Err(withdrawn_error());
        }
        Ok(())
    }

    /// The volume capability for the node plugin's calls on `node`.
    fn node_capability(&self, spec: &VolumeSpec, node: &str) -> proto::VolumeCapability {
        let newer = self
            .nodes
            .plugin_status(node, &spec.plugin)
            .and_then(|s| s.fingerprint)
            .is_some_and(|f| f.has_node_capability(NodeCap::SingleNodeMultiWriter));
        capability(spec, newer)
    }

    fn node_id(&self, plugin: &str, node: &str) -> Result<String, StepError> {
        self.nodes
            .plugin_status(node, plugin)
            .and_then(|s| s.fingerprint)
            .and_then(|f| f.node.as_ref().map(|n| n.node_id.clone()))
            .ok_or_else(|| {
                step_error(
                    Code::Unavailable,
                    format!("the node plugin of {plugin:?} on {node:?} has not reported its node id yet"),
                )
            })
    }

    fn node_volume(&self, r: &VolumeRecord, node: &str) -> Result<NodeVolume, StepError> {
        let b = backend(r);
        let p = &r.publications[node];
        Ok(NodeVolume {
            volume_id: b.volume_id.clone(),
            berth_id: r.id.clone(),
            capability: self.node_capability(&r.spec, node),
            publish_context: p.publish_context.clone().into_iter().collect(),
            volume_context: b.context.clone().into_iter().collect(),
            secrets: self.secrets_for(&r.spec)?,
            readonly: p.readonly,
        })
    }
}

/// What Berth keeps of the plugin's answer about a volume.
pub(crate) fn backend_of(v: proto::Volume) -> Backend {
    Backend {
        volume_id: v.volume_id,
        capacity_bytes: v.capacity_bytes,
        sized_for: None,
        context: v.volume_context.into_iter().collect(),
        accessible_topology: v
            .accessible_topology
            .into_iter()
            .map(|t| t.segments.into_iter().collect())
            .collect(),
        node_expansion_required: false,
        mutable_parameters: Default::default(),
    }
}

fn capacity_range(spec: &VolumeSpec) -> proto::CapacityRange {
    proto::CapacityRange {
        required_bytes: spec.required_bytes,
        limit_bytes: spec.limit_bytes,
    }
}

fn content_source(source: &VolumeSource) -> proto::VolumeContentSource {
    use proto::volume_content_source::{SnapshotSource, Type, VolumeSource as FromVolume};
    proto::VolumeContentSource {
        r#type: Some(match source.kind {
            SourceKind::Snapshot => Type::Snapshot(SnapshotSource {
                snapshot_id: source.id.clone(),
            }),
            SourceKind::Volume => Type::Volume(FromVolume {
                volume_id: source.id.clone(),
            }),
        }),
    }
}

/// Not a failure, so the retry policy is not asked: the volume is planned
/// again at once from the latest record.
fn withdrawn_error() -> StepError {
    StepError {
        not_yet: Some(std::time::Duration::ZERO),
        ..step_error(Code::Aborted, "withdrawn before its first call; planning again")
    }
}

/// Conservative: a publication marked sent but never sent only costs its
/// node a call that finds nothing to undo.
fn mark_wanted_sent(r: &mut VolumeRecord) {
    for p in r.publications.values_mut().filter(|p| p.wanted) {
        p.sent = true;
    }
}

pub(crate) fn backend(r: &VolumeRecord) -> &Backend {
    r.backend.as_ref().expect("steps past Create have a backend")
}

/// The spec's access mode and type as CSI's volume capability. The two
/// single-node modes of CSI 1.5 go only to a plugin that offers
/// SINGLE_NODE_MULTI_WRITER (`newer_modes`); one from before knows them as
/// SINGLE_NODE_WRITER, which the spec has every plugin keep accepting.
pub(crate) fn capability(spec: &VolumeSpec, newer_modes: bool) -> proto::VolumeCapability {
    use proto::volume_capability::{AccessType as Csi, BlockVolume, MountVolume, access_mode::Mode};
    let mode = match spec.access_mode {
        AccessMode::SingleNodeSingleWriter | AccessMode::SingleNodeMultiWriter if !newer_modes => {
            Mode::SingleNodeWriter
        }
        AccessMode::SingleNodeWriter => Mode::SingleNodeWriter,
        AccessMode::SingleNodeReaderOnly => Mode::SingleNodeReaderOnly,
        AccessMode::MultiNodeReaderOnly => Mode::MultiNodeReaderOnly,
        AccessMode::MultiNodeSingleWriter => Mode::MultiNodeSingleWriter,
        AccessMode::MultiNodeMultiWriter => Mode::MultiNodeMultiWriter,
        AccessMode::SingleNodeSingleWriter => Mode::SingleNodeSingleWriter,
        AccessMode::SingleNodeMultiWriter => Mode::SingleNodeMultiWriter,
    };
    proto::VolumeCapability {
        access_type: Some(match spec.access_type {
            AccessType::Block => Csi::Block(BlockVolume {}),
            AccessType::Mount => Csi::Mount(MountVolume {
                fs_type: spec.fs_type.clone(),
                mount_flags: spec.mount_flags.clone(),
                volume_mount_group: String::new(),
            }),
        }),
        access_mode: Some(proto::volume_capability::AccessMode { mode: mode as i32 }),
    }
}
