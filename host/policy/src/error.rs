//! What can go wrong when a policy module decides.

use std::fmt;
use std::time::Duration;

use crate::Decision;

/// How a guest failed to give a usable answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GuestFailure {
    /// The module could not be loaded (read, compiled or validated).
    Load(String),
    /// The module does not export the decision it was asked for.
    NotServed,
    /// A fresh instance could not be created.
    Instantiate(String),
    /// The guest ran past its epoch deadline.
    Deadline(Duration),
    /// The guest tried to grow its memory past the limit.
    MemoryLimit { limit: usize },
    /// The guest trapped (panicked, hit `unreachable`, ...).
    Trap(String),
    /// The answer was larger than the module's bound.
    AnswerTooLarge { bytes: usize, limit: usize },
    /// The answer had the right type but broke the contract.
    InvalidAnswer(crate::answer::AnswerError),
}

impl GuestFailure {
    /// Whether asking again may well succeed: a deadline missed or an
    /// instance not created on a busy machine. A trap, a memory limit or a
    /// broken contract repeats for the same input.
    pub fn is_transient(&self) -> bool {
        matches!(self, GuestFailure::Deadline(_) | GuestFailure::Instantiate(_))
    }

    /// Whether the guest was stopped mid-run: a trap, its deadline or its
    /// memory limit.
    pub fn is_trap(&self) -> bool {
        matches!(
            self,
            GuestFailure::Trap(_) | GuestFailure::Deadline(_) | GuestFailure::MemoryLimit { .. }
        )
    }
}

impl fmt::Display for GuestFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GuestFailure::Load(why) => write!(f, "cannot load: {why}"),
            GuestFailure::NotServed => f.write_str("the module does not export this decision"),
            GuestFailure::Instantiate(why) => write!(f, "cannot instantiate: {why}"),
            GuestFailure::Deadline(d) => {
                write!(f, "ran past its deadline of {}", humantime::format_duration(*d))
            }
            GuestFailure::MemoryLimit { limit } => {
                write!(f, "tried to use more than its memory limit of {}", bytes(*limit))
            }
            GuestFailure::Trap(why) => write!(f, "trapped: {why}"),
            GuestFailure::AnswerTooLarge { bytes: n, limit } => {
                write!(
                    f,
                    "answer of {} exceeds the limit of {}",
                    bytes(*n),
                    bytes(*limit)
                )
            }
            GuestFailure::InvalidAnswer(why) => write!(f, "invalid answer: {why}"),
        }
    }
}

pub fn bytes(n: usize) -> String {
    berth_model::units::format_bytes(n)
}

/// A failed decision, naming the module and the decision (a module that
/// does not load names no decision: it failed before deciding anything).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyError {
    pub module: String,
    pub decision: Decision,
    pub failure: GuestFailure,
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.failure {
            GuestFailure::Load(_) => write!(f, "policy module {:?}: {}", self.module, self.failure),
            _ => write!(
                f,
                "policy module {:?} ({}): {}",
                self.module, self.decision, self.failure
            ),
        }
    }
}

impl std::error::Error for PolicyError {}
