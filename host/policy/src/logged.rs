//! Decisions as the decision log keeps them — what was asked, what was
//! answered, by which module and digest, for which volume and when — and how
//! another module's answer to the same question compares, which replay
//! reports on.

use serde::{Deserialize, Serialize};

use crate::{
    Candidates, Decision, Failure, NamingOutcome, NamingRequest, PlacementRequest, RetryDecision, Verdicts,
};

/// One decision, as logged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Logged {
    /// Milliseconds since the epoch.
    pub at_ms: u64,
    /// The volume it was for.
    pub volume: String,
    /// The module that answered (`builtin` when none served the decision).
    pub module: String,
    /// `sha256:…` of the module's bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    pub input: Input,
    pub answer: Answer,
}

/// What was asked: the request as the guest received it (settings included;
/// guests never see secrets, so neither does the log).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Input {
    Naming(NamingRequest),
    Placement {
        request: PlacementRequest,
        candidates: Box<Candidates>,
    },
    Retry(Failure),
    Admission(crate::AdmissionRequest),
}

/// What was answered.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Answer {
    Naming(NamingOutcome),
    Placement(Verdicts),
    Retry(RetryDecision),
    Admission(crate::AdmissionVerdict),
    /// The module failed; with `on_error = "builtin"`, what the built-in
    /// policy answered in its place.
    Failed {
        error: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fallback: Option<Box<Answer>>,
    },
}

impl Input {
    pub fn decision(&self) -> Decision {
        match self {
            Input::Naming(_) => Decision::Naming,
            Input::Placement { .. } => Decision::Placement,
            Input::Retry(_) => Decision::Retry,
            Input::Admission(_) => Decision::Admission,
        }
    }

    /// The input with `settings` in place of the logged ones.
    pub fn with_settings(mut self, settings: &[(String, String)]) -> Input {
        let s = settings.to_vec();
        match &mut self {
            Input::Naming(r) => r.settings = s,
            Input::Placement { request, .. } => request.settings = s,
            Input::Retry(f) => f.settings = s,
            Input::Admission(r) => r.settings = s,
        }
        self
    }
}

impl Answer {
    /// What took effect: the answer, or the built-in policy's in a failed module's place.
    pub fn effective(&self) -> Option<&Answer> {
        match self {
            Answer::Failed { fallback, .. } => fallback.as_deref(),
            a => Some(a),
        }
    }
}

/// How a logged decision and another answer to the same input differ.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "decision")]
pub enum Difference {
    /// The volume's backend name changes (a refusal shows as `refused: …`).
    Naming { before: String, after: String },
    Placement {
        /// Nodes refused before and eligible now.
        became_eligible: Vec<String>,
        /// Nodes eligible before and refused now.
        became_ineligible: Vec<String>,
        /// The best node before and after, when that changed.
        best_before: Option<String>,
        best_after: Option<String>,
    },
    Retry {
        /// `retry`, `give-up` or `done`, before and after.
        before: String,
        after: String,
        /// The delays, when both retry.
        before_ms: Option<u64>,
        after_ms: Option<u64>,
    },
    /// The verdict in words (`admitted`, `denied: …`, `admitted with …`).
    Admission { before: String, after: String },
}

/// A logged decision compared with another answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Compared {
    Same,
    Different(Difference),
}

/// Retry delays within this share of each other are the same decision: the
/// samples add up to ±10% of jitter, so one module's two answers to one
/// failure differ by up to about 20%.
const DELAY_TOLERANCE_PERCENT: u64 = 25;

/// Compares what took effect for `logged` with `answer`, an answer to the same input.
pub fn compare(logged: &Logged, answer: &Answer) -> Compared {
    let before = logged.answer.effective();
    let after = answer.effective();
    let different = |d: Difference| Compared::Different(d);
    match (&logged.input, before, after) {
        (Input::Naming(_), before, after) => {
            let (b, a) = (naming_text(before), naming_text(after));
            if b == a {
                Compared::Same
            } else {
                different(Difference::Naming { before: b, after: a })
            }
        }
        (Input::Placement { candidates, .. }, before, after) => {
            // A failed decision leaves every node without a place.
            let verdicts = |a: Option<&Answer>| match a {
                Some(Answer::Placement(v)) => v.clone(),
                _ => Verdicts::new(0),
            };
            let (b, a) = (verdicts(before), verdicts(after));
            let eligible = |v: &Verdicts, i: usize| i < v.len() && v.is_eligible(i);
            let mut became_eligible = Vec::new();
            let mut became_ineligible = Vec::new();
            for (i, name) in candidates.names.iter().enumerate() {
                match (eligible(&b, i), eligible(&a, i)) {
                    (false, true) => became_eligible.push(name.clone()),
                    (true, false) => became_ineligible.push(name.clone()),
                    _ => {}
                }
            }
            let best = |v: &Verdicts| {
                (v.len() == candidates.len())
                    .then(|| crate::ranked(v).first().map(|i| candidates.names[*i].clone()))
                    .flatten()
            };
            let (best_before, best_after) = (best(&b), best(&a));
            if became_eligible.is_empty() && became_ineligible.is_empty() && best_before == best_after {
                return Compared::Same;
            }
            let changed = best_before != best_after;
            different(Difference::Placement {
                became_eligible,
                became_ineligible,
                best_before: best_before.filter(|_| changed),
                best_after: best_after.filter(|_| changed),
            })
        }
        (Input::Admission(_), before, after) => {
            let (b, a) = (admission_text(before), admission_text(after));
            if b == a {
                Compared::Same
            } else {
                different(Difference::Admission { before: b, after: a })
            }
        }
        (Input::Retry(_), before, after) => {
            let (b, b_ms) = retry_kind(before);
            let (a, a_ms) = retry_kind(after);
            let near = match (b_ms, a_ms) {
                (Some(x), Some(y)) => x.abs_diff(y) * 100 <= x.max(y) * DELAY_TOLERANCE_PERCENT,
                _ => true,
            };
            if b == a && near {
                Compared::Same
            } else {
                different(Difference::Retry {
                    before: b.into(),
                    after: a.into(),
                    before_ms: b_ms.zip(a_ms).map(|(x, _)| x),
                    after_ms: b_ms.zip(a_ms).map(|(_, y)| y),
                })
            }
        }
    }
}

