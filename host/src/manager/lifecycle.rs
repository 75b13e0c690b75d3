//! One volume's lifecycle: decide the next step from the record, make the one
//! CSI call it needs, record the outcome. Failures go to the retry policy.
//!
//! create:  name → CreateVolume → per node: ControllerPublish → NodeStage → NodePublish
//! undo:    per node: NodeUnpublish → NodeUnstage → ControllerUnpublish → DeleteVolume
//!
//! Steps a plugin does not offer (PUBLISH_UNPUBLISH, STAGE_UNSTAGE) are passed
//! without a call.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::nodes::NodeVolume;
use super::{RequestError, VolumeManager, now_ms};
use crate::config::Config;
use crate::csi::proto::controller_service_capability::rpc::Type as ControllerCap;
use crate::csi::proto::node_service_capability::rpc::Type as NodeCap;
use crate::csi::proto::plugin_capability::service::Type as ServiceCap;
use crate::csi::{CsiError, proto};
use crate::model::{Backend, PublishStep, Retrying, Segments, VolumeRecord, VolumeSpec};
use crate::policy::{
    self, AccessMode, AccessType, CapacityRange, Code, Decision, Health, NamingOutcome, Operation,
    PlacementNode, Policies, Purpose, RetryDecision,
};

#[derive(Clone, Debug, PartialEq, Eq)]
enum Step {
    Name,
    Create,
    ControllerPublish(String),
    NodeStage(String),
    NodePublish(String),
    NodeUnpublish(String),
    NodeUnstage(String),
    ControllerUnpublish(String),
    DropPublication(String),
    Delete,
    Forget,
}

impl Step {
    fn operation(&self) -> Option<Operation> {
        Some(match self {
            Step::Create => Operation::CreateVolume,
            Step::ControllerPublish(_) => Operation::ControllerPublishVolume,
            Step::NodeStage(_) => Operation::NodeStageVolume,
            Step::NodePublish(_) => Operation::NodePublishVolume,
            Step::NodeUnpublish(_) => Operation::NodeUnpublishVolume,
            Step::NodeUnstage(_) => Operation::NodeUnstageVolume,
            Step::ControllerUnpublish(_) => Operation::ControllerUnpublishVolume,
            Step::Delete => Operation::DeleteVolume,
            Step::Name | Step::DropPublication(_) | Step::Forget => return None,
        })
    }

    fn label(&self) -> String {
        match self {
            Step::ControllerPublish(n)
            | Step::NodeStage(n)
            | Step::NodePublish(n)
            | Step::NodeUnpublish(n)
            | Step::NodeUnstage(n)
            | Step::ControllerUnpublish(n)
            | Step::DropPublication(n) => format!("{} on {n}", self.operation().map_or("drop", |o| o.name())),
            other => other
                .operation()
                .map_or_else(|| format!("{other:?}"), |o| o.name().to_string()),
        }
    }
}

/// What the plugins offer, as far as the lifecycle cares.
struct Caps {
    controller_publish: bool,
    node_stage: bool,
}

/// The next step for a record, or none when it is where it should be.
fn next_step(r: &VolumeRecord, caps: impl Fn(&str) -> Caps) -> Option<Step> {
    if r.csi_name.is_none() {
        return Some(if r.deleting { Step::Forget } else { Step::Name });
    }
    if r.backend.is_none() {
        // When deleting, only if an earlier CreateVolume may have created it.
        return Some(if r.deleting && !r.create_sent {
            Step::Forget
        } else {
            Step::Create
        });
    }
    for (node, p) in &r.publications {
        let c = caps(node);
        let wanted = p.wanted && !r.deleting;
        if wanted {
            if p.step < PublishStep::ControllerPublished {
                return Some(Step::ControllerPublish(node.clone()));
            }
            if p.step < PublishStep::Staged && c.node_stage {
                return Some(Step::NodeStage(node.clone()));
            }
            if p.step < PublishStep::Published {
                return Some(Step::NodePublish(node.clone()));
            }
        } else {
            if p.step >= PublishStep::Published {
                return Some(Step::NodeUnpublish(node.clone()));
            }
            if p.step >= PublishStep::Staged && c.node_stage {
                return Some(Step::NodeUnstage(node.clone()));
            }
            if p.step >= PublishStep::ControllerPublished && c.controller_publish {
                return Some(Step::ControllerUnpublish(node.clone()));
            }
            return Some(Step::DropPublication(node.clone()));
        }
    }
    r.deleting.then_some(Step::Delete)
}

/// A failed step: the code and message the retry policy decides on.
struct StepError {
    code: Code,
    message: String,
    /// Whether the plugin answered (as opposed to a check before any call).
    sent: bool,
}

