//! What Berth keeps about volumes: the operator's declaration (spec), the
//! desired state, and what the plugins did (backend, publications), persisted
//! as one record per volume.

pub mod bounds;
mod by_id;
pub mod clock;
pub mod credentials;
mod explanation;
pub mod files;
mod interned;
mod keys;
mod map;
pub mod namespace;
mod node;
mod publication;
pub mod settings;
mod spec;
mod state;
pub mod strict_toml;
mod tenancy;
pub mod text;
pub mod units;

use serde::{Deserialize, Serialize};
use std::sync::Arc;

pub use by_id::{ById, Identified};
pub use explanation::{DecisionNote, Explanation, NodeVerdict};
pub use interned::Interned;
pub use keys::{RecordKeys, SpecKeys};
pub use map::VecMap;
pub use namespace::{Namespace, VolumeName};
pub use node::{DOCKER_NODE_HEADER, NODE_HEADER, NodeLevel, Paths};
pub use publication::Publication;
pub use spec::{AccessMode, AccessType, SourceKind, VolumeSource, VolumeSpec};
pub use state::{PublicationState, VolumeState};
pub use tenancy::{DockerScope, Origin, SCOPE_NODES_MAX, ScopeError};

/// Bounds on text from outside (plugins, agents, guests) as a record keeps
/// it, so no record outgrows what a store or a view can carry: an event's
/// message and step, a give-up's reason, the last error of a retry.
pub const EVENT_MESSAGE_MAX: usize = 1024;
pub const EVENT_STEP_MAX: usize = 256;
pub const FAILURE_MAX: usize = 4096;
pub const LAST_ERROR_MAX: usize = 1024;

/// `text` cut to at most `max` bytes (at a character boundary), ending
/// with a marker that says it was cut and how long it was.
pub fn cut(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let marker = format!("… [cut; {} bytes in all]", text.len());
    let mut end = max.saturating_sub(marker.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(&marker);
    text
}

/// Topology segments, labels, parameters, contexts: string to string.
pub type Segments = VecMap<String>;

/// The plugin's view of a created volume.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backend {
    pub volume_id: String,
    /// 0: unknown, as the spec lets a plugin answer (an NFS share).
    pub capacity_bytes: i64,
    /// While the capacity is unknown: the size the plugin last made it for
    /// (CreateVolume's or ControllerExpandVolume's request), which is what
    /// a larger size asked later is measured against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sized_for: Option<i64>,
    pub context: Segments,
    pub accessible_topology: Vec<Segments>,
    /// The last ControllerExpandVolume asked for NodeExpandVolume, and no
    /// publication has carried it out yet: the next one to be published does.
    #[serde(default, skip_serializing_if = "is_false")]
    pub node_expansion_required: bool,
    /// The mutable parameters the plugin last accepted, with CreateVolume
    /// or ControllerModifyVolume: ControllerModifyVolume is due while they
    /// differ from the spec's.
    #[serde(default, skip_serializing_if = "Segments::is_empty")]
    pub mutable_parameters: Segments,
}

impl Backend {
    /// Whether the volume is smaller than `required` bytes, as far as Berth
    /// can tell: a capacity the plugin never said (and no size asked since)
    /// is taken as what was asked for.
    pub fn short_of(&self, required: i64) -> bool {
        if self.capacity_bytes > 0 {
            self.capacity_bytes < required
        } else {
            self.sized_for.is_some_and(|asked| asked < required)
        }
    }

    /// The plugin's answer to a request for `asked` bytes: its capacity, or
    /// 0 when it does not say.
    pub fn sized(&mut self, capacity_bytes: i64, asked: i64) {
        self.capacity_bytes = capacity_bytes;
        self.sized_for = (capacity_bytes == 0).then_some(asked);
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A snapshot of a volume, kept in the volume's record by the snapshot's name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Sent as CreateSnapshotRequest.name: chosen and stored when the
    /// operator asks, so a retry or a restart never takes a second snapshot.
    pub csi_name: String,
    /// Set (durably) before the first CreateSnapshot; while set and no
    /// backend is known, deleting asks CreateSnapshot for its id first.
    #[serde(default)]
    pub create_sent: bool,
    pub backend: Option<SnapshotBackend>,
    #[serde(default)]
    pub deleting: bool,
    /// When the operator asked for it (ms since the epoch).
    pub requested_ms: u64,
}

/// The plugin's view of a snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotBackend {
    pub snapshot_id: String,
    pub size_bytes: i64,
    /// The plugin's creation time (ms since the epoch).
    pub created_ms: u64,
    pub ready: bool,
}

