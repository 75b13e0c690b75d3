//! Wire forms of the manager's views: snapshots, group snapshots, a
//! volume's health and the plugins' orphans.

use berth_proto::berth::v1 as api;

use crate::csi::proto;
use crate::manager::{GroupView, Health, Orphans, SnapshotView};

pub fn group_to_api(v: &GroupView) -> api::GroupSnapshot {
    let g = &v.group;
    let label = format!("GroupSnapshot {}", v.name);
    let about = |text: &str| text.split(": ").next().is_some_and(|step| step.ends_with(&label));
    api::GroupSnapshot {
        name: v.name.clone(),
        state: g.state().into(),
        csi_name: g.csi_name.clone(),
        group_snapshot_id: g.group_snapshot_id.clone().unwrap_or_default(),
        members: g
            .members
            .iter()
            .map(|m| api::GroupSnapshotMember {
                volume: m.name.clone(),
                snapshot_id: m
                    .snapshot
                    .as_ref()
                    .map(|s| s.snapshot_id.clone())
                    .unwrap_or_default(),
                ready: m.snapshot.as_ref().is_some_and(|s| s.ready),
                size_bytes: m.snapshot.as_ref().map_or(0, |s| s.size_bytes),
                restore_as: format!("{}/{}", v.name, m.name),
            })
            .collect(),
        requested_ms: g.requested_ms,
        retrying: v
            .anchor
            .retrying
            .as_ref()
            .filter(|r| about(&r.operation))
            .map(|r| format!("{} (attempt {}): {}", r.operation, r.attempt, r.last_error))
            .unwrap_or_default(),
        failure: v.anchor.failure.clone().filter(|f| about(f)).unwrap_or_default(),
    }
}

pub fn snapshot_to_api(v: &SnapshotView) -> api::Snapshot {
    let s = &v.snapshot;
    let b = s.backend.as_ref();
    // The volume's retry or give-up, when it is about this snapshot.
    let label = format!("Snapshot {}", v.name);
    let about = |text: &str| text.split(": ").next().is_some_and(|step| step.ends_with(&label));
    api::Snapshot {
        name: v.name.clone(),
        volume: v.volume.spec.name.clone(),
        state: s.state().into(),
        csi_name: s.csi_name.clone(),
        snapshot_id: b.map(|b| b.snapshot_id.clone()).unwrap_or_default(),
        size_bytes: b.map_or(0, |b| b.size_bytes),
        created_ms: b.map_or(0, |b| b.created_ms),
        retrying: v
            .volume
            .retrying
            .as_ref()
            .filter(|r| about(&r.operation))
            .map(|r| format!("{} (attempt {}): {}", r.operation, r.attempt, r.last_error))
            .unwrap_or_default(),
        failure: v.volume.failure.clone().filter(|f| about(f)).unwrap_or_default(),
    }
}

fn condition(c: proto::VolumeCondition) -> api::VolumeCondition {
    api::VolumeCondition {
        abnormal: c.abnormal,
        message: c.message,
    }
}

pub fn health_to_api(h: Health) -> api::VolumeHealthResponse {
    let (controller, controller_error) = match h.controller {
        Ok(c) => (c.map(condition), String::new()),
        Err(e) => (None, e.to_string()),
    };
    api::VolumeHealthResponse {
        controller,
        controller_error,
        nodes: h
            .nodes
            .into_iter()
            .map(|n| match n.stats {
                Ok(stats) => api::NodeVolumeHealth {
                    node: n.node,
                    condition: stats.volume_condition.map(condition),
                    usage: stats
                        .usage
                        .into_iter()
                        .map(|u| api::VolumeUsage {
                            unit: match proto::volume_usage::Unit::try_from(u.unit) {
                                Ok(proto::volume_usage::Unit::Bytes) => "bytes",
                                Ok(proto::volume_usage::Unit::Inodes) => "inodes",
                                _ => "unknown",
                            }
                            .into(),
                            available: u.available,
                            total: u.total,
                            used: u.used,
                        })
                        .collect(),
                    error: String::new(),
                },
                Err(error) => api::NodeVolumeHealth {
                    node: n.node,
                    condition: None,
                    usage: vec![],
                    error: error.to_string(),
                },
            })
            .collect(),
    }
}

pub fn orphans_to_api(o: Orphans) -> api::PluginOrphansResponse {
    api::PluginOrphansResponse {
        untracked: o
            .untracked
            .into_iter()
            .map(|(volume_id, capacity_bytes)| api::UntrackedVolume {
                volume_id,
                capacity_bytes,
            })
            .collect(),
        missing: o
            .missing
            .into_iter()
            .map(|(name, volume_id)| api::MissingVolume { name, volume_id })
            .collect(),
        creating: o.creating,
    }
}
