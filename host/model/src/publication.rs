//! A volume on one node, as the server keeps it: the intent (wanted, read
//! only), the controller's side of it, and the node's level as its agent
//! reported it. The agent owns what its node holds; the server's copy is
//! the agent's last answer, put right by the agent whenever it registers.

use serde::{Deserialize, Serialize};

use super::{NodeLevel, Origin, PublicationState, Segments};

/// A volume on one node, keyed by the node's name in
/// [`VolumeRecord::publications`](super::VolumeRecord::publications).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Stored", into = "Stored")]
pub struct Publication {
    /// True to drive toward published, false to drive back and remove.
    pub wanted: bool,
    pub readonly: bool,
    /// ControllerPublishVolume answered (or the plugin has no such call).
    /// While being undone: it may have been made, so ControllerUnpublish is due.
    pub controller_published: bool,
    /// While wanted: the level the node's agent answered or registered
    /// with. While being undone: the most the node may hold, so undoing
    /// starts there. Outcomes are written in batches, so after a crash the
    /// node may be further along than recorded; every call being
    /// idempotent, going forward again is safe, and undoing starts from the top.
    pub node: NodeLevel,
    pub publish_context: Segments,
    /// Set (durably) before the first call for the publication: while unset,
    /// no plugin has heard of it, so undoing it needs no call.
    pub sent: bool,
    /// The volume grew and this node's side of it (its file system) has
    /// not yet: NodeExpandVolume is due once it is published.
    pub expand_pending: bool,
    /// Who asked for it: an operator's publication is never undone by Docker.
    pub by: Origin,
    /// Counts the times it was asked for again while being undone. The
    /// outcomes of calls made in one round are not applied in the next:
    /// undone in one and published again, a later write must not
    /// apply the old round's "unpublished" or "dropped" to the new one.
    pub round: u32,
}

impl Publication {
    /// A new publication, not yet sent to any plugin.
    pub fn new(readonly: bool) -> Self {
        Publication {
            wanted: true,
            readonly,
            controller_published: false,
            node: NodeLevel::Absent,
            publish_context: Segments::new(),
            sent: false,
            expand_pending: false,
            by: Origin::Api,
            round: 0,
        }
    }

    pub fn state(&self) -> PublicationState {
        match (self.wanted, self.controller_published, self.node) {
            (false, _, _) => PublicationState::Unpublishing,
            (true, _, NodeLevel::Published) => PublicationState::Published,
            (true, _, NodeLevel::Staged) => PublicationState::Staged,
            (true, true, NodeLevel::Absent) => PublicationState::ControllerPublished,
            (true, false, NodeLevel::Absent) => PublicationState::Pending,
        }
    }

    /// Asks for the publication; if it was being undone, going forward
    /// again from the bottom, the one point known for sure.
    pub fn want(&mut self, readonly: bool) {
        if !self.wanted {
            self.controller_published = false;
            self.node = NodeLevel::Absent;
            self.round = self.round.wrapping_add(1);
        }
        self.wanted = true;
        self.readonly = readonly;
    }

    /// Asks for the publication for `by`: a publication being undone
    /// becomes the new asker's, and an operator's claim outranks Docker's
    /// (Docker never undoes what an operator asked for).
    pub fn want_for(&mut self, readonly: bool, by: Origin) {
        if !self.wanted || by == Origin::Api {
            self.by = by;
        }
        self.want(readonly);
    }

    /// Asks for the publication to be undone, from the top: calls made
    /// since the last write may have got further than recorded.
    pub fn unwant(&mut self) {
        if self.wanted && self.sent {
            self.controller_published = true;
            self.node = NodeLevel::Published;
        }
        self.wanted = false;
    }

    /// The controller's side is done (published, or unpublished).
    pub fn controller_done(&mut self, published: bool, context: Option<Segments>) {
        self.controller_published = published;
        if let Some(c) = context {
            self.publish_context = c;
        }
        if !published {
            self.publish_context.clear();
        }
    }
}