impl From<CsiError> for StepError {
    fn from(e: CsiError) -> Self {
        StepError {
            code: Code::from_grpc(e.code()).unwrap_or(Code::Unknown),
            sent: matches!(e.failure, crate::csi::Failure::Status { .. }),
            message: e.to_string(),
        }
    }
}

fn step_error(code: Code, message: impl Into<String>) -> StepError {
    StepError {
        code,
        message: message.into(),
        sent: false,
    }
}

/// Codes with which a plugin refuses a CreateVolume without doing anything;
/// after the others (timeouts, unavailable, internal errors) it may have.
fn refused_outright(code: Code) -> bool {
    matches!(
        code,
        Code::InvalidArgument
            | Code::AlreadyExists
            | Code::FailedPrecondition
            | Code::OutOfRange
            | Code::Unimplemented
            | Code::PermissionDenied
            | Code::Unauthenticated
            | Code::ResourceExhausted
            | Code::NotFound
    )
}

/// What a successful step changes in the record. Applied twice: to the
/// worker's copy at once, and to the latest stored record when written.
type Apply = Box<dyn Fn(&mut VolumeRecord) + Send + Sync>;

/// Outcomes of CSI calls made but not yet written. They are written together
/// when the volume needs nothing more, before a call that must be preceded
/// by a durable intent (CreateVolume), when a step fails, or when an
/// operator changed the volume meanwhile. Losing them in a crash is safe:
/// every call is idempotent and is made again, and undoing a publication
/// starts from the top (see [`crate::model::Publication::step`]).
#[derive(Default)]
struct Unwritten {
    effects: Vec<Apply>,
    /// The generation this worker last wrote: a record at that generation
    /// changed only by the worker itself, not by an operator.
    written: Option<u64>,
}

impl Unwritten {
    fn push(&mut self, effect: Apply) {
        self.effects.push(effect);
    }
}

impl VolumeManager {
    /// Drives one volume until it is where it should be, waits for a retry, or fails.
    pub(super) async fn reconcile(self: &Arc<Self>, id: &str) {
        let Some(mut record) = self.by_id(id) else { return };
        let mut unwritten = Unwritten::default();
        // CreateVolume's accessibility requirements, decided together with
        // the name: one trip to the guests instead of two.
        let mut placed_ahead = None;
        loop {
            let current = self.generation(id);
            if current != Some(record.generation) && current != unwritten.written {
                // An operator changed the volume: plan from the latest record.
                match self.sync(id, &mut unwritten).await {
                    Ok(Some(latest)) => record = latest,
                    Ok(None) => return,
                    Err(e) => return self.retry_soon(&record, e),
                }
            }
            if record.failure.is_some() {
                return self.finish(id, &record, &mut unwritten).await;
            }
            if let Some(r) = &record.retrying {
                let now = now_ms();
                if r.next_attempt_ms > now {
                    self.wake_after(id, Duration::from_millis(r.next_attempt_ms - now));
                    return self.finish(id, &record, &mut unwritten).await;
                }
            }
            // Capabilities decide which steps exist: never plan before they are known.
            if let Some(waiting) = self.unfingerprinted(&record) {
                tracing::debug!(volume = %record.spec.name, %waiting, "waiting for a fingerprint");
                self.wake_after(id, Duration::from_secs(1));
                return self.finish(id, &record, &mut unwritten).await;
            }
            let Some(step) = next_step(&record, |node| self.caps(&record.spec.plugin, node)) else {
                return self.finish(id, &record, &mut unwritten).await;
            };
            if step == Step::Forget {
                if let Err(e) = self.forget(id).await {
                    tracing::error!(volume = %record.spec.name, error = %e, "could not forget the volume");
                }
                return;
            }
            match self
                .execute(&record, &step, &mut unwritten, &mut placed_ahead)
                .await
            {
                Ok(apply) => {
                    apply(&mut record);
                    record.retrying = None;
                    unwritten.push(apply);
                }
                Err(e) => match self.failed(&record, &step, e, &mut unwritten).await {
                    Ok(Some(latest)) => record = latest,
                    Ok(None) => return,
                    Err(e) => return self.retry_soon(&record, e),
                },
            }
        }
    }

    /// Writes what is unwritten and stops.
    async fn finish(self: &Arc<Self>, id: &str, record: &VolumeRecord, unwritten: &mut Unwritten) {
        if let Err(e) = self.sync(id, unwritten).await {
            self.retry_soon(record, e);
        }
    }

