//! The plan: from a record and what the plugins offer, the one next step.
//! Pure: no I/O, no clock, no locks.
//!
//! create:  name → CreateVolume → per node: ControllerPublish → node up
//! undo:    per node: node down → ControllerUnpublish → DeleteVolume
//!
//! "Node up" and "node down" are one step each: the node's agent, which
//! owns what its node holds, stages and publishes (or unpublishes and
//! unstages) in order, with one durable write, and names the call that
//! failed, which the retry policy decides on.
//! once created: snapshots (CreateSnapshot, DeleteSnapshot) first, then
//! growth (ControllerExpandVolume, and NodeExpandVolume per published node),
//! then the mutable parameters (ControllerModifyVolume). Group snapshots
//! (CreateVolumeGroupSnapshot, DeleteVolumeGroupSnapshot) are driven by
//! their first volume's record, with its own snapshots.
//!
//! Steps a plugin does not offer (PUBLISH_UNPUBLISH, STAGE_UNSTAGE, the
//! node's EXPAND_VOLUME) are passed without a call.

use berth_model::{NodeLevel, VolumeRecord};
use berth_policy::Operation;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    Name,
    Create,
    ControllerPublish(String),
    /// The node stages (when its plugin does) and publishes.
    NodePublish(String),
    /// The node unpublishes and unstages.
    NodeUnpublish(String),
    ControllerUnpublish(String),
    DropPublication(String),
    Delete,
    Forget,
    ControllerExpand,
    NodeExpand(String),
    /// The spec's mutable parameters to the plugin.
    ControllerModify,
    /// By the snapshot's Berth name.
    CreateSnapshot(String),
    DeleteSnapshot(String),
    DropSnapshot(String),
    /// By the group snapshot's Berth name.
    CreateGroupSnapshot(String),
    DeleteGroupSnapshot(String),
    DropGroupSnapshot(String),
}

impl Step {
    /// The node whose agent carries the step out, for node-side steps.
    pub fn on_node(&self) -> Option<&str> {
        match self {
            Step::NodePublish(n) | Step::NodeUnpublish(n) | Step::NodeExpand(n) => Some(n),
            _ => None,
        }
    }

    /// The node whose publication the step is about.
    pub fn publication(&self) -> Option<&str> {
        match self {
            Step::ControllerPublish(n)
            | Step::NodePublish(n)
            | Step::NodeUnpublish(n)
            | Step::ControllerUnpublish(n)
            | Step::DropPublication(n)
            | Step::NodeExpand(n) => Some(n),
            _ => None,
        }
    }

    pub fn operation(&self) -> Option<Operation> {
        Some(match self {
            Step::Create => Operation::CreateVolume,
            Step::ControllerPublish(_) => Operation::ControllerPublishVolume,
            Step::NodePublish(_) => Operation::NodePublishVolume,
            Step::NodeUnpublish(_) => Operation::NodeUnpublishVolume,
            Step::ControllerUnpublish(_) => Operation::ControllerUnpublishVolume,
            Step::Delete => Operation::DeleteVolume,
            Step::ControllerExpand => Operation::ControllerExpandVolume,
            Step::NodeExpand(_) => Operation::NodeExpandVolume,
            Step::ControllerModify => Operation::ControllerModifyVolume,
            Step::CreateSnapshot(_) => Operation::CreateSnapshot,
            Step::DeleteSnapshot(_) => Operation::DeleteSnapshot,
            Step::CreateGroupSnapshot(_) => Operation::CreateVolumeGroupSnapshot,
            Step::DeleteGroupSnapshot(_) => Operation::DeleteVolumeGroupSnapshot,
            Step::Name
            | Step::DropPublication(_)
            | Step::Forget
            | Step::DropSnapshot(_)
            | Step::DropGroupSnapshot(_) => return None,
        })
    }

