//! Guest decisions for the lifecycle: naming, placement for CreateVolume's
//! accessibility requirements and for publishes that name no node. Guests and
//! built-in policies alike run on the caller's task.

pub(crate) mod capacity;
pub(crate) mod log;

use crate::Conflict;
use crate::Unready;
use tracing::Instrument;

use crate::RequestError;
use crate::worker::outcome::{Apply, StepError, policy_step_error, step_error};
use berth_csi::proto;
use berth_csi::proto::plugin_capability::service::Type as ServiceCap;
use berth_csi::registry::Health as PluginHealth;
use berth_model::{self as model, AccessType, DecisionNote, Interned, NodeVerdict, Segments, VolumeRecord};
use berth_policy::logged::{Answer, Logged};
use berth_policy::{
    self as policy, AccessMode, CapacityRange, Code, Decision, Health, NamingOutcome, PlacementNode,
    Policies, Purpose,
};

crate::shared::view!(
    /// Policy decisions: naming and placement, with the capacity placement
    /// asks for, each kept in the decision log.
    Decisions,
    decisions
);

impl Decisions<'_> {
    /// Runs a policy decision on this task. A guest yields to the runtime at
    /// every epoch tick it runs past, so even one that takes its whole time
    /// limit does not stall the reconciler.
    ///
    /// A guest's decision runs in a span naming the volume, so every warning
    /// a policy logs says which volume it was deciding for.
    pub(crate) async fn decide<R>(
        &self,
        volume: &str,
        decisions: &[Decision],
        f: impl AsyncFnOnce(&Policies) -> R,
    ) -> R {
        if decisions.iter().all(|d| self.policies.module(*d).is_none()) {
            return f(&self.policies).await;
        }
        let span = tracing::info_span!("decide", volume = %volume);
        f(&self.policies).instrument(span).await
    }

    /// Names the volume; also places it when CreateVolume will need that.
    pub(crate) async fn name_volume(
        &self,
        r: &VolumeRecord,
        placed_ahead: &mut Option<proto::TopologyRequirement>,
    ) -> Result<Apply, StepError> {
        let volume = policy_volume(r);
        let nodes = self
            .constrained(&r.spec.plugin)
            .unwrap_or(false)
            .then(|| self.placement_nodes(&r.spec.plugin));
        let ((outcome, named), placed) = self
            .decide(
                &r.spec.name,
                &[Decision::Naming, Decision::Placement],
                async |p| {
                    let placed = match nodes {
                        Some(nodes) => {
                            let candidates = policy::candidates(&nodes);
                            let (verdicts, logged) = p
                                .place_logged(volume.clone(), Purpose::Create, vec![], &candidates)
                                .await;
                            Some((nodes, verdicts, logged))
                        }
                        None => None,
                    };
                    (p.volume_name_logged(volume).await, placed)
                },
            )
            .await;
        let naming_note = note(&named, describe(&named.answer));
        self.log_decision(named);
        let mut placement_note = None;
        if let Some((nodes, verdicts, logged)) = placed {
            // A placement that failed is asked again by CreateVolume, which reports it.
            if let Ok(mut verdicts) = verdicts {
                self.fit(r, &nodes, &mut verdicts).await;
                *placed_ahead = requirements(&nodes, &verdicts).ok();
                placement_note = Some(placed_note(&logged, &nodes, &verdicts));
            }
            self.log_decision(logged);
        }
        let explain = move |r: &mut VolumeRecord| {
            r.explain_mut().naming = Some(Box::new(naming_note.clone()));
            if let Some(n) = &placement_note {
                r.explain_mut().placement = Some(Box::new(n.clone()));
            }
        };
        let outcome = outcome.map_err(|e| policy_step_error(&e))?;
        match outcome {
            NamingOutcome::Named(name) => {
                if !self.table.claims().claim_csi_name(&name, &r.id) {
                    return Ok(Box::new(move |r: &mut VolumeRecord| {
                        explain(r);
                        r.give_up(format!(
                            "naming: the name {} is already used by another volume",
                            berth_model::text::echo(&name)
                        ));
                    }));
                }
                Ok(Box::new(move |r: &mut VolumeRecord| {
                    explain(r);
                    r.csi_name = Some(name.clone())
                }))
            }
            NamingOutcome::Refused(reason) => Ok(Box::new(move |r: &mut VolumeRecord| {
                explain(r);
                r.give_up(format!("naming refused the volume: {reason}"));
            })),
        }
    }

    /// CreateVolume's accessibility requirements, from the placement decision
    /// (and the decision, for the record).
    pub(crate) async fn accessibility(
        &self,
        r: &VolumeRecord,
    ) -> Result<(proto::TopologyRequirement, DecisionNote), StepError> {
        let (nodes, mut verdicts, logged) = self
            .place(r, Purpose::Create, vec![])
            .await
            .map_err(|e| policy_step_error(&e))?;
        self.fit(r, &nodes, &mut verdicts).await;
        let note = placed_note(&logged, &nodes, &verdicts);
        let placed = requirements(&nodes, &verdicts).map_err(|e| match self.reattaching() {
            // Not a failure for the retry policy: placement runs again as
            // soon as the agents are back (or the window closes).
            Some(node) => StepError {
                not_yet: Some(std::time::Duration::from_millis(200)),
                ..step_error(
                    Code::Unavailable,
                    format!("waiting for node {node:?}'s agent, not heard from since this server started, before placing"),
                )
            },
            None => e,
        })?;
        Ok((placed, note))
    }

    /// A node not heard from since this term started, while it is young
    /// enough (within the heartbeat timeout) for its agent to be on its way back.
    fn reattaching(&self) -> Option<String> {
        if self.started.elapsed() >= self.config.heartbeat_timeout {
            return None;
        }
        self.nodes
            .nodes()
            .into_iter()
            .find(|n| n.state == crate::nodes::NodeState::Unknown)
            .map(|n| n.name)
    }

    /// Whether the plugin's controller takes accessibility requirements;
    /// `None` until it has been fingerprinted.
    pub(crate) fn constrained(&self, plugin: &str) -> Option<bool> {
        self.registry
            .get(plugin)
            .and_then(|c| c.status().fingerprint)
            .map(|f| f.has_plugin_capability(ServiceCap::VolumeAccessibilityConstraints))
    }

    /// The nodes serving the volume's plugin, and placement's verdict on each
    /// (the decision is logged).
    async fn place(
        &self,
        r: &VolumeRecord,
        purpose: Purpose,
        accessible_topology: Vec<policy::Pairs>,
    ) -> Result<(Vec<PlacementNode>, policy::Verdicts, Logged), policy::PolicyError> {
        let nodes = self.placement_nodes(&r.spec.plugin);
        let volume = policy_volume(r);
        let (verdicts, logged) = self
            .decide(&r.spec.name, &[Decision::Placement], async |p| {
                let candidates = policy::candidates(&nodes);
                p.place_logged(volume, purpose, accessible_topology, &candidates)
                    .await
            })
            .await;
        self.log_decision(logged.clone());
        Ok((nodes, verdicts?, logged))
    }

    /// The nodes that serve `plugin`, as placement sees them.
    fn placement_nodes(&self, plugin: &str) -> Vec<PlacementNode> {
        self.fleet()
            .node_views(Some(plugin))
            .into_iter()
            .map(|v| PlacementNode {
                name: v.node,
                topology: v
                    .info
                    .as_ref()
                    .map(|i| i.accessible_topology.clone().into_iter().collect())
                    .unwrap_or_default(),
                labels: v.labels.into_iter().collect(),
                max_volumes: v.info.as_ref().and_then(|i| i.max_volumes_per_node),
                published_volumes: v.published_volumes,
                health: match v.health {
                    PluginHealth::Healthy => Health::Healthy,
                    PluginHealth::Unhealthy { .. } => Health::Unhealthy,
                    PluginHealth::Unknown => Health::Unknown,
                },
            })
            .collect()
    }

    /// The best eligible node for a publish that names none, and the decision.
    pub(crate) async fn choose_node(&self, r: &VolumeRecord) -> Result<(String, DecisionNote), RequestError> {
        if r.backend.is_none() {
            return Err(Conflict::NotAvailable {
                name: r.spec.name.clone(),
                state: r.state().to_string(),
            }
            .into());
        }
        // Where the plugin said it is reachable, or else where the operator
        // required it to be: a requirement is never dropped.
        let accessible = crate::requests::topology::allowed_topology(r)
            .iter()
            .map(pairs)
            .collect();
        let (nodes, verdicts, logged) = self
            .place(r, Purpose::Publish, accessible)
            .await
            .map_err(Unready::Policy)?;
        let note = placed_note(&logged, &nodes, &verdicts);
        policy::ranked(&verdicts)
            .into_iter()
            .map(|i| &nodes[i])
            .find(|n| !r.publications.get(&n.name).is_some_and(|p| p.wanted))
            .map(|n| (n.name.clone(), note))
            .ok_or_else(|| {
                Unready::NoEligibleNode {
                    volume: r.spec.name.clone(),
                    refusals: policy::refusals(&nodes, &verdicts),
                }
                .into()
            })
    }
}

