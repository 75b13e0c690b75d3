//! Between the wire messages and Berth's own model.

pub(super) mod views;

use berth_proto::berth::v1 as api;

use crate::manager::{RequestError, VolumeManager};
use crate::model::{AccessMode, AccessType, Segments, SourceKind, VolumeRecord, VolumeSource, VolumeSpec};

pub(super) fn segments(t: &api::Topology) -> Segments {
    t.segments.clone().into_iter().collect()
}

pub(super) fn topology(s: &Segments) -> api::Topology {
    api::Topology {
        segments: s.clone().into_iter().collect(),
    }
}

/// The operator's spec from the wire; an unknown access mode is refused
/// here, the rest by [`crate::manager::validate_spec`].
pub fn spec_from_api(s: api::VolumeSpec) -> Result<VolumeSpec, RequestError> {
    let access_mode = if s.access_mode.is_empty() {
        AccessMode::default()
    } else {
        s.access_mode
            .parse()
            .map_err(|e| RequestError::Invalid(format!("access_mode: {e}")))?
    };
    Ok(VolumeSpec {
        name: s.name,
        plugin: s.plugin,
        required_bytes: s.required_bytes,
        limit_bytes: s.limit_bytes,
        access_mode,
        access_type: if s.block {
            AccessType::Block
        } else {
            AccessType::Mount
        },
        fs_type: s.fs_type,
        mount_flags: s.mount_flags,
        parameters: s.parameters.into_iter().collect(),
        secret: (!s.secret.is_empty()).then_some(s.secret),
        requisite_topology: s.requisite_topology.iter().map(segments).collect(),
        preferred_topology: s.preferred_topology.iter().map(segments).collect(),
        labels: s.labels.into_iter().collect(),
        source: source_from_api(s.from_snapshot, s.from_volume)?.map(Box::new),
        mutable_parameters: s.mutable_parameters.into_iter().collect(),
        // The call's namespace, set by the request path.
        namespace: Default::default(),
    })
}

fn source_from_api(snapshot: String, volume: String) -> Result<Option<VolumeSource>, RequestError> {
    let (kind, name) = match (snapshot.is_empty(), volume.is_empty()) {
        (true, true) => return Ok(None),
        (false, false) => {
            return Err(RequestError::Invalid(
                "from_snapshot, from_volume: give at most one".into(),
            ));
        }
        (false, true) => (SourceKind::Snapshot, snapshot),
        (true, false) => (SourceKind::Volume, volume),
    };
    Ok(Some(VolumeSource {
        kind,
        name,
        id: String::new(),
    }))
}

fn spec_to_api(s: &VolumeSpec) -> api::VolumeSpec {
    api::VolumeSpec {
        name: s.name.clone(),
        plugin: s.plugin.clone(),
        required_bytes: s.required_bytes,
        limit_bytes: s.limit_bytes,
        access_mode: s.access_mode.to_string(),
        block: s.access_type == AccessType::Block,
        fs_type: s.fs_type.clone(),
        mount_flags: s.mount_flags.clone(),
        parameters: s.parameters.clone().into_iter().collect(),
        secret: s.secret.clone().unwrap_or_default(),
        requisite_topology: s.requisite_topology.iter().map(topology).collect(),
        preferred_topology: s.preferred_topology.iter().map(topology).collect(),
        labels: s.labels.clone().into_iter().collect(),
        from_snapshot: source_name(s, SourceKind::Snapshot),
        from_volume: source_name(s, SourceKind::Volume),
        mutable_parameters: s.mutable_parameters.clone().into_iter().collect(),
        docker_scope: String::new(),
    }
}

fn source_name(s: &VolumeSpec, kind: SourceKind) -> String {
    s.source
        .as_ref()
        .filter(|src| src.kind == kind)
        .map(|src| src.name.clone())
        .unwrap_or_default()
}

/// A volume with its events, as one volume's answers carry it.
pub fn volume_to_api(m: &VolumeManager, r: &VolumeRecord) -> api::Volume {
    api::Volume {
        events: r
            .events
            .iter()
            .map(|e| api::VolumeEvent {
                seq: e.seq,
                at_ms: e.at_ms,
                step: e.step.to_string(),
                code: e.code.to_string(),
                message: e.message.to_string(),
            })
            .collect(),
        explanation: r
            .explanation
            .as_ref()
            .filter(|e| !e.is_empty())
            .map(|e| serde_json::to_string(e).unwrap_or_default())
            .unwrap_or_default(),
        ..volume_summary(m, r)
    }
}

/// A volume without its events, as lists carry it.
pub(super) fn volume_summary(m: &VolumeManager, r: &VolumeRecord) -> api::Volume {
    let b = r.backend.as_ref();
    let waiting = m.waiting(&r.id);
    api::Volume {
        id: r.id.clone(),
        spec: Some(api::VolumeSpec {
            docker_scope: r.docker.to_string(),
            ..spec_to_api(&r.spec)
        }),
        state: r.state().to_string(),
        csi_name: r.csi_name.clone().unwrap_or_default(),
        volume_id: b.map(|b| b.volume_id.clone()).unwrap_or_default(),
        capacity_bytes: b.map_or(0, |b| b.capacity_bytes),
        accessible_topology: b
            .map(|b| b.accessible_topology.iter().map(topology).collect())
            .unwrap_or_default(),
        publications: r
            .publications
            .iter()
            .map(|(node, p)| api::Publication {
                node: node.clone(),
                state: p.state().to_string(),
                readonly: p.readonly,
                target_path: m.target_path(node, &r.id).display().to_string(),
                by: p.by.to_string(),
            })
            .collect(),
        failure: r.failure.clone().unwrap_or_default(),
        retrying: r
            .retrying
            .as_ref()
            .map(|t| format!("{} (attempt {}): {}", t.operation, t.attempt, t.last_error))
            .unwrap_or_default(),
        generation: r.generation,
        waiting: waiting.as_ref().map(|w| w.reason.clone()).unwrap_or_default(),
        waiting_since_ms: waiting.map_or(0, |w| w.since_ms),
        expanding: b.is_some_and(|b| {
            b.short_of(r.spec.required_bytes)
                || (b.node_expansion_required && r.publications.values().any(|p| p.wanted))
        }) || r.publications.values().any(|p| p.wanted && p.expand_pending),
        modifying: b.is_some_and(|b| b.mutable_parameters != r.spec.mutable_parameters) && !r.deleting,
        events: Vec::new(),
        explanation: String::new(),
        made_by: r.made_by.to_string(),
        namespace: r.spec.namespace.to_string(),
    }
}