    /// The latest record, with what is unwritten written first (if anything).
    async fn sync(&self, id: &str, unwritten: &mut Unwritten) -> Result<Option<VolumeRecord>, RequestError> {
        if unwritten.effects.is_empty() {
            return Ok(self.by_id(id));
        }
        self.write_unwritten(id, unwritten, |_| {}).await
    }

    fn retry_soon(self: &Arc<Self>, record: &VolumeRecord, e: RequestError) {
        tracing::error!(volume = %record.spec.name, error = %e, "could not record the outcome; retrying in 1s");
        self.wake_after(&record.id, Duration::from_secs(1));
    }

    /// Writes the unwritten outcomes and `also` onto the latest record, in
    /// one durable change; returns that record (`None` if it is gone).
    async fn write_unwritten(
        &self,
        id: &str,
        unwritten: &mut Unwritten,
        also: impl FnOnce(&mut VolumeRecord),
    ) -> Result<Option<VolumeRecord>, RequestError> {
        let pending = std::mem::take(&mut unwritten.effects);
        match self
            .modify(id, |r| {
                for effect in &pending {
                    effect(r);
                }
                if !pending.is_empty() {
                    r.retrying = None;
                }
                also(r);
                Ok(())
            })
            .await
        {
            Ok((_, latest)) => {
                unwritten.written = Some(latest.generation);
                Ok(Some(latest))
            }
            Err(RequestError::NotFound(_)) => Ok(None),
            Err(e) => {
                unwritten.effects = pending;
                Err(e)
            }
        }
    }

    /// Asks the retry policy what to do about a failed step and records the
    /// answer with everything unwritten; returns the record to go on with,
    /// or `None` to stop for now.
    async fn failed(
        self: &Arc<Self>,
        record: &VolumeRecord,
        step: &Step,
        e: StepError,
        unwritten: &mut Unwritten,
    ) -> Result<Option<VolumeRecord>, RequestError> {
        if *step == Step::Create && e.sent && refused_outright(e.code) {
            // The plugin answered no: nothing was created under this name.
            let latest = self
                .write_unwritten(&record.id, unwritten, |r| r.create_sent = false)
                .await?;
            if record.deleting {
                return Ok(latest);
            }
        }
        let attempt = record.retrying.as_ref().map_or(1, |r| r.attempt + 1);
        let first = record
            .retrying
            .as_ref()
            .map_or_else(now_ms, |r| r.first_failure_ms);
        let label = step.label();
        let decision = match step.operation() {
            Some(operation) => {
                let failure = policy::Failure {
                    operation,
                    code: e.code,
                    message: e.message.clone(),
                    attempt,
                    elapsed_ms: now_ms().saturating_sub(first),
                    driver: record.spec.plugin.clone(),
                    settings: vec![],
                };
                self.decide(&[Decision::Retry], move |p| p.classify(failure))
                    .await
                    .unwrap_or_else(|pe| {
                        // The retry module failed (on_error = fail): wait and ask again.
                        tracing::warn!(error = %pe, "retry classification failed");
                        RetryDecision::RetryAfter(5_000)
                    })
            }
            // Berth's own steps (naming) fail only when a policy does: wait and retry.
            None => RetryDecision::RetryAfter(5_000),
        };
        tracing::info!(volume = %record.spec.name, step = %label, attempt, error = %e.message, ?decision, "step failed");
        match decision {
            RetryDecision::Done => {
                unwritten.push(done_effect(step));
                self.write_unwritten(&record.id, unwritten, |_| {}).await
            }
            RetryDecision::RetryAfter(ms) => {
                self.write_unwritten(&record.id, unwritten, |r| {
                    r.retrying = Some(Retrying {
                        operation: label.clone(),
                        attempt,
                        first_failure_ms: first,
                        next_attempt_ms: now_ms() + ms,
                        last_error: e.message.clone(),
                    });
                })
                .await
            }
            RetryDecision::GiveUp(reason) => {
                let latest = self
                    .write_unwritten(&record.id, unwritten, |r| {
                        r.retrying = None;
                        r.failure = Some(format!("{label}: {reason}"));
                    })
                    .await?;
                tracing::warn!(volume = %record.spec.name, step = %label, %reason, "gave up");
                Ok(latest)
            }
        }
    }

    /// A plugin this volume's next steps depend on that has no fingerprint yet.
    fn unfingerprinted(&self, r: &VolumeRecord) -> Option<String> {
        let plugin = &r.spec.plugin;
        let has_controller = self.config.plugin(plugin).is_some_and(|p| p.controller.is_some());
        if has_controller
            && self
                .registry
                .get(plugin)
                .and_then(|p| p.status().fingerprint)
                .is_none()
        {
            return Some(format!("controller of {plugin}"));
        }
        r.publications
            .keys()
            .find(|node| {
                self.nodes
                    .plugin(node, plugin)
                    .and_then(|p| p.status().fingerprint)
                    .is_none()
            })
            .map(|node| format!("node plugin of {plugin} on {node}"))
    }