/// A decision as the volume's record keeps it.
pub(crate) fn note(logged: &Logged, answer: String) -> DecisionNote {
    DecisionNote {
        at_ms: logged.at_ms,
        module: Interned::new(&logged.module),
        digest: logged.digest.as_deref().map(Interned::new),
        answer,
        ..Default::default()
    }
    .bounded()
}

/// An answer in words, for the volume's record and `volume explain`.
pub(crate) fn describe(answer: &Answer) -> String {
    match answer {
        Answer::Naming(NamingOutcome::Named(name)) => name.clone(),
        Answer::Naming(NamingOutcome::Refused(reason)) => format!("refused: {reason}"),
        Answer::Placement(v) => format!("{} of {} nodes eligible", policy::ranked(v).len(), v.len()),
        Answer::Retry(policy::RetryDecision::RetryAfter(ms)) => format!(
            "retry after {}",
            humantime::format_duration(std::time::Duration::from_millis(*ms))
        ),
        Answer::Retry(policy::RetryDecision::GiveUp(reason)) => format!("give up: {reason}"),
        Answer::Retry(policy::RetryDecision::Done) => "done".into(),
        Answer::Admission(_) => policy::logged::admission_text(Some(answer)),
        Answer::Failed {
            error,
            fallback: None,
        } => format!("failed: {error}"),
        Answer::Failed {
            error,
            fallback: Some(answer),
        } => format!(
            "{} (the module failed: {error}; the built-in policy answered)",
            describe(answer)
        ),
    }
}