    /// The kind of step, without the node or snapshot it is for (a metric's label).
    pub fn kind(&self) -> &'static str {
        match self {
            Step::Name => "Name",
            Step::DropPublication(_) => "DropPublication",
            Step::DropSnapshot(_) => "DropSnapshot",
            Step::DropGroupSnapshot(_) => "DropGroupSnapshot",
            Step::Forget => "Forget",
            other => other.operation().map_or("Other", |o| o.name()),
        }
    }

    pub fn label(&self) -> String {
        match self {
            Step::ControllerPublish(n)
            | Step::NodePublish(n)
            | Step::NodeUnpublish(n)
            | Step::ControllerUnpublish(n)
            | Step::NodeExpand(n)
            | Step::DropPublication(n) => format!("{} on {n}", self.operation().map_or("drop", |o| o.name())),
            Step::CreateSnapshot(s) | Step::DeleteSnapshot(s) | Step::DropSnapshot(s) => {
                format!("{} {s}", self.operation().map_or("drop snapshot", |o| o.name()))
            }
            Step::CreateGroupSnapshot(g) | Step::DeleteGroupSnapshot(g) | Step::DropGroupSnapshot(g) => {
                format!(
                    "{} {g}",
                    self.operation().map_or("drop group snapshot", |o| o.name())
                )
            }
            other => other
                .operation()
                .map_or_else(|| format!("{other:?}"), |o| o.name().to_string()),
        }
    }
}

/// What the plugins offer, as far as the lifecycle cares.
pub(crate) struct Caps {
    pub controller_publish: bool,
    pub node_stage: bool,
    pub node_expand: bool,
}

/// The next snapshot step, if any.
fn snapshot_step(r: &VolumeRecord) -> Option<Step> {
    r.snapshots.iter().find_map(|(name, s)| {
        let name = name.clone();
        match (&s.backend, s.deleting) {
            (Some(_), true) => Some(Step::DeleteSnapshot(name)),
            // Its id is learnt from CreateSnapshot, which may have made it.
            (None, true) if s.create_sent => Some(Step::CreateSnapshot(name)),
            (None, true) => Some(Step::DropSnapshot(name)),
            (None, false) => Some(Step::CreateSnapshot(name)),
            (Some(b), false) if !b.ready => Some(Step::CreateSnapshot(name)),
            (Some(_), false) => None,
        }
    })
}

/// The next group snapshot step, if any: as for a snapshot, a group that
/// may have been taken is asked for its id before it is deleted, and one
/// not ready yet is followed.
fn group_step(r: &VolumeRecord) -> Option<Step> {
    r.group_snapshots.iter().find_map(|(name, g)| {
        let name = name.clone();
        match (g.group_snapshot_id.is_some(), g.deleting) {
            (true, true) => Some(Step::DeleteGroupSnapshot(name)),
            (false, true) if g.create_sent => Some(Step::CreateGroupSnapshot(name)),
            (false, true) => Some(Step::DropGroupSnapshot(name)),
            (false, false) => Some(Step::CreateGroupSnapshot(name)),
            (true, false) if !g.ready() => Some(Step::CreateGroupSnapshot(name)),
            (true, false) => None,
        }
    })
}

