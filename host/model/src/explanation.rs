//! Why a volume is as it is: the policy decisions that shaped it, kept with
//! its record (bounded), for `berth volume explain`.

use serde::{Deserialize, Serialize};

use crate::Interned;

/// The most nodes a placement note lists: the best eligible ones first, then refused ones.
pub const NOTE_NODES: usize = 64;
/// Retry decisions kept, newest last.
pub const NOTE_RETRIES: usize = 8;
/// The most a reason or an answer takes.
pub const NOTE_TEXT: usize = 512;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Explanation {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub naming: Option<Box<DecisionNote>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Box<DecisionNote>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retries: Vec<DecisionNote>,
    /// The admission of the request that made the volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<Box<DecisionNote>>,
}

/// One decision about the volume.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionNote {
    /// Milliseconds since the epoch.
    pub at_ms: u64,
    /// The module that decided (`builtin` when none served the decision).
    /// Module names, digests and node names are shared by every note that
    /// holds them (see [`Interned`]).
    pub module: Interned,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<Interned>,
    /// What was decided, in words: the name, the chosen node, `retry after 2s`...
    pub answer: String,
    /// Retry: the failed call it was about.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub about: String,
    /// Placement: the nodes judged (at most [`NOTE_NODES`]), and how many there were.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<NodeVerdict>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub nodes_judged: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeVerdict {
    pub node: Interned,
    pub eligible: bool,
    pub score: i32,
    /// Why it was refused.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Explanation {
    pub fn is_empty(&self) -> bool {
        self.naming.is_none()
            && self.placement.is_none()
            && self.retries.is_empty()
            && self.admission.is_none()
    }

    /// Keeps a retry decision, dropping the oldest past [`NOTE_RETRIES`].
    pub fn retried(&mut self, note: DecisionNote) {
        if self.retries.len() >= NOTE_RETRIES {
            self.retries.remove(0);
        }
        self.retries.push(note);
    }
}

impl DecisionNote {
    /// Bounds every text and list, as everything kept from outside is.
    pub fn bounded(mut self) -> DecisionNote {
        self.answer = crate::cut(self.answer, NOTE_TEXT);
        self.about = crate::cut(self.about, NOTE_TEXT);
        self.nodes.truncate(NOTE_NODES);
        for n in &mut self.nodes {
            n.reason = crate::cut(std::mem::take(&mut n.reason), NOTE_TEXT);
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_bounded_and_retries_keep_the_newest() {
        let mut e = Explanation::default();
        assert!(e.is_empty());
        for i in 0..20 {
            e.retried(
                DecisionNote {
                    at_ms: i,
                    answer: "x".repeat(10_000),
                    nodes: vec![
                        NodeVerdict {
                            node: "n".into(),
                            eligible: false,
                            score: 0,
                            reason: "r".repeat(10_000),
                        };
                        100
                    ],
                    ..Default::default()
                }
                .bounded(),
            );
        }
        assert_eq!(e.retries.len(), NOTE_RETRIES);
        assert_eq!(e.retries[0].at_ms, 12);
        assert!(e.retries[0].answer.len() <= NOTE_TEXT);
        assert_eq!(e.retries[0].nodes.len(), NOTE_NODES);
        assert!(e.retries[0].nodes[0].reason.len() <= NOTE_TEXT);
    }
}