/// A placement as the volume's record keeps it: the verdicts that counted
/// (capacity's refusals included), the best eligible nodes first.
fn placed_note(logged: &Logged, nodes: &[PlacementNode], verdicts: &policy::Verdicts) -> DecisionNote {
    let ranked = policy::ranked(verdicts);
    let answer = match ranked.first() {
        Some(best) => format!(
            "{} ({} of {} nodes eligible)",
            nodes[*best].name,
            ranked.len(),
            nodes.len()
        ),
        None => format!("no eligible node among {}", nodes.len()),
    };
    let verdict = |i: usize| NodeVerdict {
        node: Interned::new(&nodes[i].name),
        eligible: verdicts.is_eligible(i),
        score: verdicts.scores.get(i).copied().unwrap_or_default(),
        reason: verdicts.reason(i).unwrap_or_default().to_string(),
    };
    let refused = (0..nodes.len().min(verdicts.len())).filter(|&i| !verdicts.is_eligible(i));
    DecisionNote {
        nodes: ranked.iter().copied().chain(refused).map(verdict).collect(),
        nodes_judged: nodes.len() as u64,
        ..note(logged, answer)
    }
    .bounded()
}

/// CreateVolume's accessibility requirements from placement's verdicts:
/// the eligible nodes' topologies, best score first.
fn requirements(
    nodes: &[PlacementNode],
    verdicts: &policy::Verdicts,
) -> Result<proto::TopologyRequirement, StepError> {
    let ranked = policy::ranked(verdicts);
    if ranked.is_empty() {
        return Err(step_error(
            Code::ResourceExhausted,
            format!(
                "placement found no eligible node ({})",
                policy::refusals(nodes, verdicts)
            ),
        ));
    }
    let mut topologies: Vec<proto::Topology> = Vec::new();
    for i in ranked {
        let t = proto::Topology {
            segments: nodes[i].topology.iter().cloned().collect(),
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

fn pairs(map: &Segments) -> Vec<(String, String)> {
    map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn access_mode(m: model::AccessMode) -> AccessMode {
    use model::AccessMode as M;
    match m {
        M::SingleNodeWriter => AccessMode::SingleNodeWriter,
        M::SingleNodeReaderOnly => AccessMode::SingleNodeReaderOnly,
        M::MultiNodeReaderOnly => AccessMode::MultiNodeReaderOnly,
        M::MultiNodeSingleWriter => AccessMode::MultiNodeSingleWriter,
        M::MultiNodeMultiWriter => AccessMode::MultiNodeMultiWriter,
        M::SingleNodeSingleWriter => AccessMode::SingleNodeSingleWriter,
        M::SingleNodeMultiWriter => AccessMode::SingleNodeMultiWriter,
    }
}

/// The volume as policies see it: no secrets, no paths.
pub(crate) fn policy_volume(r: &VolumeRecord) -> policy::Volume {
    let s = &r.spec;
    policy::Volume {
        id: r.id.clone(),
        // `namespace/name` outside the default namespace: two namespaces'
        // volumes of one name are never the same request to a naming module.
        name: s.volume_name().to_string(),
        driver: s.plugin.clone(),
        capacity: CapacityRange {
            required_bytes: s.required_bytes.max(0) as u64,
            limit_bytes: s.limit_bytes.max(0) as u64,
        },
        access_mode: access_mode(s.access_mode),
        access_type: match s.access_type {
            AccessType::Mount => policy::AccessType::Mount,
            AccessType::Block => policy::AccessType::Block,
        },
        parameters: pairs(&s.parameters),
        labels: pairs(&s.labels),
        requisite_topology: s.requisite_topology.iter().map(pairs).collect(),
        preferred_topology: s.preferred_topology.iter().map(pairs).collect(),
    }
}
