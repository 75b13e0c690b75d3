//! The plan: from a record and what the plugins offer, the one next step.
//! Pure: no I/O, no clock, no locks.
//!
//! create:  name → CreateVolume → per node: ControllerPublish → NodeStage → NodePublish
//! undo:    per node: NodeUnpublish → NodeUnstage → ControllerUnpublish → DeleteVolume
//!
//! Steps a plugin does not offer (PUBLISH_UNPUBLISH, STAGE_UNSTAGE) are passed
//! without a call.

use crate::model::{PublishStep, VolumeRecord};
use crate::policy::Operation;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Step {
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
    pub fn operation(&self) -> Option<Operation> {
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

    pub fn label(&self) -> String {
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
pub(super) struct Caps {
    pub controller_publish: bool,
    pub node_stage: bool,
}

/// The next step for a record, or none when it is where it should be.
pub(super) fn next_step(r: &VolumeRecord, caps: impl Fn(&str) -> Caps) -> Option<Step> {
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
            if !p.sent {
                // No plugin has heard of it.
                return Some(Step::DropPublication(node.clone()));
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Backend, Publication, VolumeSpec};

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
            sent: true,
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
