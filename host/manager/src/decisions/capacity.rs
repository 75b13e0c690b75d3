//! Capacity in placement: where a plugin offers GET_CAPACITY, a node whose
//! topology has less room than a new volume requires is not eligible.
//! Answers are kept briefly per (plugin, topology), so a burst of creates
//! asks once; CreateVolume is the final judge either way.

use crate::decisions::Decisions;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use berth_csi::proto;
use berth_csi::proto::controller_service_capability::rpc::Type as ControllerCap;
use berth_model::VolumeRecord;
use berth_policy::{PlacementNode, Verdicts};

/// How long an answer of GetCapacity is used for.
const FRESH_FOR: Duration = Duration::from_secs(1);

/// A plugin and a topology, as GetCapacity is asked about them.
type Where = (String, Vec<(String, String)>);

/// Recent GetCapacity answers: bytes available, and when they were.
#[derive(Default)]
pub(crate) struct CapacityCache {
    answers: Mutex<HashMap<Where, (i64, Instant)>>,
}

impl Decisions<'_> {
    /// Makes nodes whose topology cannot fit `r` ineligible, saying so.
    pub(crate) async fn fit(&self, r: &VolumeRecord, nodes: &[PlacementNode], verdicts: &mut Verdicts) {
        let plugin = &r.spec.plugin;
        let required = r.spec.required_bytes;
        if required <= 0 || self.offers(plugin, ControllerCap::GetCapacity) != Some(true) {
            return;
        }
        for (i, node) in nodes.iter().enumerate() {
            if !verdicts.is_eligible(i) {
                continue;
            }
            match self.available(r, &node.topology).await {
                Some(available) if available < required => {
                    verdicts.refuse(
                        i,
                        format!("{available} bytes available there, {required} required"),
                    );
                }
                _ => {}
            }
        }
    }

    /// GetCapacity for volumes like `r` accessible from `topology`; `None`
    /// when the plugin cannot say (an error is no reason to refuse a node).
    async fn available(&self, r: &VolumeRecord, topology: &[(String, String)]) -> Option<i64> {
        let key = (r.spec.plugin.clone(), topology.to_vec());
        if let Some((bytes, at)) = self
            .capacity
            .answers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            && at.elapsed() < FRESH_FOR
        {
            return Some(*bytes);
        }
        let controller = self.registry.get(&r.spec.plugin)?;
        let resp = controller
            .client()
            .get_capacity(proto::GetCapacityRequest {
                volume_capabilities: vec![self.controller_capability(&r.spec)],
                parameters: r.spec.parameters.clone().into_iter().collect(),
                accessible_topology: (!topology.is_empty()).then(|| proto::Topology {
                    segments: topology.iter().cloned().collect(),
                }),
            })
            .await;
        match resp {
            Ok(resp) => {
                self.capacity
                    .answers
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(key, (resp.available_capacity, Instant::now()));
                Some(resp.available_capacity)
            }
            Err(e) => {
                tracing::debug!(plugin = %r.spec.plugin, error = %e, "GetCapacity failed; placement goes on without it");
                None
            }
        }
    }
}
