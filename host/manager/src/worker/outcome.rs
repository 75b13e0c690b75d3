//! What steps leave behind: the change a successful step makes to a record
//! ([`Apply`]), the changes made but not yet written ([`Unwritten`]), and a
//! failed step ([`StepError`]).

use crate::worker::plan::Step;
use berth_csi::CsiError;
use berth_model::{FAILURE_MAX, NodeLevel, Segments, VolumeRecord, cut};
use berth_policy::{Code, Operation, PolicyError};

/// What a successful step changes in the record. Applied twice: to the
/// worker's copy at once, and to the latest stored record when written.
pub(crate) type Apply = Box<dyn Fn(&mut VolumeRecord) + Send + Sync>;

/// The controller's side of a publication done: published (with the
/// plugin's publish context, if it gave one) or unpublished.
pub(crate) fn controller_done(node: &str, published: bool, context: Option<Segments>) -> Apply {
    let node = node.to_string();
    Box::new(move |r: &mut VolumeRecord| {
        if let Some(p) = r.publications.get_mut(&node) {
            p.controller_done(published, context.clone());
        }
    })
}

/// `effect`, and the publication on `node` marked sent.
pub(crate) fn sent(node: &str, effect: Apply) -> Apply {
    let node = node.to_string();
    Box::new(move |r: &mut VolumeRecord| {
        effect(r);
        if let Some(p) = r.publications.get_mut(&node) {
            p.sent = true;
        }
    })
}

/// The node's level as its agent answered.
pub(crate) fn node_at(node: &str, level: NodeLevel) -> Apply {
    let node = node.to_string();
    Box::new(move |r: &mut VolumeRecord| {
        if let Some(p) = r.publications.get_mut(&node) {
            p.node = level;
        }
    })
}

/// A publication no longer wanted, and undone, leaves the record. Applied
/// to the latest record at the write, the check matters: an operator who
/// published the volume there again meanwhile keeps the publication (the
/// undo's facts stay on it, and the next pass publishes it anew).
pub(crate) fn drop_publication(node: &str) -> Apply {
    let node = node.to_string();
    Box::new(move |r: &mut VolumeRecord| {
        if r.publications.get(&node).is_some_and(|p| !p.wanted) {
            r.publications.remove(&node);
        }
    })
}

/// What `step` changes, limited to the round its publication was in on
/// `record` (the record the step was planned from): applied to a later
/// record where the publication was asked for again since, it changes
/// nothing, for the calls of the old round say nothing of the new one.
pub(crate) fn in_round(record: &VolumeRecord, step: &Step, apply: Apply) -> Apply {
    let Some((node, round)) = step
        .publication()
        .and_then(|n| record.publications.get(n).map(|p| (n.to_string(), p.round)))
    else {
        return apply;
    };
    Box::new(move |r: &mut VolumeRecord| {
        if r.publications.get(&node).is_none_or(|p| p.round == round) {
            apply(r);
        }
    })
}

/// The effect of a step whose work turned out to be done already.
pub(crate) fn done_effect(step: &Step) -> Apply {
    match step {
        Step::Delete => Box::new(|r: &mut VolumeRecord| {
            r.backend = None;
            r.csi_name = None;
        }),
        Step::NodeUnpublish(n) => node_at(n, NodeLevel::Absent),
        Step::ControllerUnpublish(n) => controller_done(n, false, None),
        Step::DeleteSnapshot(name) | Step::DropSnapshot(name) => {
            let name = name.clone();
            Box::new(move |r: &mut VolumeRecord| {
                r.snapshots.remove(&name);
            })
        }
        Step::DeleteGroupSnapshot(name) | Step::DropGroupSnapshot(name) => {
            let name = name.clone();
            Box::new(move |r: &mut VolumeRecord| {
                r.group_snapshots.remove(&name);
            })
        }
        _ => Box::new(|_| {}),
    }
}

/// Outcomes of CSI calls made but not yet written. They are written together
/// when the volume needs nothing more, before a call that must be preceded
/// by a durable intent (CreateVolume), when a step fails, or when an
/// operator changed the volume meanwhile. Losing them in a crash is safe:
/// every call is idempotent and is made again, and undoing a publication
/// starts from the top (see [`berth_model::Publication::step`]).
#[derive(Default)]
pub(crate) struct Unwritten {
    pub effects: Vec<Apply>,
    /// The generation this worker last wrote: a record at that generation
    /// changed only by the worker itself, not by an operator.
    pub written: Option<u64>,
}

