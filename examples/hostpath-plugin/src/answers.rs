//! The plugin's records as CSI messages, shaped the way the flags say a
//! driver in the wild answers: OPTIONAL fields left unset (`--omit`),
//! snapshots not ready at once (`--snapshot-ready-after`), access modes of a
//! later CSI version refused (`--csi-version`).

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use berth_proto::csi::v1 as csi;
use tonic::Status;

use crate::config::{Config, Omit};
use crate::snapshots::SnapshotRecord;
use crate::volumes::{Source, VolumeRecord};

/// The publish_context key naming the node a volume was published to.
pub const PUBLISHED_NODE_KEY: &str = "hostpath.csi.berth.dev/node";

pub fn volume(config: &Config, rec: &VolumeRecord) -> csi::Volume {
    use csi::volume_content_source::{SnapshotSource, Type, VolumeSource};
    csi::Volume {
        capacity_bytes: if config.omits(Omit::Capacity) {
            0
        } else {
            rec.capacity_bytes
        },
        volume_id: rec.id.clone(),
        volume_context: if config.omits(Omit::VolumeContext) {
            HashMap::new()
        } else {
            [("name".to_string(), rec.name.clone())].into()
        },
        content_source: rec.source.as_ref().map(|s| csi::VolumeContentSource {
            r#type: Some(match s {
                Source::Snapshot(id) => Type::Snapshot(SnapshotSource {
                    snapshot_id: id.clone(),
                }),
                Source::Volume(id) => Type::Volume(VolumeSource {
                    volume_id: id.clone(),
                }),
            }),
        }),
        accessible_topology: if config.omits(Omit::VolumeTopology) {
            vec![]
        } else {
            rec.accessible_topology
                .iter()
                .map(|s| csi::Topology {
                    segments: s.clone().into_iter().collect(),
                })
                .collect()
        },
    }
}

/// Whether a snapshot may be used as a content source yet.
pub fn snapshot_ready(config: &Config, rec: &SnapshotRecord) -> bool {
    let Some(after) = config.snapshot_ready_after else {
        return true;
    };
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    now_ms >= rec.created_ms.saturating_add(after.as_millis() as u64)
}

pub fn snapshot(config: &Config, rec: &SnapshotRecord) -> csi::Snapshot {
    csi::Snapshot {
        size_bytes: if config.omits(Omit::SnapshotSize) {
            0
        } else {
            rec.size_bytes
        },
        snapshot_id: rec.id.clone(),
        source_volume_id: rec.source_volume_id.clone(),
        creation_time: Some(prost_types::Timestamp {
            seconds: (rec.created_ms / 1000) as i64,
            nanos: ((rec.created_ms % 1000) * 1_000_000) as i32,
        }),
        ready_to_use: snapshot_ready(config, rec),
        group_snapshot_id: rec.group_snapshot_id.clone().unwrap_or_default(),
    }
}

/// ControllerGetVolume's answer for a volume that does not exist, as a
/// driver reporting volume health may give it instead of NOT_FOUND.
pub fn missing_volume(volume_id: &str) -> csi::ControllerGetVolumeResponse {
    csi::ControllerGetVolumeResponse {
        volume: Some(csi::Volume {
            volume_id: volume_id.to_string(),
            ..Default::default()
        }),
        status: Some(csi::controller_get_volume_response::VolumeStatus {
            published_node_ids: vec![],
            volume_condition: Some(csi::VolumeCondition {
                abnormal: true,
                message: format!("volume {volume_id} does not exist"),
            }),
        }),
    }
}

pub fn publish_context(config: &Config, node_id: String) -> HashMap<String, String> {
    if config.omits(Omit::PublishContext) {
        HashMap::new()
    } else {
        [(PUBLISHED_NODE_KEY.to_string(), node_id)].into()
    }
}

/// Directory volumes support the mount access type in every access mode
/// the plugin's CSI version knows.
pub fn check_capability(config: &Config, cap: &csi::VolumeCapability) -> Result<(), Status> {
    use csi::volume_capability::AccessType;
    use csi::volume_capability::access_mode::Mode;
    match &cap.access_type {
        Some(AccessType::Mount(_)) => {}
        Some(AccessType::Block(_)) => {
            return Err(Status::invalid_argument(
                "block access is not supported by directory volumes",
            ));
        }
        None => return Err(Status::invalid_argument("volume capability has no access type")),
    }
    let mode = cap.access_mode.as_ref().map_or(0, |m| m.mode);
    let newer = [
        Mode::SingleNodeSingleWriter as i32,
        Mode::SingleNodeMultiWriter as i32,
    ];
    if newer.contains(&mode) && !config.offers("SINGLE_NODE_MULTI_WRITER") {
        // What a driver built before these modes existed sees: a number it does not know.
        return Err(Status::invalid_argument(format!("unknown access mode {mode}")));
    }
    match mode {
        0 => Err(Status::invalid_argument("volume capability has no access mode")),
        _ => Ok(()),
    }
}

/// A mounted, single-node-writer capability: what `--misbehave
/// stages-without-capability` assumes when the request has none.
pub fn plain_capability() -> csi::VolumeCapability {
    use csi::volume_capability::access_mode::Mode;
    csi::VolumeCapability {
        access_mode: Some(csi::volume_capability::AccessMode {
            mode: Mode::SingleNodeWriter as i32,
        }),
        access_type: Some(csi::volume_capability::AccessType::Mount(Default::default())),
    }
}