    fn caps(&self, plugin: &str, node: &str) -> Caps {
        let controller = self
            .registry
            .get(plugin)
            .and_then(|p| p.status().fingerprint)
            .is_some_and(|f| f.has_controller_capability(ControllerCap::PublishUnpublishVolume));
        let stage = self
            .nodes
            .plugin(node, plugin)
            .and_then(|p| p.status().fingerprint)
            .is_some_and(|f| f.has_node_capability(NodeCap::StageUnstageVolume));
        Caps {
            controller_publish: controller,
            node_stage: stage,
        }
    }

    fn secrets_for(&self, spec: &VolumeSpec) -> Result<HashMap<String, String>, StepError> {
        match &spec.secret {
            None => Ok(HashMap::new()),
            Some(name) => self
                .secrets
                .get(name)
                .map(|s| s.into_inner())
                .map_err(|e| step_error(Code::FailedPrecondition, e)),
        }
    }

    fn controller(&self, plugin: &str) -> Result<Arc<crate::csi::registry::Plugin>, StepError> {
        self.registry.get(plugin).ok_or_else(|| {
            step_error(
                Code::FailedPrecondition,
                format!("plugin {plugin:?} has no controller"),
            )
        })
    }

    async fn execute(
        self: &Arc<Self>,
        r: &VolumeRecord,
        step: &Step,
        unwritten: &mut Unwritten,
        placed_ahead: &mut Option<proto::TopologyRequirement>,
    ) -> Result<Apply, StepError> {
        let spec = &r.spec;
        match step {
            Step::Name => self.name_volume(r, placed_ahead).await,
            Step::Create => self.create_volume(r, unwritten, placed_ahead.take()).await,
            Step::ControllerPublish(node) => {
                let p = &r.publications[node];
                if !self.caps(&spec.plugin, node).controller_publish {
                    return Ok(set_step(node, PublishStep::ControllerPublished, None));
                }
                let node_id = self.node_id(&spec.plugin, node)?;
                let b = backend(r);
                let resp = self
                    .controller(&spec.plugin)?
                    .client()
                    .controller_publish_volume(proto::ControllerPublishVolumeRequest {
                        volume_id: b.volume_id.clone(),
                        node_id,
                        volume_capability: Some(capability(spec)),
                        readonly: p.readonly,
                        secrets: self.secrets_for(spec)?,
                        volume_context: b.context.clone().into_iter().collect(),
                    })
                    .await?;
                let context = resp.publish_context.into_iter().collect();
                Ok(set_step(node, PublishStep::ControllerPublished, Some(context)))
            }
            Step::NodeStage(node) => {
                let v = self.node_volume(r, node)?;
                self.nodes.stage(node, &spec.plugin, v).await?;
                Ok(set_step(node, PublishStep::Staged, None))
            }
            Step::NodePublish(node) => {
                let v = self.node_volume(r, node)?;
                let staged = self.caps(&spec.plugin, node).node_stage;
                self.nodes.publish(node, &spec.plugin, v, staged).await?;
                Ok(set_step(node, PublishStep::Published, None))
            }
            Step::NodeUnpublish(node) => {
                self.nodes
                    .unpublish(node, &spec.plugin, &backend(r).volume_id, &r.id)
                    .await?;
                Ok(set_step(node, PublishStep::Staged, None))
            }
            Step::NodeUnstage(node) => {
                self.nodes
                    .unstage(node, &spec.plugin, &backend(r).volume_id, &r.id)
                    .await?;
                Ok(set_step(node, PublishStep::ControllerPublished, None))
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
                Ok(set_step(node, PublishStep::None, None))
            }
            Step::DropPublication(node) => {
                let node = node.clone();
                Ok(Box::new(move |r: &mut VolumeRecord| {
                    r.publications.remove(&node);
                }))
            }
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
        }
    }