/// How a publication is stored: one `step` for the controller's side and
/// the node's together, as every release has written it, so stores move
/// between releases both ways.
#[derive(Clone, Serialize, Deserialize)]
struct Stored {
    wanted: bool,
    readonly: bool,
    step: Step,
    publish_context: Segments,
    /// Records from before this field read as sent, the safe assumption.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    sent: bool,
    #[serde(default, skip_serializing_if = "super::is_false")]
    expand_pending: bool,
    /// Records from before this field read as [`Origin::Before`].
    #[serde(default, skip_serializing_if = "super::tenancy::is_before")]
    by: Origin,
    /// Records from before this field read as round 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    round: u32,
}

#[derive(Clone, Copy, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Step {
    None,
    ControllerPublished,
    Staged,
    Published,
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl From<Stored> for Publication {
    fn from(s: Stored) -> Self {
        // A node level above absent came after the controller's side.
        let (controller_published, node) = match s.step {
            Step::None => (false, NodeLevel::Absent),
            Step::ControllerPublished => (true, NodeLevel::Absent),
            Step::Staged => (true, NodeLevel::Staged),
            Step::Published => (true, NodeLevel::Published),
        };
        Publication {
            wanted: s.wanted,
            readonly: s.readonly,
            controller_published,
            node,
            publish_context: s.publish_context,
            sent: s.sent,
            expand_pending: s.expand_pending,
            by: s.by,
            round: s.round,
        }
    }
}

impl From<Publication> for Stored {
    fn from(p: Publication) -> Self {
        let step = match (p.controller_published, p.node) {
            (_, NodeLevel::Published) => Step::Published,
            (_, NodeLevel::Staged) => Step::Staged,
            (true, NodeLevel::Absent) => Step::ControllerPublished,
            (false, NodeLevel::Absent) => Step::None,
        };
        Stored {
            wanted: p.wanted,
            readonly: p.readonly,
            step,
            publish_context: p.publish_context,
            sent: p.sent,
            expand_pending: p.expand_pending,
            by: p.by,
            round: p.round,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stored_step_reads_back_as_it_was_written() {
        for step in ["none", "controller-published", "staged", "published"] {
            let text =
                format!(r#"{{"wanted":true,"readonly":false,"step":"{step}","publish_context":{{}}}}"#);
            let p: Publication = serde_json::from_str(&text).unwrap();
            assert!(p.sent, "records from before `sent` read as sent");
            assert_eq!(p.round, 0, "records from before `round` read as round 0");
            let back = serde_json::to_value(&p).unwrap();
            assert_eq!(back["step"], step);
            assert!(back.get("controller_published").is_none() && back.get("node").is_none());
        }
    }

    #[test]
    fn undoing_starts_from_the_top_and_wanting_again_from_the_bottom() {
        let mut p = Publication::new(false);
        p.unwant();
        assert_eq!(
            (p.controller_published, p.node),
            (false, NodeLevel::Absent),
            "never sent"
        );
        let mut p = Publication::new(false);
        p.sent = true;
        p.controller_done(true, Some(Segments::from([("k".into(), "v".into())])));
        assert_eq!(p.state(), PublicationState::ControllerPublished);
        p.unwant();
        assert_eq!((p.controller_published, p.node), (true, NodeLevel::Published));
        assert_eq!(p.state(), PublicationState::Unpublishing);
        assert_eq!(p.round, 0);
        p.want(true);
        assert_eq!(p.state(), PublicationState::Pending);
        assert!(p.readonly);
        // A new round, kept in the store; records from before read as round 0.
        assert_eq!(p.round, 1);
        let stored = serde_json::to_value(&p).unwrap();
        assert_eq!(stored["round"], 1);
        assert_eq!(serde_json::from_value::<Publication>(stored).unwrap().round, 1);
        p.want(true);
        assert_eq!(p.round, 1, "asked for again while wanted: the same round");
        p.controller_done(false, None);
        assert!(p.publish_context.is_empty());
    }
}
