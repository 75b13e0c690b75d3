//! Sample retry policy, following the CSI spec's error tables.
//!
//! - NOT_FOUND on a delete or an unpublish/unstage: the work is done.
//! - Transient codes (CANCELLED, DEADLINE_EXCEEDED, UNAVAILABLE, ABORTED):
//!   exponential backoff from `base-ms` (default 500) to `max-ms` (default 60000).
//! - RESOURCE_EXHAUSTED: the same, but from `exhausted-base-ms` (default 5000):
//!   capacity rarely comes back in half a second.
//! - INTERNAL and UNKNOWN: retried, but only `max-internal-attempts` times (default 3).
//! - Everything else needs an operator (bad arguments, missing volumes,
//!   unsupported calls, permissions): give up at once.
//! - Any failure gives up after `max-attempts` (default 8).
//!
//! Every delay gets 10% jitter.

mod policy;

pub use policy::*;

berth_guest::export_retry!(SampleRetry);

#[cfg(test)]
mod tests {
    use super::*;
    use berth_guest::Operation;
    use berth_guest::testing::{failure, pairs};
    use berth_guest::*;

    fn retry_ms(d: Decision) -> u64 {
        match d {
            Decision::RetryAfter(ms) => ms,
            other => panic!("expected a retry, got {other:?}"),
        }
    }

    #[test]
    fn not_found_while_undoing_is_done() {
        for op in [Operation::DeleteVolume, Operation::NodeUnpublishVolume] {
            assert_eq!(SampleRetry::classify(failure(op, Code::NotFound)), Decision::Done);
        }
        assert!(matches!(
            SampleRetry::classify(failure(Operation::NodePublishVolume, Code::NotFound)),
            Decision::GiveUp(_)
        ));
    }

    #[test]
    fn transient_codes_back_off_exponentially() {
        let mut f = failure(Operation::CreateVolume, Code::Unavailable);
        assert!((450..=550).contains(&retry_ms(SampleRetry::classify(f.clone()))));
        f.attempt = 4;
        assert!((3600..=4400).contains(&retry_ms(SampleRetry::classify(f))));
    }

    #[test]
    fn resource_exhausted_waits_longer() {
        let f = failure(Operation::CreateVolume, Code::ResourceExhausted);
        assert!(retry_ms(SampleRetry::classify(f)) >= 4500);
    }

    #[test]
    fn attempts_are_capped() {
        let mut f = failure(Operation::CreateVolume, Code::Unavailable);
        f.attempt = 8;
        assert!(
            matches!(SampleRetry::classify(f.clone()), Decision::GiveUp(r) if r.contains("after 8 attempts"))
        );
        f.settings = pairs(&[("max-attempts", "20")]);
        assert!(matches!(SampleRetry::classify(f), Decision::RetryAfter(_)));
    }

    #[test]
    fn final_codes_give_up_at_once() {
        for code in [
            Code::InvalidArgument,
            Code::AlreadyExists,
            Code::Unimplemented,
            Code::PermissionDenied,
        ] {
            let d = SampleRetry::classify(failure(Operation::CreateVolume, code));
            assert!(
                matches!(d, Decision::GiveUp(ref r) if r.contains("needs an operator")),
                "{code:?}: {d:?}"
            );
        }
        let mut f = failure(Operation::CreateVolume, Code::Internal);
        assert!(matches!(
            SampleRetry::classify(f.clone()),
            Decision::RetryAfter(_)
        ));
        f.attempt = 3;
        assert!(matches!(SampleRetry::classify(f), Decision::GiveUp(_)));
    }
}