    /// Names the volume; also places it when CreateVolume will need that.
    async fn name_volume(
        &self,
        r: &VolumeRecord,
        placed_ahead: &mut Option<proto::TopologyRequirement>,
    ) -> Result<Apply, StepError> {
        let volume = policy_volume(r);
        let nodes = self
            .constrained(&r.spec.plugin)
            .then(|| self.placement_nodes(&r.spec.plugin));
        let (outcome, placed) = self
            .decide(&[Decision::Naming, Decision::Placement], move |p| {
                let placed = nodes.map(|nodes| {
                    let verdicts = p.place(
                        volume.clone(),
                        Purpose::Create,
                        vec![],
                        &policy::candidates(&nodes),
                    );
                    (nodes, verdicts)
                });
                (p.volume_name(volume), placed)
            })
            .await;
        // A placement that failed is asked again by CreateVolume, which reports it.
        *placed_ahead = placed.and_then(|(nodes, verdicts)| requirements(&nodes, &verdicts.ok()?).ok());
        let outcome = outcome.map_err(|e| step_error(Code::Unavailable, e.to_string()))?;
        match outcome {
            NamingOutcome::Named(name) => {
                if !self.claim_csi_name(&name, &r.id) {
                    return Ok(Box::new(move |r: &mut VolumeRecord| {
                        r.failure = Some(format!(
                            "naming: the name {name:?} is already used by another volume"
                        ));
                    }));
                }
                Ok(Box::new(move |r: &mut VolumeRecord| {
                    r.csi_name = Some(name.clone())
                }))
            }
            NamingOutcome::Refused(reason) => Ok(Box::new(move |r: &mut VolumeRecord| {
                r.failure = Some(format!("naming refused the volume: {reason}"));
            })),
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
        let requirements = if self.constrained(&spec.plugin) && !r.deleting {
            match placed_ahead {
                Some(placed) => Some(placed),
                None => Some(self.accessibility(r).await?),
            }
        } else {
            None
        };
        let secrets = self.secrets_for(spec)?;
        let name = r.csi_name.clone().unwrap_or_default();
        if !r.create_sent {
            // The intent (and the name) first: after a crash, a delete must ask the plugin.
            unwritten.push(Box::new(|r: &mut VolumeRecord| r.create_sent = true));
            if let Err(e) = self.sync(&r.id, unwritten).await {
                self.release_csi_name(&name, &r.id);
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
                volume_capabilities: vec![capability(spec)],
                parameters: spec.parameters.clone().into_iter().collect(),
                secrets,
                volume_content_source: None,
                accessibility_requirements: requirements,
                mutable_parameters: Default::default(),
            })
            .await?;
        let v = resp
            .volume
            .filter(|v| !v.volume_id.is_empty())
            .ok_or_else(|| step_error(Code::Internal, "CreateVolume answered without a volume id"))?;
        let backend = Backend {
            volume_id: v.volume_id,
            capacity_bytes: v.capacity_bytes,
            context: v.volume_context.into_iter().collect(),
            accessible_topology: v
                .accessible_topology
                .into_iter()
                .map(|t| t.segments.into_iter().collect())
                .collect(),
        };
        Ok(Box::new(move |r: &mut VolumeRecord| {
            r.backend = Some(backend.clone())
        }))
    }

    /// CreateVolume's accessibility requirements, from the placement decision.
    async fn accessibility(&self, r: &VolumeRecord) -> Result<proto::TopologyRequirement, StepError> {
        let (nodes, verdicts) = self
            .place(r, Purpose::Create, vec![])
            .await
            .map_err(|e| step_error(Code::Unavailable, e.to_string()))?;
        requirements(&nodes, &verdicts)
    }

    /// Whether the plugin's controller takes accessibility requirements.
    fn constrained(&self, plugin: &str) -> bool {
        self.registry
            .get(plugin)
            .and_then(|c| c.status().fingerprint)
            .is_some_and(|f| f.has_plugin_capability(ServiceCap::VolumeAccessibilityConstraints))
    }

    /// Runs a policy decision. A guest runs on one of tokio's blocking
    /// threads: it may take up to its time limit, which must not stall the
    /// reconciler, and wasmtime-wasi's synchronous WASI needs a thread
    /// outside the async workers. The built-in policies run in place.
    async fn decide<R: Send + 'static>(
        &self,
        decisions: &[Decision],
        f: impl FnOnce(&Policies) -> R + Send + 'static,
    ) -> R {
        if decisions.iter().all(|d| self.policies.module(*d).is_none()) {
            return f(&self.policies);
        }
        // As many guests at once as there are cores: more would only queue
        // on the cores, and would each hold a blocking thread.
        let _turn = self.deciding.acquire().await;
        let policies = self.policies.clone();
        match tokio::task::spawn_blocking(move || f(&policies)).await {
            Ok(r) => r,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }

    /// The nodes serving the volume's plugin, and placement's verdict on each.
    async fn place(
        &self,
        r: &VolumeRecord,
        purpose: Purpose,
        accessible_topology: Vec<policy::Pairs>,
    ) -> Result<(Vec<PlacementNode>, Vec<policy::Verdict>), policy::PolicyError> {
        let nodes = self.placement_nodes(&r.spec.plugin);
        let volume = policy_volume(r);
        self.decide(&[Decision::Placement], move |p| {
            let verdicts = p.place(volume, purpose, accessible_topology, &policy::candidates(&nodes))?;
            Ok((nodes, verdicts))
        })
        .await
    }

    /// The nodes that serve `plugin`, as placement sees them.
    pub(super) fn placement_nodes(&self, plugin: &str) -> Vec<PlacementNode> {
        self.config
            .nodes
            .iter()
            .filter(|n| n.plugins.contains_key(plugin))
            .map(|n| {
                let status = self.nodes.plugin(&n.name, plugin).map(|p| p.status());
                let info = status
                    .as_ref()
                    .and_then(|s| s.fingerprint.as_ref())
                    .and_then(|f| f.node.clone());
                let health = match status.map(|s| s.health) {
                    Some(crate::csi::registry::Health::Healthy) => Health::Healthy,
                    Some(crate::csi::registry::Health::Unhealthy { .. }) => Health::Unhealthy,
                    _ => Health::Unknown,
                };
                PlacementNode {
                    name: n.name.clone(),
                    topology: info
                        .as_ref()
                        .map(|i| i.accessible_topology.clone().into_iter().collect())
                        .unwrap_or_default(),
                    labels: n.labels.clone().into_iter().collect(),
                    max_volumes: info.as_ref().and_then(|i| i.max_volumes_per_node),
                    published_volumes: self.published_on(plugin, &n.name),
                    health,
                }
            })
            .collect()
    }

    fn node_id(&self, plugin: &str, node: &str) -> Result<String, StepError> {
        self.nodes
            .plugin(node, plugin)
            .and_then(|p| p.status().fingerprint)
            .and_then(|f| f.node)
            .map(|n| n.node_id)
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
            capability: capability(&r.spec),
            publish_context: p.publish_context.clone().into_iter().collect(),
            volume_context: b.context.clone().into_iter().collect(),
            secrets: self.secrets_for(&r.spec)?,
            readonly: p.readonly,
        })
    }
}