fn naming_text(answer: Option<&Answer>) -> String {
    match answer {
        Some(Answer::Naming(NamingOutcome::Named(n))) => n.clone(),
        Some(Answer::Naming(NamingOutcome::Refused(r))) => format!("refused: {r}"),
        _ => "failed".into(),
    }
}

/// An admission verdict in words, as `volume explain` shows it.
pub fn admission_text(answer: Option<&Answer>) -> String {
    match answer {
        Some(Answer::Admission(crate::AdmissionVerdict::Allow)) => "admitted".into(),
        Some(Answer::Admission(crate::AdmissionVerdict::Deny(why))) => format!("denied: {why}"),
        Some(Answer::Admission(crate::AdmissionVerdict::AllowWith(changes))) => format!(
            "admitted with {}",
            changes
                .iter()
                .map(|c| format!(
                    "{} ({})",
                    crate::cases::admission::change_text(&c.change),
                    c.reason
                ))
                .collect::<Vec<_>>()
                .join("; ")
        ),
        _ => "failed".into(),
    }
}

fn retry_kind(answer: Option<&Answer>) -> (&'static str, Option<u64>) {
    match answer {
        Some(Answer::Retry(RetryDecision::RetryAfter(ms))) => ("retry", Some(*ms)),
        Some(Answer::Retry(RetryDecision::GiveUp(_))) => ("give-up", None),
        Some(Answer::Retry(RetryDecision::Done)) => ("done", None),
        _ => ("failed", None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PlacementNode, Purpose, VerdictsBuilder};

    fn logged(input: Input, answer: Answer) -> Logged {
        Logged {
            at_ms: 1,
            volume: "v".into(),
            module: "m".into(),
            digest: None,
            input,
            answer,
        }
    }

    fn node(name: &str) -> PlacementNode {
        crate::samples::node(name, &[])
    }

    fn verdicts(scores: &[i32], refused: &[usize]) -> Answer {
        let mut v = VerdictsBuilder::new(scores.len());
        for (i, s) in scores.iter().enumerate() {
            v.score(i, *s);
        }
        for i in refused {
            v.refuse(*i, "no");
        }
        Answer::Placement(v.finish())
    }

    #[test]
    fn placement_differences_name_nodes_and_the_best_one() {
        let nodes = [node("a"), node("b"), node("c")];
        let request = PlacementRequest {
            volume: crate::samples::volume("v"),
            purpose: Purpose::Create,
            accessible_topology: vec![],
            settings: vec![],
        };
        let entry = logged(
            Input::Placement {
                request,
                candidates: Box::new(crate::candidates(&nodes)),
            },
            verdicts(&[10, 5, 0], &[2]),
        );
        assert_eq!(compare(&entry, &verdicts(&[10, 5, 0], &[2])), Compared::Same);
        assert_eq!(
            compare(&entry, &verdicts(&[1, 5, 0], &[0])),
            Compared::Different(Difference::Placement {
                became_eligible: vec!["c".into()],
                became_ineligible: vec!["a".into()],
                best_before: Some("a".into()),
                best_after: Some("b".into()),
            })
        );
        // Only scores moved, the same best node: the same decision.
        assert_eq!(compare(&entry, &verdicts(&[20, 5, 0], &[2])), Compared::Same);
    }

    #[test]
    fn retry_delays_within_jitter_are_the_same_decision() {
        let failure = crate::samples::failure(crate::Operation::CreateVolume, crate::Code::Unavailable, 1);
        let entry = logged(
            Input::Retry(failure),
            Answer::Retry(RetryDecision::RetryAfter(1000)),
        );
        let retry = |ms| Answer::Retry(RetryDecision::RetryAfter(ms));
        assert_eq!(compare(&entry, &retry(1150)), Compared::Same);
        assert!(matches!(
            compare(&entry, &retry(4000)),
            Compared::Different(Difference::Retry {
                before_ms: Some(1000),
                after_ms: Some(4000),
                ..
            })
        ));
        let Compared::Different(Difference::Retry { before, after, .. }) =
            compare(&entry, &Answer::Retry(RetryDecision::GiveUp("x".into())))
        else {
            panic!("a give-up differs from a retry")
        };
        assert_eq!((before.as_str(), after.as_str()), ("retry", "give-up"));
    }

    #[test]
    fn a_logged_decision_round_trips_through_json() {
        let entry = logged(
            Input::Naming(NamingRequest {
                volume: crate::samples::volume("v"),
                settings: vec![("prefix".into(), "p".into())],
            }),
            Answer::Failed {
                error: "trapped".into(),
                fallback: Some(Box::new(Answer::Naming(NamingOutcome::Named("pv-v".into())))),
            },
        );
        let text = serde_json::to_string(&entry).unwrap();
        assert_eq!(serde_json::from_str::<Logged>(&text).unwrap(), entry);
        let other = Answer::Naming(NamingOutcome::Named("pv-v".into()));
        assert_eq!(
            compare(&entry, &other),
            Compared::Same,
            "the fallback is what took effect"
        );
    }
}
