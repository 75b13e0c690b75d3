//! The reconcile loop: plan a step, carry it out, record the outcome, until
//! the volume is where it should be, waits for a retry, or has failed.
//! Outcomes are written in batches (see [`Unwritten`]); failures go to the
//! retry policy.

pub(crate) mod deadlines;
pub(crate) mod outcome;
pub(crate) mod plan;
pub(crate) mod plugin_waits;
pub(crate) mod queue;
pub(crate) mod snapshot_steps;
pub(crate) mod steps;
pub(crate) mod work;

use std::time::Duration;

use crate::worker::outcome::{
    Apply, PolicyFailure, StepError, Unwritten, apply_all, done_effect, in_round, refused_outright,
};
use crate::worker::plan::{Caps, Step, next_step};
use crate::{RequestError, now_ms};
use berth_csi::proto::controller_service_capability::rpc::Type as ControllerCap;
use berth_csi::proto::node_service_capability::rpc::Type as NodeCap;
use berth_metrics as metrics;
use berth_model::{FAILURE_MAX, LAST_ERROR_MAX, Retrying, VolumeRecord, cut};
use berth_policy::{self as policy, Decision, RetryDecision};

/// A guest that fails to decide this many times in a row for a volume, in a
/// way that repeats for the same input (a contract violation, a trap),
/// leaves the volume failed for an operator instead of retrying forever.
const POLICY_FAILURES_TO_GIVE_UP: u32 = 3;
/// How long to wait before asking a policy that failed again.
const POLICY_RETRY_MS: u64 = 1_000;
/// How long a run's last outcomes wait for another write of the volume to
/// carry them (a request following the create it answered): about the
/// store's window for gathering writes into one commit, and a little more.
const PARKED_FOR: Duration = Duration::from_millis(5);

/// The least wait before retry number `attempt`, whatever the retry policy
/// answers: 10 ms doubling per attempt, up to 10 s. A policy answering
/// `retry-after(0)` cannot make Berth hammer a plugin.
pub(crate) fn retry_floor_ms(attempt: u32) -> u64 {
    const FIRST_MS: u64 = 10;
    const MAX_MS: u64 = 10_000;
    FIRST_MS
        .checked_shl(attempt.saturating_sub(1))
        .map_or(MAX_MS, |ms| ms.min(MAX_MS))
}

crate::shared::view!(
    /// The worker: takes a volume from the queue, plans its next step, makes
    /// the CSI call and records the outcome, and retries what failed.
    Worker,
    worker
);