/// CreateVolume's accessibility requirements from placement's verdicts:
/// the eligible nodes' topologies, best score first.
fn requirements(
    nodes: &[PlacementNode],
    verdicts: &[policy::Verdict],
) -> Result<proto::TopologyRequirement, StepError> {
    let mut eligible: Vec<(&PlacementNode, i32)> = nodes
        .iter()
        .zip(verdicts)
        .filter(|(_, v)| v.eligible)
        .map(|(n, v)| (n, v.score))
        .collect();
    if eligible.is_empty() {
        let why: Vec<String> = nodes
            .iter()
            .zip(verdicts)
            .map(|(n, v)| format!("{}: {}", n.name, v.reason))
            .collect();
        return Err(step_error(
            Code::ResourceExhausted,
            format!("placement found no eligible node ({})", why.join("; ")),
        ));
    }
    eligible.sort_by_key(|e| std::cmp::Reverse(e.1));
    let mut topologies: Vec<proto::Topology> = Vec::new();
    for (n, _) in eligible {
        let t = proto::Topology {
            segments: n.topology.iter().cloned().collect(),
        };
        if !topologies.contains(&t) {
            topologies.push(t);
        }
    }
    Ok(proto::TopologyRequirement {
        requisite: topologies.clone(),
        preferred: topologies,
    })
}

fn backend(r: &VolumeRecord) -> &Backend {
    r.backend.as_ref().expect("steps past Create have a backend")
}

fn set_step(node: &str, step: PublishStep, context: Option<Segments>) -> Apply {
    let node = node.to_string();
    Box::new(move |r: &mut VolumeRecord| {
        if let Some(p) = r.publications.get_mut(&node) {
            p.step = step;
            if let Some(c) = &context {
                p.publish_context = c.clone();
            }
            if step == PublishStep::None {
                p.publish_context.clear();
            }
        }
    })
}

/// The effect of a step whose work turned out to be done already.
fn done_effect(step: &Step) -> Apply {
    match step {
        Step::Delete => Box::new(|r: &mut VolumeRecord| {
            r.backend = None;
            r.csi_name = None;
        }),
        Step::NodeUnpublish(n) => set_step(n, PublishStep::Staged, None),
        Step::NodeUnstage(n) => set_step(n, PublishStep::ControllerPublished, None),
        Step::ControllerUnpublish(n) => set_step(n, PublishStep::None, None),
        _ => Box::new(|_| {}),
    }
}

fn access_mode(name: &str) -> Option<AccessMode> {
    policy::cases::access_mode(name).ok()
}