/// A group snapshot: one snapshot of several volumes taken together
/// (CreateVolumeGroupSnapshot), kept in the record of its first volume,
/// which drives it; its name is unique across snapshots and groups.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupSnapshot {
    /// Sent as CreateVolumeGroupSnapshotRequest.name: chosen and stored when
    /// the operator asks, so a retry or a restart never takes a second group.
    pub csi_name: String,
    /// Set (durably) before the first CreateVolumeGroupSnapshot.
    #[serde(default)]
    pub create_sent: bool,
    /// The volumes in the group, the first the one whose record this is.
    pub members: Vec<GroupMember>,
    /// The plugin's id for the group, once it answered.
    pub group_snapshot_id: Option<String>,
    #[serde(default)]
    pub deleting: bool,
    /// When the operator asked for it (ms since the epoch).
    pub requested_ms: u64,
}

/// A volume in a group snapshot, and its snapshot once taken.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupMember {
    /// The volume's Berth id and name.
    pub volume: String,
    pub name: String,
    /// The plugin's id for the volume, resolved when the group was asked for.
    pub volume_id: String,
    pub snapshot: Option<SnapshotBackend>,
}

impl GroupSnapshot {
    /// One word for operators, as for a snapshot.
    pub fn state(&self) -> &'static str {
        let taken = self.group_snapshot_id.is_some();
        match (taken, self.deleting) {
            (_, true) => "deleting",
            (false, false) => "pending",
            (true, false) if self.ready() => "ready",
            (true, false) => "cutting",
        }
    }

    /// Every member's snapshot taken and ready to use.
    pub fn ready(&self) -> bool {
        self.members
            .iter()
            .all(|m| m.snapshot.as_ref().is_some_and(|s| s.ready))
    }
}

impl Snapshot {
    /// One word for operators: pending, ready, cutting (not ready yet), deleting.
    pub fn state(&self) -> &'static str {
        match (&self.backend, self.deleting) {
            (_, true) => "deleting",
            (None, false) => "pending",
            (Some(b), false) if b.ready => "ready",
            (Some(_), false) => "cutting",
        }
    }
}

/// A CSI call being retried after a failure.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retrying {
    pub operation: String,
    pub attempt: u32,
    pub first_failure_ms: u64,
    pub next_attempt_ms: u64,
    /// The wait the retry policy asked for (0 in records from before it
    /// was kept): after a restart, the wait left is never longer.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub delay_ms: u64,
    pub last_error: String,
    /// Policy failures in a row (a guest that failed to decide, under
    /// `on_error = "fail"`); a few end in a give-up.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub policy_failures: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

/// The parts that rarely change after they are set (the spec, the backend,
/// events, the explanation) are shared (`Arc`): a record is copied on every step and
/// read, and a copy then costs a count, not their every string. On disk
/// they are written as before.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeRecord {
    pub id: String,
    pub spec: Arc<VolumeSpec>,
    /// Sent as CreateVolumeRequest.name; stored before the first CreateVolume,
    /// so a retry or a restart reuses it and never creates a second volume.
    pub csi_name: Option<String>,
    /// Set (durably) before the first CreateVolume is sent, cleared when the
    /// plugin refuses it outright: while set and no backend is known, the
    /// volume may exist on the plugin, so deleting asks CreateVolume for its id.
    #[serde(default)]
    pub create_sent: bool,
    pub backend: Option<Arc<Backend>>,
    pub deleting: bool,
    pub publications: VecMap<Publication>,
    /// Snapshots of this volume, by their Berth name (unique across volumes).
    #[serde(default, skip_serializing_if = "VecMap::is_empty")]
    pub snapshots: VecMap<Snapshot>,
    /// Group snapshots this volume leads (is the first member of), by name.
    #[serde(default, skip_serializing_if = "VecMap::is_empty")]
    pub group_snapshots: VecMap<GroupSnapshot>,
    /// A give-up: the reconciler leaves the volume alone until an operator retries.
    pub failure: Option<String>,
    /// Boxed: few volumes retry at once, and every record pays for the field.
    pub retrying: Option<Box<Retrying>>,
    /// Bumped on every change, so watchers see each one.
    pub generation: u64,
    /// The volume's latest events, oldest first, written with the change
    /// they describe. Records from before events had none.
    #[serde(default, skip_serializing_if = "no_events")]
    pub events: Arc<Vec<VolumeEvent>>,
    /// The policy decisions that shaped the volume. Records from before
    /// the decision log had none.
    /// Behind a pointer: a record without one costs a pointer (a million records in memory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explanation: Option<Arc<Explanation>>,
    /// Who made the volume (records from before read as [`Origin::Before`]).
    #[serde(default, skip_serializing_if = "tenancy::is_before")]
    pub made_by: Origin,
    /// Which nodes' Docker may see and publish it.
    #[serde(default, skip_serializing_if = "tenancy::is_by_origin")]
    pub docker: DockerScope,
}