impl Worker<'_> {
    /// Drives one volume until it is where it should be, waits for a retry, or fails.
    pub(crate) async fn reconcile(&self, id: &str) {
        let Some(mut record) = self.table.by_id(id) else {
            return;
        };
        let mut unwritten = Unwritten::default();
        // Outcomes an earlier run parked and no write has carried yet: in
        // this run's copy, and written with its writes.
        let parked = self.table.parked().take(id);
        let carried = !parked.is_empty();
        apply_all(&parked, &mut record);
        unwritten.effects = parked;
        // CreateVolume's accessibility requirements, decided together with
        // the name: one trip to the guests instead of two.
        let mut placed_ahead = None;
        loop {
            let current = self.table.generation(id);
            if current != Some(record.generation) && current != unwritten.written {
                // An operator changed the volume: plan from the latest record
                // with this worker's outcomes on it, still unwritten: they go
                // with the next write (every step that needs them durable
                // first writes them), not in a write of their own.
                let Some(latest) = self.table.by_id(id) else {
                    return;
                };
                record = latest;
                apply_all(&unwritten.effects, &mut record);
            }
            if record.failure.is_some() {
                // Kept since the give-up (or since the start, after a restart).
                self.table.waits().set(
                    id,
                    format!(
                        "waiting for an operator: `berth volume retry {0}` or `berth volume delete {0}`",
                        berth_model::text::shell_word(&record.spec.name)
                    ),
                    now_ms(),
                );
                return self.finish(id, &record, &mut unwritten).await;
            }
            if let Some(r) = &record.retrying {
                let wait = self.work.deadlines.remaining(id, r, now_ms());
                if !wait.is_zero() {
                    self.wake_after(id, wait);
                    return self.finish(id, &record, &mut unwritten).await;
                }
            }
            // Capabilities decide which steps exist: never plan before they
            // are known, nor send work to a plugin that is not the driver
            // configured.
            if let Some(waiting) = self.held_back(&record) {
                tracing::debug!(volume = %record.spec.name, %waiting, "held back");
                self.table.waits().set(id, waiting, now_ms());
                self.wake_after(id, Duration::from_secs(1));
                return self.finish(id, &record, &mut unwritten).await;
            }
            // What it waited for is cleared once a step runs, not before:
            // a volume that still waits keeps the time it began to.
            let Some(step) = next_step(&record, |node| self.caps(&record.spec.plugin, node)) else {
                self.table.waits().clear(id);
                // Where it should be: the last outcomes wait a moment for
                // the volume's next write (a request's, under load) to
                // carry them, once; this worker writes them after that.
                if !carried && !unwritten.effects.is_empty() {
                    self.table
                        .parked()
                        .park(id, std::mem::take(&mut unwritten.effects));
                    self.wake_after(id, PARKED_FOR);
                    return;
                }
                return self.finish(id, &record, &mut unwritten).await;
            };
            // A forgotten node's side is skipped: an operator declared it dead.
            if let Some(node) = step.on_node()
                && self.nodes.forgotten(node)
                && let Some(skip) = skipped_on_forgotten(&step)
            {
                let skip = in_round(&record, &step, skip);
                skip(&mut record);
                unwritten.push(skip);
                continue;
            }
            // A node without its agent is left as it is, and flagged: Berth
            // does not guess. The node's return queues the volume again.
            if let Some(node) = step.on_node()
                && !self.nodes.connected(node)
            {
                self.table
                    .waits()
                    .set(id, self.fleet().node_wait_reason(node), now_ms());
                self.wake_after(id, Duration::from_secs(5));
                return self.finish(id, &record, &mut unwritten).await;
            }
            if step == Step::Forget {
                if let Err(e) = self.remove_record(id).await {
                    tracing::error!(volume = %record.spec.name, error = %e, "could not forget the volume");
                }
                return;
            }
            tracing::debug!(volume = %record.spec.name, ?step, "step");
            match self
                .execute(&record, &step, &mut unwritten, &mut placed_ahead)
                .await
            {
                Ok(apply) => {
                    self.table.waits().clear(id);
                    let apply = in_round(&record, &step, apply);
                    apply(&mut record);
                    if record.retrying.take().is_some() {
                        self.work.deadlines.clear(id);
                    }
                    unwritten.push(apply);
                    if let Some(event) = self.step_done(&step, &record) {
                        event(&mut record);
                        unwritten.push(event);
                    }
                }
                Err(StepError {
                    not_yet: Some(after),
                    message,
                    ..
                }) => {
                    self.table.waits().set(id, message, now_ms());
                    self.wake_after(id, after);
                    return self.finish(id, &record, &mut unwritten).await;
                }
                Err(e) => {
                    self.table.waits().clear(id);
                    match self.failed(&record, &step, e, &mut unwritten).await {
                        Ok(Some(latest)) => record = latest,
                        Ok(None) => return,
                        Err(e) => return self.retry_soon(&record, e),
                    }
                }
            }
        }
    }

    /// Writes what is unwritten and stops.
    async fn finish(&self, id: &str, record: &VolumeRecord, unwritten: &mut Unwritten) {
        // Nothing to write: the latest record is not needed (and not copied).
        if unwritten.effects.is_empty() {
            return;
        }
        if let Err(e) = self.write_unwritten(id, unwritten, |_| {}).await {
            self.retry_soon(record, e);
        }
    }

    /// The latest record, with what is unwritten written first (if anything).
    pub(crate) async fn sync(
        &self,
        id: &str,
        unwritten: &mut Unwritten,
    ) -> Result<Option<VolumeRecord>, RequestError> {
        if unwritten.effects.is_empty() {
            return Ok(self.table.by_id(id));
        }
        self.write_unwritten(id, unwritten, |_| {}).await
    }

    fn retry_soon(&self, record: &VolumeRecord, e: RequestError) {
        tracing::error!(volume = %record.spec.name, error = %e, "could not record the outcome; retrying in 1s");
        self.wake_after(&record.id, Duration::from_secs(1));
    }

    /// Writes the unwritten outcomes and `also` onto the latest record, in
    /// one durable change; returns that record (`None` if it is gone).
    pub(crate) async fn write_unwritten(
        &self,
        id: &str,
        unwritten: &mut Unwritten,
        also: impl FnOnce(&mut VolumeRecord),
    ) -> Result<Option<VolumeRecord>, RequestError> {
        let pending = std::mem::take(&mut unwritten.effects);
        match self
            .table
            .modify(id, |r| {
                apply_all(&pending, r);
                also(r);
                Ok(())
            })
            .await
        {
            Ok((_, latest)) => {
                unwritten.written = Some(latest.generation);
                Ok(Some(latest))
            }
            Err(RequestError::NotFound(_)) => Ok(None),
            Err(e) => {
                unwritten.effects = pending;
                Err(e)
            }
        }
    }

    /// Asks the retry policy what to do about a failed step and records the
    /// answer with everything unwritten; returns the record to go on with,
    /// or `None` to stop for now.
    async fn failed(
        &self,
        record: &VolumeRecord,
        step: &Step,
        e: StepError,
        unwritten: &mut Unwritten,
    ) -> Result<Option<VolumeRecord>, RequestError> {
        if *step == Step::Create && e.sent && refused_outright(e.code) {
            // The plugin answered no: nothing was created under this name.
            let latest = self
                .write_unwritten(&record.id, unwritten, |r| r.create_sent = false)
                .await?;
            if record.deleting {
                return Ok(latest);
            }
        }
        if let Step::CreateSnapshot(name) = step
            && e.sent
            && refused_outright(e.code)
            && record.snapshots.get(name).is_some_and(|s| s.backend.is_none())
        {
            // Likewise for a snapshot.
            let deleting = record.snapshots.get(name).is_some_and(|s| s.deleting);
            let latest = self
                .write_unwritten(&record.id, unwritten, |r| {
                    if let Some(s) = r.snapshots.get_mut(name) {
                        s.create_sent = false;
                    }
                })
                .await?;
            if deleting {
                return Ok(latest);
            }
        }
        let attempt = record.retrying.as_ref().map_or(1, |r| r.attempt + 1);
        let first = record
            .retrying
            .as_ref()
            .map_or_else(now_ms, |r| r.first_failure_ms);
        // A node step names the call that failed: that is what is decided on and shown.
        let operation = e.operation.or(step.operation());
        let label = match (e.operation, step.on_node()) {
            (Some(op), Some(node)) => format!("{} on {node}", op.name()),
            _ => step.label(),
        };
        let name = record.spec.name.clone();
        // A failed policy is asked again after a pause; one that fails the
        // same way a few times in a row leaves the volume failed.
        let (decision, policy_failed) = match (e.policy, operation) {
            (Some(kind), _) => (
                RetryDecision::RetryAfter(POLICY_RETRY_MS),
                Some((e.message.clone(), kind)),
            ),
            (None, Some(operation)) => {
                let failure = policy::Failure {
                    operation,
                    code: e.code,
                    message: e.message.clone(),
                    attempt,
                    elapsed_ms: now_ms().saturating_sub(first),
                    driver: record.spec.plugin.clone(),
                    settings: vec![],
                };
                let (decided, logged) = self
                    .decisions()
                    .decide(&name, &[Decision::Retry], async |p| {
                        p.classify_logged(&name, failure).await
                    })
                    .await;
                let note = berth_model::DecisionNote {
                    about: format!("{label}: {} {}", e.code.name(), e.message),
                    ..crate::decisions::note(&logged, crate::decisions::describe(&logged.answer))
                }
                .bounded();
                self.log_decision(logged);
                unwritten.push(Box::new(move |r: &mut VolumeRecord| {
                    r.explain_mut().retried(note.clone())
                }));
                match decided {
                    Ok(d) => (d, None),
                    Err(pe) => (
                        RetryDecision::RetryAfter(POLICY_RETRY_MS),
                        Some((pe.to_string(), PolicyFailure::from(&pe))),
                    ),
                }
            }
            // Berth's own steps fail only when a policy does.
            (None, None) => (RetryDecision::RetryAfter(POLICY_RETRY_MS), None),
        };
        let before = record.retrying.as_ref().map_or(0, |r| r.policy_failures);
        let policy_failures = match &policy_failed {
            Some((_, PolicyFailure::Repeatable)) => before + 1,
            Some((_, PolicyFailure::Transient)) => before,
            None => 0,
        };
        let decision = match (policy_failed, decision) {
            (Some((why, PolicyFailure::Repeatable)), _) if policy_failures >= POLICY_FAILURES_TO_GIVE_UP => {
                RetryDecision::GiveUp(format!(
                    "the policy failed {policy_failures} times in a row, last: {why}"
                ))
            }
            (Some((why, _)), RetryDecision::RetryAfter(ms)) => {
                tracing::warn!(volume = %name, id = %record.id, step = %label, policy_failures, error = %why, "policy failed; asking again");
                RetryDecision::RetryAfter(ms.max(retry_floor_ms(attempt)))
            }
            (_, RetryDecision::RetryAfter(ms)) => RetryDecision::RetryAfter(ms.max(retry_floor_ms(attempt))),
            // A guest's reason is kept and logged: bounded like any text from outside.
            (_, RetryDecision::GiveUp(reason)) => RetryDecision::GiveUp(cut(reason, FAILURE_MAX)),
            (_, d) => d,
        };
        tracing::info!(volume = %name, id = %record.id, step = %label, attempt, error = %e.message, ?decision, "step failed");
        let kind = operation.map_or(step.kind(), |o| o.name());
        let what = match &decision {
            RetryDecision::Done => "the retry policy counts it as done".to_string(),
            RetryDecision::RetryAfter(ms) => {
                metrics::retry(kind);
                format!(
                    "attempt {attempt}; retrying in {}",
                    humantime::format_duration(Duration::from_millis(*ms))
                )
            }
            RetryDecision::GiveUp(reason) => {
                metrics::give_up(kind);
                format!("gave up: {reason}")
            }
        };
        unwritten.push(self.event(label.clone(), e.code.name(), format!("{}; {what}", e.message)));
        match decision {
            RetryDecision::Done => {
                unwritten.push(in_round(record, step, done_effect(step)));
                self.write_unwritten(&record.id, unwritten, |_| {}).await
            }
            RetryDecision::RetryAfter(ms) => {
                let retry = Retrying {
                    operation: label.clone(),
                    attempt,
                    first_failure_ms: first,
                    next_attempt_ms: now_ms() + ms,
                    delay_ms: ms,
                    last_error: cut(e.message.clone(), LAST_ERROR_MAX),
                    policy_failures,
                };
                self.work
                    .deadlines
                    .set(&record.id, &retry, Duration::from_millis(ms));
                self.write_unwritten(&record.id, unwritten, |r| r.retrying = Some(Box::new(retry)))
                    .await
            }
            RetryDecision::GiveUp(reason) => {
                let latest = self
                    .write_unwritten(&record.id, unwritten, |r| {
                        r.retrying = None;
                        r.give_up(format!("{label}: {reason}"));
                    })
                    .await?;
                tracing::warn!(volume = %record.spec.name, step = %label, %reason, "gave up");
                Ok(latest)
            }
        }
    }

    /// The event of a step done: what the volume is now.
    fn step_done(&self, step: &Step, r: &VolumeRecord) -> Option<Apply> {
        // The hot path: nothing is formatted when no events are kept.
        if self.config.events_per_volume == 0 {
            return None;
        }
        let message = match step {
            Step::Name => format!("named {}", r.csi_name.as_deref().unwrap_or("?")),
            Step::Create => format!(
                "created as {}; the volume is {}",
                r.backend.as_ref().map_or("?", |b| b.volume_id.as_str()),
                r.state()
            ),
            step if step.operation().is_some() => format!("the volume is {}", r.state()),
            _ => return None,
        };
        let done = self.event(step.label(), "OK", message);
        // A node plugin that stages does it within the node's step: its
        // own event comes first on the way up, last on the way down.
        let staging = match step {
            Step::NodePublish(node) | Step::NodeUnpublish(node)
                if self.caps(&r.spec.plugin, node).node_stage =>
            {
                node
            }
            _ => return Some(done),
        };
        Some(if let Step::NodePublish(_) = step {
            let staged = self.event(
                format!("NodeStageVolume on {staging}"),
                "OK",
                "the volume is staged on the node".into(),
            );
            Box::new(move |r: &mut VolumeRecord| {
                staged(r);
                done(r);
            })
        } else {
            let unstaged = self.event(
                format!("NodeUnstageVolume on {staging}"),
                "OK",
                "the volume is no longer staged on the node".into(),
            );
            Box::new(move |r: &mut VolumeRecord| {
                done(r);
                unstaged(r);
            })
        })
    }

    pub(crate) fn caps(&self, plugin: &str, node: &str) -> Caps {
        let controller = self
            .registry
            .get(plugin)
            .and_then(|p| p.status().fingerprint)
            .is_some_and(|f| f.has_controller_capability(ControllerCap::PublishUnpublishVolume));
        let node = self.nodes.plugin_status(node, plugin).and_then(|s| s.fingerprint);
        Caps {
            controller_publish: controller,
            node_stage: node
                .as_ref()
                .is_some_and(|f| f.has_node_capability(NodeCap::StageUnstageVolume)),
            node_expand: node
                .as_ref()
                .is_some_and(|f| f.has_node_capability(NodeCap::ExpandVolume)),
        }
    }
}

/// What a node-side step on a forgotten node leaves the record at, without a call:
/// undoing goes on as if the node had done it; nothing goes forward there.
fn skipped_on_forgotten(step: &Step) -> Option<crate::worker::outcome::Apply> {
    match step {
        Step::NodeUnpublish(node) => Some(crate::worker::outcome::node_at(
            node,
            berth_model::NodeLevel::Absent,
        )),
        Step::NodeExpand(node) => {
            let node = node.clone();
            Some(Box::new(move |r: &mut VolumeRecord| {
                if let Some(p) = r.publications.get_mut(&node) {
                    p.expand_pending = false;
                }
            }))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_retry_floor_grows_and_is_bounded() {
        assert_eq!(retry_floor_ms(0), 10);
        assert_eq!(retry_floor_ms(1), 10);
        assert_eq!(retry_floor_ms(2), 20);
        assert_eq!(retry_floor_ms(8), 1_280);
        assert_eq!(retry_floor_ms(11), 10_000);
        assert_eq!(retry_floor_ms(u32::MAX), 10_000);
        // Ten retries of a policy answering retry-after(0) take over 10 s.
        assert!((1..=10).map(retry_floor_ms).sum::<u64>() > 10_000);
    }
}