fn capability(spec: &VolumeSpec) -> proto::VolumeCapability {
    use proto::volume_capability::{AccessType as Csi, BlockVolume, MountVolume, access_mode::Mode};
    let mode = match access_mode(&spec.access_mode).unwrap_or(AccessMode::SingleNodeWriter) {
        AccessMode::SingleNodeWriter => Mode::SingleNodeWriter,
        AccessMode::SingleNodeReaderOnly => Mode::SingleNodeReaderOnly,
        AccessMode::MultiNodeReaderOnly => Mode::MultiNodeReaderOnly,
        AccessMode::MultiNodeSingleWriter => Mode::MultiNodeSingleWriter,
        AccessMode::MultiNodeMultiWriter => Mode::MultiNodeMultiWriter,
        AccessMode::SingleNodeSingleWriter => Mode::SingleNodeSingleWriter,
        AccessMode::SingleNodeMultiWriter => Mode::SingleNodeMultiWriter,
    };
    proto::VolumeCapability {
        access_type: Some(if spec.block {
            Csi::Block(BlockVolume {})
        } else {
            Csi::Mount(MountVolume {
                fs_type: spec.fs_type.clone(),
                mount_flags: spec.mount_flags.clone(),
                volume_mount_group: String::new(),
            })
        }),
        access_mode: Some(proto::volume_capability::AccessMode { mode: mode as i32 }),
    }
}