fn no_events(events: &Arc<Vec<VolumeEvent>>) -> bool {
    events.is_empty()
}

/// Something that happened to a volume: a request, a step done, a step failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeEvent {
    /// Numbers the volume's events from 1, so a watcher tells new ones apart.
    pub seq: u64,
    /// Milliseconds since the epoch.
    pub at_ms: u64,
    /// What happened to: `request`, or the step (`CreateVolume`,
    /// `NodePublishVolume on node-a`, ...).
    /// Shared, as the texts below: a new event copies the list, not the texts.
    pub step: Arc<str>,
    /// `OK`, or the gRPC code the step failed with.
    pub code: Arc<str>,
    pub message: Arc<str>,
}

/// An event's texts, bounded, shared by every copy they are noted in.
#[derive(Clone, Debug)]
pub struct EventTexts {
    step: Arc<str>,
    code: Arc<str>,
    message: Arc<str>,
}

impl EventTexts {
    pub fn new(step: String, code: &str, message: String) -> EventTexts {
        EventTexts {
            step: cut(step, EVENT_STEP_MAX).into(),
            code: code.into(),
            message: cut(message, EVENT_MESSAGE_MAX).into(),
        }
    }
}

impl VolumeRecord {
    pub fn new(id: String, spec: VolumeSpec) -> Self {
        VolumeRecord {
            id,
            spec: Arc::new(spec),
            csi_name: None,
            create_sent: false,
            backend: None,
            deleting: false,
            publications: VecMap::new(),
            snapshots: VecMap::new(),
            group_snapshots: VecMap::new(),
            failure: None,
            retrying: None,
            generation: 0,
            events: Arc::default(),
            explanation: None,
            made_by: Origin::Api,
            docker: DockerScope::ByOrigin,
        }
    }

    /// The decisions that shaped the volume, made room for.
    pub fn explain_mut(&mut self) -> &mut Explanation {
        Arc::make_mut(self.explanation.get_or_insert_with(Default::default))
    }

    /// The backend, to change (a size, parameters), if the volume has one.
    pub fn backend_mut(&mut self) -> Option<&mut Backend> {
        self.backend.as_mut().map(Arc::make_mut)
    }

    /// The spec, to change (an expansion, a modification).
    pub fn spec_mut(&mut self) -> &mut VolumeSpec {
        Arc::make_mut(&mut self.spec)
    }

    /// Adds an event, keeping only the latest `keep`.
    pub fn note(&mut self, keep: usize, at_ms: u64, step: String, code: &str, message: String) {
        self.note_texts(keep, at_ms, EventTexts::new(step, code, message));
    }

    /// [`VolumeRecord::note`] with texts made (and bounded) once, for an
    /// event added to several copies of a record.
    pub fn note_texts(&mut self, keep: usize, at_ms: u64, texts: EventTexts) {
        if keep == 0 {
            return;
        }
        let seq = self.events.last().map_or(1, |e| e.seq + 1);
        let events = Arc::make_mut(&mut self.events);
        if events.len() >= keep {
            events.drain(..=events.len() - keep);
        }
        events.push(VolumeEvent {
            seq,
            at_ms,
            step: texts.step,
            code: texts.code,
            message: texts.message,
        });
    }

