//! What the volume table's indexes need of a record, read from its stored
//! text without building the rest: a server starting on a million volumes
//! indexes them all and decodes each one only when it is read.
//!
//! Invariant: [`RecordKeys`] read from a record's text says what the
//! [`VolumeRecord`](crate::VolumeRecord) decoded from the same text says
//! (its id, names, state, usage and publications). Both read the same
//! field names, and the parts that say the most (publications, snapshots,
//! groups) are the record's own types; the state is one function for both
//! ([`volume_state`]).

use serde::Deserialize;
use serde::de::IgnoredAny;

use crate::{GroupSnapshot, Namespace, Publication, PublicationState, Snapshot, VecMap, VolumeState};

/// The fields of a stored record the table indexes, and nothing else.
#[derive(Debug, Deserialize)]
pub struct RecordKeys {
    pub id: String,
    pub spec: SpecKeys,
    #[serde(default)]
    pub csi_name: Option<String>,
    #[serde(default)]
    backend: Option<IgnoredAny>,
    #[serde(default)]
    pub deleting: bool,
    #[serde(default)]
    pub publications: VecMap<Publication>,
    #[serde(default)]
    pub snapshots: VecMap<Snapshot>,
    #[serde(default)]
    pub group_snapshots: VecMap<GroupSnapshot>,
    #[serde(default)]
    failure: Option<IgnoredAny>,
    #[serde(default)]
    retrying: Option<IgnoredAny>,
}

/// The spec's part of [`RecordKeys`].
#[derive(Debug, Deserialize)]
pub struct SpecKeys {
    pub name: String,
    #[serde(default)]
    pub namespace: Namespace,
    pub plugin: String,
    #[serde(default)]
    pub required_bytes: i64,
}

impl RecordKeys {
    pub fn state(&self) -> VolumeState {
        volume_state(
            self.failure.is_some(),
            self.deleting,
            self.backend.is_some(),
            self.csi_name.is_some(),
            &self.publications,
        )
    }

    /// A retry is under way.
    pub fn retrying(&self) -> bool {
        self.retrying.is_some()
    }
}

/// One word for operators, from the parts of a record that decide it.
pub(crate) fn volume_state(
    failed: bool,
    deleting: bool,
    backend: bool,
    csi_name: bool,
    publications: &VecMap<Publication>,
) -> VolumeState {
    if failed {
        VolumeState::Failed
    } else if deleting {
        VolumeState::Deleting
    } else if !backend {
        if csi_name {
            VolumeState::Creating
        } else {
            VolumeState::Pending
        }
    } else if publications
        .values()
        .any(|p| p.state() == PublicationState::Published)
    {
        VolumeState::Published
    } else {
        VolumeState::Available
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Backend, GroupMember, NodeLevel, Retrying, VolumeRecord, VolumeSpec};
    use std::sync::Arc;

    /// Records in every state, with the parts the keys read and the parts
    /// they skip.
    fn records() -> Vec<VolumeRecord> {
        let spec = VolumeSpec {
            name: "data".into(),
            namespace: Namespace::parse("team-a").unwrap(),
            plugin: "hostpath".into(),
            required_bytes: 5 << 30,
            ..Default::default()
        };
        let pending = VolumeRecord::new("a1".into(), spec.clone());
        let mut creating = VolumeRecord::new("a2".into(), VolumeSpec::default());
        creating.csi_name = Some("pv-a2".into());
        let mut published = creating.clone();
        published.id = "a3".into();
        published.backend = Some(Arc::new(Backend {
            volume_id: "hp-1".into(),
            capacity_bytes: 1,
            sized_for: None,
            context: VecMap::new(),
            accessible_topology: Vec::new(),
            node_expansion_required: false,
            mutable_parameters: VecMap::new(),
        }));
        let mut p = Publication::new(false);
        p.node = NodeLevel::Published;
        published.publications.insert("n1".into(), p);
        published.publications.insert("n2".into(), Publication::new(true));
        published.explain_mut().naming = Some(crate::DecisionNote::default().into());
        let mut available = published.clone();
        available.id = "a4".into();
        available.publications.clear();
        available.snapshots.insert(
            "nightly".into(),
            Snapshot {
                csi_name: "snap-1".into(),
                create_sent: true,
                backend: None,
                deleting: false,
                requested_ms: 1,
            },
        );
        available.group_snapshots.insert(
            "weekly".into(),
            GroupSnapshot {
                csi_name: "group-1".into(),
                create_sent: false,
                members: vec![GroupMember {
                    volume: "a3".into(),
                    name: "v".into(),
                    volume_id: "hp-1".into(),
                    snapshot: None,
                }],
                group_snapshot_id: None,
                deleting: false,
                requested_ms: 0,
            },
        );
        let mut deleting = available.clone();
        deleting.id = "a5".into();
        deleting.deleting = true;
        let mut failed = pending.clone();
        failed.id = "a6".into();
        failed.failure = Some("gave up".into());
        let mut retrying = creating.clone();
        retrying.id = "a7".into();
        retrying.retrying = Some(Box::new(Retrying {
            operation: "CreateVolume".into(),
            attempt: 2,
            first_failure_ms: 1,
            next_attempt_ms: 2,
            delay_ms: 0,
            last_error: "busy".into(),
            policy_failures: 0,
        }));
        vec![
            pending, creating, published, available, deleting, failed, retrying,
        ]
    }

    #[test]
    fn keys_read_from_a_records_text_say_what_the_record_says() {
        let mut states = Vec::new();
        for r in records() {
            let text = serde_json::to_string(&r).unwrap();
            let k: RecordKeys = serde_json::from_str(&text).unwrap();
            // What the table would have decoded from the same text.
            let r: VolumeRecord = serde_json::from_str(&text).unwrap();
            assert_eq!(k.id, r.id);
            assert_eq!(
                (
                    &k.spec.name,
                    &k.spec.namespace,
                    &k.spec.plugin,
                    k.spec.required_bytes
                ),
                (
                    &r.spec.name,
                    &r.spec.namespace,
                    &r.spec.plugin,
                    r.spec.required_bytes
                ),
            );
            assert_eq!(k.csi_name, r.csi_name);
            assert_eq!(
                (k.state(), k.retrying()),
                (r.state(), r.retrying.is_some()),
                "{}",
                r.id
            );
            assert_eq!(k.deleting, r.deleting);
            assert_eq!(k.publications, r.publications);
            assert_eq!(k.snapshots, r.snapshots);
            assert_eq!(k.group_snapshots, r.group_snapshots);
            states.push(k.state());
        }
        states.sort_by_key(|s| s.index());
        states.dedup();
        assert_eq!(
            states.len(),
            VolumeState::ALL.len(),
            "every state is covered: {states:?}"
        );
    }
}