fn pairs(map: &Segments) -> Vec<(String, String)> {
    map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// The volume as policies see it: no secrets, no paths.
fn policy_volume(r: &VolumeRecord) -> policy::Volume {
    let s = &r.spec;
    policy::Volume {
        id: r.id.clone(),
        name: s.name.clone(),
        driver: s.plugin.clone(),
        capacity: CapacityRange {
            required_bytes: s.required_bytes.max(0) as u64,
            limit_bytes: s.limit_bytes.max(0) as u64,
        },
        access_mode: access_mode(&s.access_mode).unwrap_or(AccessMode::SingleNodeWriter),
        access_type: if s.block {
            AccessType::Block
        } else {
            AccessType::Mount
        },
        parameters: pairs(&s.parameters),
        labels: pairs(&s.labels),
        requisite_topology: s.requisite_topology.iter().map(pairs).collect(),
        preferred_topology: s.preferred_topology.iter().map(pairs).collect(),
    }
}

/// Checks an operator's spec, naming the field at fault.
pub fn validate_spec(spec: &VolumeSpec, config: &Config) -> Result<(), RequestError> {
    let bad = |m: String| Err(RequestError::Invalid(m));
    if spec.name.is_empty() || spec.name.len() > 253 || spec.name.chars().any(char::is_control) {
        return bad(format!(
            "name: {:?} must be 1 to 253 bytes without control characters",
            spec.name
        ));
    }
    if config.plugin(&spec.plugin).is_none() {
        let known: Vec<&str> = config.plugins.iter().map(|p| p.name.as_str()).collect();
        return bad(format!(
            "plugin: no plugin named {:?} (configured: {known:?})",
            spec.plugin
        ));
    }
    if spec.required_bytes < 0 || spec.limit_bytes < 0 {
        return bad("required_bytes/limit_bytes: must not be negative".into());
    }
    if spec.limit_bytes > 0 && spec.required_bytes > spec.limit_bytes {
        return bad(format!(
            "required_bytes: {} is more than limit_bytes {}",
            spec.required_bytes, spec.limit_bytes
        ));
    }
    if access_mode(&spec.access_mode).is_none() {
        return bad(format!(
            "access_mode: {:?} is not one of single-node-writer, single-node-reader-only, multi-node-reader-only, multi-node-single-writer, multi-node-multi-writer, single-node-single-writer, single-node-multi-writer",
            spec.access_mode
        ));
    }
    if spec.block && (!spec.fs_type.is_empty() || !spec.mount_flags.is_empty()) {
        return bad("fs_type/mount_flags: a block volume has no file system".into());
    }
    if let Some(s) = &spec.secret
        && (s.is_empty() || s.contains('/') || s.starts_with('.'))
    {
        return bad(format!("secret: {s:?} must be a plain secret name"));
    }
    let empty_segment = |t: &Segments| t.is_empty() || t.keys().any(String::is_empty);
    if spec
        .requisite_topology
        .iter()
        .chain(&spec.preferred_topology)
        .any(empty_segment)
    {
        return bad(
            "requisite_topology/preferred_topology: every topology needs at least one KEY=VALUE".into(),
        );
    }
    Ok(())
}

/// The best eligible node for a publish that names none.
pub(super) async fn choose_node(m: &VolumeManager, r: &VolumeRecord) -> Result<String, RequestError> {
    let Some(b) = &r.backend else {
        return Err(RequestError::Conflict(format!(
            "volume {:?} is still {}: name a node, or publish once it is available",
            r.spec.name,
            r.state()
        )));
    };
    let accessible = b.accessible_topology.iter().map(pairs).collect();
    let (nodes, verdicts) = m
        .place(r, Purpose::Publish, accessible)
        .await
        .map_err(|e| RequestError::Unavailable(e.to_string()))?;
    let mut best: Option<(&PlacementNode, i32)> = None;
    for (n, v) in nodes.iter().zip(&verdicts) {
        let already = r.publications.get(&n.name).is_some_and(|p| p.wanted);
        if v.eligible && !already && best.is_none_or(|(_, s)| v.score > s) {
            best = Some((n, v.score));
        }
    }
    best.map(|(n, _)| n.name.clone()).ok_or_else(|| {
        let why: Vec<String> = nodes
            .iter()
            .zip(&verdicts)
            .map(|(n, v)| format!("{}: {}", n.name, v.reason))
            .collect();
        RequestError::Unavailable(format!(
            "no eligible node for {:?} ({})",
            r.spec.name,
            why.join("; ")
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Publication;

    fn caps(cp: bool, st: bool) -> impl Fn(&str) -> Caps {
        move |_| Caps {
            controller_publish: cp,
            node_stage: st,
        }
    }

    fn record() -> VolumeRecord {
        let mut r = VolumeRecord::new("id".into(), VolumeSpec::default());
        r.csi_name = Some("n".into());
        r.backend = Some(Backend {
            volume_id: "v".into(),
            capacity_bytes: 1,
            context: Default::default(),
            accessible_topology: vec![],
        });
        r
    }

    fn publication(step: PublishStep, wanted: bool) -> Publication {
        Publication {
            wanted,
            readonly: false,
            step,
            publish_context: Default::default(),
        }
    }

    #[test]
    fn a_new_volume_is_named_then_created() {
        let mut r = VolumeRecord::new("id".into(), VolumeSpec::default());
        assert_eq!(next_step(&r, caps(true, true)), Some(Step::Name));
        r.csi_name = Some("n".into());
        assert_eq!(next_step(&r, caps(true, true)), Some(Step::Create));
        r.deleting = true;
        assert_eq!(
            next_step(&r, caps(true, true)),
            Some(Step::Forget),
            "no CreateVolume was ever sent"
        );
        r.create_sent = true;
        assert_eq!(
            next_step(&r, caps(true, true)),
            Some(Step::Create),
            "a create may have happened"
        );
        r.csi_name = None;
        assert_eq!(
            next_step(&r, caps(true, true)),
            Some(Step::Forget),
            "never named: nothing to delete"
        );
    }

    #[test]
    fn publish_goes_forward_and_skips_what_the_plugin_lacks() {
        let mut r = record();
        r.publications
            .insert("n1".into(), publication(PublishStep::None, true));
        assert_eq!(
            next_step(&r, caps(true, true)),
            Some(Step::ControllerPublish("n1".into()))
        );
        r.publications.get_mut("n1").unwrap().step = PublishStep::ControllerPublished;
        assert_eq!(
            next_step(&r, caps(true, true)),
            Some(Step::NodeStage("n1".into()))
        );
        assert_eq!(
            next_step(&r, caps(true, false)),
            Some(Step::NodePublish("n1".into()))
        );
        r.publications.get_mut("n1").unwrap().step = PublishStep::Published;
        assert_eq!(next_step(&r, caps(true, true)), None);
    }

    #[test]
    fn unpublish_and_delete_go_backward() {
        let mut r = record();
        r.publications
            .insert("n1".into(), publication(PublishStep::Published, true));
        r.deleting = true;
        assert_eq!(
            next_step(&r, caps(true, true)),
            Some(Step::NodeUnpublish("n1".into()))
        );
        r.publications.get_mut("n1").unwrap().step = PublishStep::Staged;
        assert_eq!(
            next_step(&r, caps(true, true)),
            Some(Step::NodeUnstage("n1".into()))
        );
        r.publications.get_mut("n1").unwrap().step = PublishStep::ControllerPublished;
        assert_eq!(
            next_step(&r, caps(false, true)),
            Some(Step::DropPublication("n1".into()))
        );
        assert_eq!(
            next_step(&r, caps(true, true)),
            Some(Step::ControllerUnpublish("n1".into()))
        );
        r.publications.clear();
        assert_eq!(next_step(&r, caps(true, true)), Some(Step::Delete));
        done_effect(&Step::Delete)(&mut r);
        assert_eq!(next_step(&r, caps(true, true)), Some(Step::Forget));
    }
}