impl Unwritten {
    pub fn push(&mut self, effect: Apply) {
        self.effects.push(effect);
    }
}

/// Applies outcomes to a record; any outcome ends a retry in progress.
pub(crate) fn apply_all(effects: &[Apply], r: &mut VolumeRecord) {
    for effect in effects {
        effect(r);
    }
    if !effects.is_empty() {
        r.retrying = None;
    }
}

/// A failed step: the code and message the retry policy decides on.
pub(crate) struct StepError {
    pub code: Code,
    pub message: String,
    /// Whether the plugin answered (as opposed to a check before any call).
    pub sent: bool,
    /// Set when a policy failed to decide the step (naming, placement).
    pub policy: Option<PolicyFailure>,
    /// The CSI call that failed, when it is not the step's own (a node step
    /// is the node's calls in order: its stage may fail before its publish).
    pub operation: Option<Operation>,
    /// Not a failure: the plugin is still at it (a snapshot not ready to
    /// use yet). Looked at again after this long; the retry policy is not asked.
    pub not_yet: Option<std::time::Duration>,
}

/// A node call by its CSI method name, as an agent reports it.
fn node_operation(call: &str) -> Option<Operation> {
    [
        Operation::NodeStageVolume,
        Operation::NodePublishVolume,
        Operation::NodeUnpublishVolume,
        Operation::NodeUnstageVolume,
        Operation::NodeExpandVolume,
    ]
    .into_iter()
    .find(|o| o.name() == call)
}

/// How a policy failed, for how long to keep asking it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PolicyFailure {
    /// May pass (a deadline on a busy machine): asked again as long as it takes.
    Transient,
    /// Repeats for the same input (a trap, a broken contract): a few in a
    /// row leave the volume failed.
    Repeatable,
}

impl From<&PolicyError> for PolicyFailure {
    fn from(e: &PolicyError) -> Self {
        if e.failure.is_transient() {
            PolicyFailure::Transient
        } else {
            PolicyFailure::Repeatable
        }
    }
}

/// A step that failed because a policy did.
pub(crate) fn policy_step_error(e: &PolicyError) -> StepError {
    StepError {
        code: Code::Unavailable,
        message: cut(e.to_string(), FAILURE_MAX),
        sent: false,
        policy: Some(e.into()),
        operation: None,
        not_yet: None,
    }
}

impl From<CsiError> for StepError {
    fn from(e: CsiError) -> Self {
        StepError {
            code: Code::from_grpc(e.code()).unwrap_or(Code::Unknown),
            sent: matches!(e.failure, berth_csi::Failure::Status { .. }),
            message: cut(e.to_string(), FAILURE_MAX),
            policy: None,
            operation: node_operation(e.call),
            not_yet: None,
        }
    }
}

pub(crate) fn step_error(code: Code, message: impl Into<String>) -> StepError {
    StepError {
        code,
        message: cut(message.into(), FAILURE_MAX),
        sent: false,
        policy: None,
        operation: None,
        not_yet: None,
    }
}

/// How long to wait before looking again at work the plugin has not
/// finished, `age_ms` after it was asked for: often at first, then less
/// (a quarter of the time it has taken so far, 0.5 s to 30 s).
/// Whether a plugin answered NOT_FOUND.
pub(crate) fn not_found_answer(e: &berth_csi::CsiError) -> bool {
    matches!(
        e.failure,
        berth_csi::Failure::Status {
            code: tonic::Code::NotFound,
            ..
        }
    )
}

pub(crate) fn look_again(age_ms: u64) -> std::time::Duration {
    std::time::Duration::from_millis((age_ms / 4).clamp(500, 30_000))
}

