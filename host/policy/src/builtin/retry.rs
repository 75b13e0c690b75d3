//! Built-in retry classification, after the CSI spec's error tables and the
//! Kubernetes sidecars' final and non-final codes.
//!
//! - NOT_FOUND while undoing (delete, unpublish, unstage): done.
//! - Non-final codes (CANCELLED, DEADLINE_EXCEEDED, UNAVAILABLE,
//!   RESOURCE_EXHAUSTED, ABORTED): retried without limit, backing off
//!   exponentially from `base` to `max` with jitter.
//! - INTERNAL and UNKNOWN: retried `max_internal_attempts` times.
//! - Everything else needs an operator: give up with the plugin's message.

use std::time::Duration;

use rand::Rng;

use crate::{Code, Failure, RetryDecision};

#[derive(Clone, Debug)]
pub struct BuiltinRetry {
    pub base: Duration,
    pub max: Duration,
    pub max_internal_attempts: u32,
    /// Each delay moves randomly by up to this share either way.
    pub jitter: f64,
}

impl Default for BuiltinRetry {
    fn default() -> Self {
        // The Kubernetes sidecars' backoff: 1 s doubling to 5 min.
        BuiltinRetry {
            base: Duration::from_secs(1),
            max: Duration::from_secs(300),
            max_internal_attempts: 5,
            jitter: 0.1,
        }
    }
}

impl BuiltinRetry {
    pub fn classify(&self, failure: &Failure) -> RetryDecision {
        let code = failure.code;
        if code == Code::NotFound && failure.operation.is_undo() {
            return RetryDecision::Done;
        }
        let transient = matches!(
            code,
            Code::Cancelled
                | Code::DeadlineExceeded
                | Code::Unavailable
                | Code::ResourceExhausted
                | Code::Aborted
        );
        let internal = matches!(code, Code::Internal | Code::Unknown);
        if transient || (internal && failure.attempt < self.max_internal_attempts) {
            return RetryDecision::RetryAfter(self.delay_ms(failure.attempt));
        }
        let why = if internal {
            format!("{} failed {} times", code.name(), failure.attempt)
        } else {
            format!("{} needs an operator", code.name())
        };
        RetryDecision::GiveUp(format!("{why}: {}", failure.message))
    }

    /// `base * 2^(attempt-1)`, capped at `max`, with jitter.
    pub fn delay_ms(&self, attempt: u32) -> u64 {
        let exp = attempt.saturating_sub(1).min(32);
        let base = self.base.as_millis() as u64;
        let ms = base.saturating_mul(1 << exp).min(self.max.as_millis() as u64);
        let spread = (ms as f64 * self.jitter) as u64;
        if spread == 0 {
            return ms;
        }
        ms - spread + rand::rng().random_range(0..=2 * spread)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Operation;
    use crate::samples::failure;

    #[test]
    fn classification_follows_the_spec() {
        let r = BuiltinRetry::default();
        assert_eq!(
            r.classify(&failure(Operation::DeleteVolume, Code::NotFound, 1)),
            RetryDecision::Done
        );
        assert!(matches!(
            r.classify(&failure(Operation::NodeStageVolume, Code::NotFound, 1)),
            RetryDecision::GiveUp(m) if m.contains("NOT_FOUND needs an operator: from the plugin")
        ));
        for code in [
            Code::Unavailable,
            Code::ResourceExhausted,
            Code::Aborted,
            Code::DeadlineExceeded,
        ] {
            assert!(matches!(
                r.classify(&failure(Operation::CreateVolume, code, 50)),
                RetryDecision::RetryAfter(_)
            ));
        }
        assert!(matches!(
            r.classify(&failure(Operation::CreateVolume, Code::Internal, 4)),
            RetryDecision::RetryAfter(_)
        ));
        assert!(matches!(
            r.classify(&failure(Operation::CreateVolume, Code::Internal, 5)),
            RetryDecision::GiveUp(_)
        ));
        assert!(matches!(
            r.classify(&failure(Operation::CreateVolume, Code::InvalidArgument, 1)),
            RetryDecision::GiveUp(_)
        ));
    }

    #[test]
    fn backoff_doubles_with_jitter_and_caps() {
        let r = BuiltinRetry::default();
        for _ in 0..50 {
            assert!((900..=1100).contains(&r.delay_ms(1)));
            assert!((3600..=4400).contains(&r.delay_ms(3)));
            assert!((270_000..=330_000).contains(&r.delay_ms(40)));
        }
    }
}