    /// Gives up: the volume waits, failed with `reason`, for an operator.
    pub fn give_up(&mut self, reason: String) {
        self.failure = Some(cut(reason, FAILURE_MAX));
    }

    /// One word for operators.
    pub fn state(&self) -> VolumeState {
        keys::volume_state(
            self.failure.is_some(),
            self.deleting,
            self.backend.is_some(),
            self.csi_name.is_some(),
            &self.publications,
        )
    }
}

/// A new id: 128 bits, hex. The first 48 are the time in milliseconds and
/// the other 80 random, so ids made close in time sort close together: the
/// volumes being worked on share the store's B-tree leaves, and a batch of
/// writes dirties a few pages instead of one path each. Ids made before this
/// were all random; nothing reads meaning into an id, so both kinds mix.
pub fn new_id() -> String {
    use rand::Rng;
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let time = (ms & ((1 << 48) - 1)) << 80;
    let random = rand::rng().random::<u128>() >> 48;
    format!("{:032x}", time | random)
}

/// When the record with `id` (made by [`new_id`]) was made, in
/// milliseconds since the epoch; `None` for an id of another shape.
pub fn id_created_ms(id: &str) -> Option<u64> {
    if id.len() != 32 {
        return None;
    }
    u64::from_str_radix(id.get(..12)?, 16).ok().filter(|ms| *ms > 0)
}

impl Identified for VolumeRecord {
    fn id(&self) -> &str {
        &self.id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_tells_when_it_was_made() {
        let before = clock::now_ms();
        let made = id_created_ms(&new_id()).unwrap();
        assert!(made >= before && made <= clock::now_ms() + 1, "{before} {made}");
        assert_eq!(id_created_ms("id"), None);
        assert_eq!(id_created_ms(&"z".repeat(32)), None);
    }

    fn record() -> VolumeRecord {
        VolumeRecord::new("id".into(), VolumeSpec::default())
    }

    #[test]
    fn ids_are_unique_hex_and_sort_by_when_they_were_made() {
        let first: Vec<String> = (0..1000).map(|_| new_id()).collect();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let later = new_id();
        let mut seen = std::collections::HashSet::new();
        for id in &first {
            assert_eq!(id.len(), 32);
            assert!(
                id.bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
                "{id}"
            );
            assert!(seen.insert(id.clone()), "{id} made twice");
            assert!(*id < later, "{id} was made before {later}");
        }
    }

    #[test]
    fn records_without_events_read_as_having_none_and_events_round_trip() {
        let mut r = record();
        let old = serde_json::to_value(&r).unwrap();
        assert!(
            old.get("events").is_none(),
            "no events, no key: records stay as small as before"
        );
        let back: VolumeRecord = serde_json::from_value(old).unwrap();
        assert!(back.events.is_empty());
        r.note(10, 5, "CreateVolume".into(), "OK", "created".into());
        let back: VolumeRecord = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn an_unknown_capacity_is_measured_against_the_size_asked() {
        let mut b = Backend {
            volume_id: "v".into(),
            capacity_bytes: 0,
            sized_for: None,
            context: Segments::new(),
            accessible_topology: vec![],
            node_expansion_required: false,
            mutable_parameters: Default::default(),
        };
        assert!(!b.short_of(1 << 30), "never said, never asked: nothing to grow");
        b.sized(0, 1 << 30);
        assert!(!b.short_of(1 << 30));
        assert!(b.short_of(2 << 30), "a larger size asked later");
        b.sized(2 << 30, 2 << 30);
        assert_eq!(b.sized_for, None, "a capacity said is what counts");
        assert!(b.short_of(3 << 30) && !b.short_of(2 << 30));
        let old = serde_json::to_value(&b).unwrap();
        assert!(
            old.get("sized_for").is_none(),
            "records stay as before unless unknown"
        );
    }

    #[test]
    fn only_the_latest_events_are_kept_and_numbers_go_on() {
        let mut r = record();
        for i in 0..7 {
            r.note(3, i, format!("step {i}"), "OK", String::new());
        }
        let seqs: Vec<u64> = r.events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [5, 6, 7]);
        assert_eq!(&*r.events[0].step, "step 4");
        r.note(0, 9, "ignored".into(), "OK", String::new());
        assert_eq!(r.events.len(), 3, "0 keeps nothing new");
    }
}