/// The next step for a record, or none when it is where it should be.
pub(crate) fn next_step(r: &VolumeRecord, caps: impl Fn(&str) -> Caps) -> Option<Step> {
    // An imported volume has a backend and no CSI name of Berth's.
    if r.csi_name.is_none() && r.backend.is_none() {
        return Some(if r.deleting { Step::Forget } else { Step::Name });
    }
    let Some(backend) = &r.backend else {
        // When deleting, only if an earlier CreateVolume may have created it.
        return Some(if r.deleting && !r.create_sent {
            Step::Forget
        } else {
            Step::Create
        });
    };
    if let Some(step) = snapshot_step(r).or_else(|| group_step(r)) {
        return Some(step);
    }
    if !r.deleting && backend.short_of(r.spec.required_bytes) {
        return Some(Step::ControllerExpand);
    }
    if !r.deleting && backend.mutable_parameters != r.spec.mutable_parameters {
        return Some(Step::ControllerModify);
    }
    // A single-node volume is taken down where it is no longer wanted before
    // it is brought up elsewhere: on a move, the new node waits (for as long
    // as the old one cannot be reached) rather than both holding it.
    if r.spec.access_mode.is_single_node()
        && let Some((node, p)) = r.publications.iter().find(|(_, p)| !p.wanted || r.deleting)
    {
        return Some(undo_step(node, p, caps(node).controller_publish));
    }
    for (node, p) in &r.publications {
        if !p.wanted || r.deleting {
            return Some(undo_step(node, p, caps(node).controller_publish));
        }
        if !p.controller_published {
            return Some(Step::ControllerPublish(node.clone()));
        }
        if p.node < NodeLevel::Published {
            return Some(Step::NodePublish(node.clone()));
        }
        if p.expand_pending || backend.node_expansion_required {
            return Some(Step::NodeExpand(node.clone()));
        }
    }
    r.deleting.then_some(Step::Delete)
}

