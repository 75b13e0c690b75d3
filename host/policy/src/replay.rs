//! Replay: a candidate module asked the logged questions, in the same sandbox
//! and limits as a live decision, and what it would have changed, grouped
//! in the terms an operator decides on.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::logged::{Answer, Compared, Difference, Input, Logged, compare};
use crate::{NamingOutcome, PolicyEngine, PolicyModule};

/// How many concrete examples each group keeps.
pub const EXAMPLES: usize = 5;

/// `module`'s answer to a logged input (a failure is an answer too).
pub async fn ask(engine: &PolicyEngine, module: &PolicyModule, input: &Input) -> Answer {
    try_ask(engine, module, input)
        .await
        .unwrap_or_else(|e| Answer::Failed {
            error: e.to_string(),
            fallback: None,
        })
}

/// [`ask`], with how the module failed when it did.
pub async fn try_ask(
    engine: &PolicyEngine,
    module: &PolicyModule,
    input: &Input,
) -> Result<Answer, crate::PolicyError> {
    match input {
        Input::Naming(request) => module.volume_name(engine, request).await.map(|r| {
            Answer::Naming(match r {
                Ok(name) => NamingOutcome::Named(name),
                Err(reason) => NamingOutcome::Refused(reason),
            })
        }),
        Input::Placement { request, candidates } => module
            .place(engine, request, candidates)
            .await
            .map(Answer::Placement),
        Input::Retry(failure) => module.classify(engine, failure).await.map(Answer::Retry),
        Input::Admission(request) => module.admit(engine, request).await.map(Answer::Admission),
    }
}

/// What a replay found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    pub replayed: u64,
    pub same: u64,
    pub different: u64,
    pub failed: u64,
    pub naming: NamingGroup,
    pub placement: PlacementGroup,
    pub retry: RetryGroup,
    pub admission: AdmissionGroup,
    /// Why the candidate failed, a few times.
    pub failures: Vec<Example<String>>,
}

/// One decision that came out otherwise, with the volume it was for.
#[derive(Clone, Debug, Serialize)]
pub struct Example<T> {
    pub volume: String,
    pub at_ms: u64,
    #[serde(flatten)]
    pub detail: T,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct NamingGroup {
    /// Volumes whose backend name would change.
    pub names_changed: u64,
    pub examples: Vec<Example<Difference>>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct PlacementGroup {
    /// By node: how many decisions it would become eligible in, and ineligible in.
    pub became_eligible: BTreeMap<String, u64>,
    pub became_ineligible: BTreeMap<String, u64>,
    /// Decisions whose best node would change.
    pub best_changed: u64,
    pub examples: Vec<Example<Difference>>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct RetryGroup {
    /// `before → after` (retry, give-up, done), and how often.
    pub changes: BTreeMap<String, u64>,
    /// Decisions that still retry, after a different delay.
    pub delays_changed: u64,
    pub examples: Vec<Example<Difference>>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct AdmissionGroup {
    /// Requests admitted before and denied now, and the other way.
    pub newly_denied: u64,
    pub newly_admitted: u64,
    /// Requests admitted both times, with other changes.
    pub changes_differ: u64,
    pub examples: Vec<Example<Difference>>,
}

fn keep<T>(list: &mut Vec<Example<T>>, entry: &Logged, detail: T) {
    if list.len() < EXAMPLES {
        list.push(Example {
            volume: entry.volume.clone(),
            at_ms: entry.at_ms,
            detail,
        });
    }
}

impl Report {
    /// Counts one logged decision and the candidate's answer to it.
    pub fn add(&mut self, entry: &Logged, answer: &Answer) {
        self.replayed += 1;
        if let Answer::Failed { error, .. } = answer {
            self.failed += 1;
            keep(&mut self.failures, entry, error.clone());
            return;
        }
        let Compared::Different(difference) = compare(entry, answer) else {
            self.same += 1;
            return;
        };
        self.different += 1;
        match &difference {
            Difference::Naming { .. } => {
                self.naming.names_changed += 1;
                keep(&mut self.naming.examples, entry, difference);
            }
            Difference::Placement {
                became_eligible,
                became_ineligible,
                best_before,
                best_after,
            } => {
                let g = &mut self.placement;
                for n in became_eligible {
                    *g.became_eligible.entry(n.clone()).or_default() += 1;
                }
                for n in became_ineligible {
                    *g.became_ineligible.entry(n.clone()).or_default() += 1;
                }
                if best_before != best_after {
                    g.best_changed += 1;
                }
                keep(&mut g.examples, entry, difference);
            }
            Difference::Retry { before, after, .. } => {
                let g = &mut self.retry;
                if before == after {
                    g.delays_changed += 1;
                } else {
                    *g.changes.entry(format!("{before} → {after}")).or_default() += 1;
                }
                keep(&mut g.examples, entry, difference);
            }
            Difference::Admission { before, after } => {
                let g = &mut self.admission;
                match (before.starts_with("denied"), after.starts_with("denied")) {
                    (false, true) => g.newly_denied += 1,
                    (true, false) => g.newly_admitted += 1,
                    _ => g.changes_differ += 1,
                }
                keep(&mut g.examples, entry, difference);
            }
        }
    }

    /// The report's closing line.
    pub fn summary(&self) -> String {
        format!(
            "{} decisions replayed: {} same, {} different, {} failed",
            self.replayed, self.same, self.different, self.failed
        )
    }
}