/// Codes with which a plugin refuses a CreateVolume without doing anything;
/// after the others (timeouts, unavailable, internal errors) it may have.
/// Not ALREADY_EXISTS: something holds the name, and it may be what an
/// earlier attempt made (its answer lost), so it may need deleting.
pub(crate) fn refused_outright(code: Code) -> bool {
    matches!(
        code,
        Code::InvalidArgument
            | Code::FailedPrecondition
            | Code::OutOfRange
            | Code::Unimplemented
            | Code::PermissionDenied
            | Code::Unauthenticated
            | Code::ResourceExhausted
            | Code::NotFound
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::plan::next_step;
    use crate::worker::plan::tests::{caps, record};

    /// ALREADY_EXISTS says the name is taken, perhaps by what an earlier
    /// attempt made: a delete must still ask the plugin.
    #[test]
    fn a_name_taken_is_no_proof_that_nothing_was_created() {
        assert!(!refused_outright(Code::AlreadyExists));
        assert!(refused_outright(Code::InvalidArgument));
        assert!(!refused_outright(Code::Unavailable));
    }

    #[test]
    fn a_delete_found_done_leaves_nothing_to_delete() {
        let mut r = record();
        r.create_sent = true;
        r.deleting = true;
        let caps = caps(true, true);
        assert_eq!(next_step(&r, caps), Some(Step::Delete));
        done_effect(&Step::Delete)(&mut r);
        assert_eq!(next_step(&r, caps), Some(Step::Forget));
    }

    /// Outcomes are written in batches, onto the latest record. An undo's
    /// outcomes (unpublished, dropped) still unwritten when the operator
    /// published the volume there again, and the new round was called and
    /// then withdrawn too, must not reach the new round: applied to it,
    /// they dropped a publication the plugin had, with no call to undo it.
    #[test]
    fn an_old_rounds_outcomes_never_reach_a_publication_asked_for_again() {
        use berth_model::{NodeLevel, Publication};
        let caps = caps(true, true);
        let mut r = record();
        let mut p = Publication::new(false);
        (p.sent, p.controller_published, p.node) = (true, true, NodeLevel::Published);
        p.unwant();
        r.publications.insert("n1".into(), p);
        // The worker undoes round 0 to the end; nothing written yet.
        let mut worker = r.clone();
        let mut unwritten: Vec<Apply> = Vec::new();
        for step in [
            Step::NodeUnpublish("n1".into()),
            Step::ControllerUnpublish("n1".into()),
            Step::DropPublication("n1".into()),
        ] {
            assert_eq!(next_step(&worker, caps), Some(step.clone()));
            let effect = match &step {
                Step::DropPublication(n) => drop_publication(n),
                other => done_effect(other),
            };
            let effect = in_round(&worker, &step, effect);
            effect(&mut worker);
            unwritten.push(effect);
        }
        // Published again: round 1, and the worker plans from it, with its
        // outcomes on it; ControllerPublishVolume goes out.
        r.publications.get_mut("n1").unwrap().want(false);
        let mut worker = r.clone();
        for effect in &unwritten {
            effect(&mut worker);
        }
        let step = Step::ControllerPublish("n1".into());
        assert_eq!(next_step(&worker, caps), Some(step.clone()));
        let called = sent("n1", controller_done("n1", true, None));
        let published = in_round(&worker, &step, called);
        published(&mut worker);
        unwritten.push(published);
        // Withdrawn again before the write: undone from the top.
        r.publications.get_mut("n1").unwrap().unwant();
        for effect in &unwritten {
            effect(&mut r);
        }
        let p = r.publications.get("n1").expect("not dropped: the plugin has it");
        assert!(p.controller_published, "{p:?}");
        assert_eq!(next_step(&r, caps), Some(Step::NodeUnpublish("n1".into())));
    }

    /// The undo of a publication is written onto the latest record, which
    /// may have the volume published there again: the operator's publish
    /// stays, with the undo's facts, and the next step publishes anew.
    #[test]
    fn an_undone_publication_published_again_meanwhile_is_kept() {
        use berth_model::{NodeLevel, Publication};
        let caps = caps(true, true);
        let mut r = record();
        r.create_sent = true;
        let mut p = Publication::new(false);
        p.sent = true;
        p.controller_published = true;
        p.node = NodeLevel::Published;
        p.unwant();
        r.publications.insert("n1".into(), p);
        // The worker's copy, undone to the end.
        let mut worker = r.clone();
        let undo = [
            done_effect(&Step::NodeUnpublish("n1".into())),
            done_effect(&Step::ControllerUnpublish("n1".into())),
        ];
        for effect in &undo {
            effect(&mut worker);
        }
        assert_eq!(next_step(&worker, caps), Some(Step::DropPublication("n1".into())));
        let dropped = drop_publication("n1");
        dropped(&mut worker);
        assert!(worker.publications.get("n1").is_none());

        // Meanwhile the operator published it again; the write applies the
        // worker's effects to that record.
        r.publications
            .get_or_insert_with("n1", || Publication::new(false))
            .want(false);
        for effect in undo.iter().chain([&dropped]) {
            effect(&mut r);
        }
        let kept = r.publications.get("n1").expect("the publication asked for again");
        assert!(kept.wanted);
        assert!(!kept.controller_published);
        assert_eq!(kept.node, NodeLevel::Absent);
        assert_eq!(next_step(&r, caps), Some(Step::ControllerPublish("n1".into())));
    }
}