/// The next step taking down a publication that is no longer wanted.
fn undo_step(node: &str, p: &berth_model::Publication, controller_publish: bool) -> Step {
    if !p.sent {
        // No plugin has heard of it.
        return Step::DropPublication(node.to_string());
    }
    if p.node > NodeLevel::Absent {
        return Step::NodeUnpublish(node.to_string());
    }
    if p.controller_published && controller_publish {
        return Step::ControllerUnpublish(node.to_string());
    }
    Step::DropPublication(node.to_string())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use berth_model::{Backend, Publication, VolumeSpec};

    pub(crate) fn caps(cp: bool, st: bool) -> impl Fn(&str) -> Caps + Copy {
        move |_| Caps {
            controller_publish: cp,
            node_stage: st,
            node_expand: true,
        }
    }

    /// A created volume, its backend known.
    pub(crate) fn record() -> VolumeRecord {
        let mut r = VolumeRecord::new("id".into(), VolumeSpec::default());
        r.csi_name = Some("n".into());
        r.backend = Some(std::sync::Arc::new(Backend {
            volume_id: "v".into(),
            capacity_bytes: 1,
            sized_for: None,
            context: Default::default(),
            accessible_topology: vec![],
            node_expansion_required: false,
            mutable_parameters: Default::default(),
        }));
        r
    }

    /// A publication that has been sent, at `node` with the controller's side done or not.
    fn publication(controller: bool, node: NodeLevel, wanted: bool) -> Publication {
        let mut p = Publication::new(false);
        (p.wanted, p.sent, p.controller_published, p.node) = (wanted, true, controller, node);
        p
    }

    fn at(r: &mut VolumeRecord, controller: bool, node: NodeLevel) {
        let p = r.publications.get_mut("n1").unwrap();
        (p.controller_published, p.node) = (controller, node);
    }

    #[test]
    fn snapshots_come_first_and_growth_reaches_published_nodes() {
        use berth_model::{Snapshot, SnapshotBackend};
        let mut r = record();
        r.publications
            .insert("n1".into(), publication(true, NodeLevel::Published, true));
        let snap = Snapshot {
            csi_name: "s".into(),
            create_sent: false,
            backend: None,
            deleting: false,
            requested_ms: 0,
        };
        r.snapshots.insert("s1".into(), snap);
        assert_eq!(
            next_step(&r, caps(true, true)),
            Some(Step::CreateSnapshot("s1".into()))
        );
        r.snapshots.get_mut("s1").unwrap().backend = Some(SnapshotBackend {
            snapshot_id: "id".into(),
            size_bytes: 1,
            created_ms: 0,
            ready: true,
        });
        assert_eq!(next_step(&r, caps(true, true)), None);
        r.spec_mut().required_bytes = 2;
        assert_eq!(next_step(&r, caps(true, true)), Some(Step::ControllerExpand));
        r.backend_mut().unwrap().capacity_bytes = 2;
        r.publications.get_mut("n1").unwrap().expand_pending = true;
        assert_eq!(
            next_step(&r, caps(true, true)),
            Some(Step::NodeExpand("n1".into()))
        );
        r.publications.get_mut("n1").unwrap().expand_pending = false;
        // Deleting: the snapshot goes; one never sent is dropped without a call.
        r.snapshots.get_mut("s1").unwrap().deleting = true;
        assert_eq!(
            next_step(&r, caps(true, true)),
            Some(Step::DeleteSnapshot("s1".into()))
        );
        let s = r.snapshots.get_mut("s1").unwrap();
        s.backend = None;
        assert_eq!(
            next_step(&r, caps(true, true)),
            Some(Step::DropSnapshot("s1".into()))
        );
        r.snapshots.get_mut("s1").unwrap().create_sent = true;
        assert_eq!(
            next_step(&r, caps(true, true)),
            Some(Step::CreateSnapshot("s1".into()))
        );
    }

    #[test]
    fn a_single_node_volume_leaves_its_old_node_before_it_reaches_the_new_one() {
        let mut r = record();
        // Moved from n2 to n1: n1 sorts first, yet n2 is taken down first,
        // step by step, and only then is n1 brought up.
        r.publications
            .insert("n2".into(), publication(true, NodeLevel::Published, false));
        r.publications
            .insert("n1".into(), publication(false, NodeLevel::Absent, true));
        assert_eq!(
            next_step(&r, caps(true, true)),
            Some(Step::NodeUnpublish("n2".into()))
        );
        r.publications.get_mut("n2").unwrap().node = NodeLevel::Absent;
        assert_eq!(
            next_step(&r, caps(true, true)),
            Some(Step::ControllerUnpublish("n2".into()))
        );
        r.publications.remove("n2");
        assert_eq!(
            next_step(&r, caps(true, true)),
            Some(Step::ControllerPublish("n1".into()))
        );
        // A volume many nodes may hold is not held back by one going away.
        r.spec_mut().access_mode = berth_model::AccessMode::MultiNodeMultiWriter;
        r.publications
            .insert("n2".into(), publication(true, NodeLevel::Published, false));
        assert_eq!(
            next_step(&r, caps(true, true)),
            Some(Step::ControllerPublish("n1".into()))
        );
    }

    #[test]
    fn mutable_parameters_reach_the_plugin_until_it_has_them_but_not_when_deleting() {
        let mut r = record();
        r.spec_mut()
            .mutable_parameters
            .insert("iops".into(), "300".into());
        assert_eq!(next_step(&r, caps(true, true)), Some(Step::ControllerModify));
        // Growth first: both are due.
        r.spec_mut().required_bytes = 2;
        assert_eq!(next_step(&r, caps(true, true)), Some(Step::ControllerExpand));
        r.backend_mut().unwrap().capacity_bytes = 2;
        assert_eq!(next_step(&r, caps(true, true)), Some(Step::ControllerModify));
        r.backend_mut().unwrap().mutable_parameters = r.spec.mutable_parameters.clone();
        assert_eq!(next_step(&r, caps(true, true)), None);
        r.spec_mut()
            .mutable_parameters
            .insert("tier".into(), "gold".into());
        r.deleting = true;
        assert_eq!(next_step(&r, caps(true, true)), Some(Step::Delete));
    }

    #[test]
    fn a_group_snapshot_is_taken_followed_and_asked_for_its_id_before_it_is_deleted() {
        use berth_model::{GroupMember, GroupSnapshot, SnapshotBackend};
        let mut r = record();
        let taken = |ready| SnapshotBackend {
            snapshot_id: "s".into(),
            size_bytes: 1,
            created_ms: 0,
            ready,
        };
        r.group_snapshots.insert(
            "g".into(),
            GroupSnapshot {
                csi_name: "group-1".into(),
                create_sent: false,
                members: vec![GroupMember {
                    volume: "id".into(),
                    name: "v".into(),
                    volume_id: "v".into(),
                    snapshot: None,
                }],
                group_snapshot_id: None,
                deleting: false,
                requested_ms: 0,
            },
        );
        let create = Some(Step::CreateGroupSnapshot("g".into()));
        assert_eq!(next_step(&r, caps(true, true)), create);
        let g = r.group_snapshots.get_mut("g").unwrap();
        (g.group_snapshot_id, g.members[0].snapshot) = (Some("gs".into()), Some(taken(false)));
        assert_eq!(next_step(&r, caps(true, true)), create, "followed until ready");
        r.group_snapshots.get_mut("g").unwrap().members[0].snapshot = Some(taken(true));
        assert_eq!(next_step(&r, caps(true, true)), None);
        r.group_snapshots.get_mut("g").unwrap().deleting = true;
        assert_eq!(
            next_step(&r, caps(true, true)),
            Some(Step::DeleteGroupSnapshot("g".into()))
        );
        // Perhaps taken, its id unknown: asked for it first; never sent: dropped.
        let g = r.group_snapshots.get_mut("g").unwrap();
        (g.group_snapshot_id, g.create_sent) = (None, true);
        assert_eq!(next_step(&r, caps(true, true)), create);
        r.group_snapshots.get_mut("g").unwrap().create_sent = false;
        assert_eq!(
            next_step(&r, caps(true, true)),
            Some(Step::DropGroupSnapshot("g".into()))
        );
    }

    #[test]
    fn an_imported_volume_needs_no_create() {
        let mut r = record();
        r.csi_name = None;
        assert_eq!(next_step(&r, caps(true, true)), None);
        r.deleting = true;
        assert_eq!(next_step(&r, caps(true, true)), Some(Step::Delete));
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
            .insert("n1".into(), publication(false, NodeLevel::Absent, true));
        assert_eq!(
            next_step(&r, caps(true, true)),
            Some(Step::ControllerPublish("n1".into()))
        );
        at(&mut r, true, NodeLevel::Absent);
        // One step to the node, whether its plugin stages or not.
        for stages in [true, false] {
            assert_eq!(
                next_step(&r, caps(true, stages)),
                Some(Step::NodePublish("n1".into()))
            );
        }
        at(&mut r, true, NodeLevel::Staged);
        assert_eq!(
            next_step(&r, caps(true, true)),
            Some(Step::NodePublish("n1".into()))
        );
        at(&mut r, true, NodeLevel::Published);
        assert_eq!(next_step(&r, caps(true, true)), None);
    }

    #[test]
    fn unpublish_and_delete_go_backward() {
        let mut r = record();
        r.publications
            .insert("n1".into(), publication(true, NodeLevel::Published, true));
        r.deleting = true;
        assert_eq!(
            next_step(&r, caps(true, true)),
            Some(Step::NodeUnpublish("n1".into()))
        );
        at(&mut r, true, NodeLevel::Staged);
        assert_eq!(
            next_step(&r, caps(true, true)),
            Some(Step::NodeUnpublish("n1".into())),
            "one step down the node, from wherever it is"
        );
        at(&mut r, true, NodeLevel::Absent);
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
    }

    #[test]
    fn a_publication_never_sent_is_dropped_without_a_call() {
        let mut r = record();
        let mut p = Publication::new(false);
        p.unwant();
        r.publications.insert("n1".into(), p);
        assert_eq!(
            next_step(&r, caps(true, true)),
            Some(Step::DropPublication("n1".into()))
        );
        // Once sent, undoing starts from the top, whatever was recorded.
        let p = r.publications.get_mut("n1").unwrap();
        p.want(false);
        p.sent = true;
        p.unwant();
        assert_eq!(
            next_step(&r, caps(true, true)),
            Some(Step::NodeUnpublish("n1".into()))
        );
    }
}
