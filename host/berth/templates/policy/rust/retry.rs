//! Retry: transient failures back off exponentially from `base-ms` (500),
//! up to `max-attempts` (8); NOT_FOUND while undoing means done; anything
//! else needs an operator.

use berth_guest::{Code, Decision, Failure, Retry, backoff_ms, number_setting};

impl Retry for super::Policy {
    fn classify(failure: Failure) -> Decision {
        let settings = &failure.settings;
        let (base, max_attempts) = match (
            number_setting(settings, "base-ms", 500),
            number_setting(settings, "max-attempts", 8),
        ) {
            (Ok(base), Ok(max)) => (base, max),
            (Err(e), _) | (_, Err(e)) => return Decision::GiveUp(format!("bad setting: {e}")),
        };
        let what = format!(
            "{} {}: {}",
            failure.operation.name(),
            failure.code.name(),
            failure.message
        );
        match failure.code {
            Code::NotFound if failure.operation.is_undo() => Decision::Done,
            _ if u64::from(failure.attempt) >= max_attempts => {
                Decision::GiveUp(format!("gave up after {} attempts: {what}", failure.attempt))
            }
            Code::Unavailable | Code::DeadlineExceeded | Code::Aborted | Code::ResourceExhausted => {
                Decision::RetryAfter(backoff_ms(failure.attempt, base, 60_000))
            }
            _ => Decision::GiveUp(format!("needs an operator: {what}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use berth_guest::testing::failure;
    use berth_guest::{Code, Decision, Operation, Retry};

    use crate::Policy;

    #[test]
    fn transient_failures_back_off() {
        let mut f = failure(Operation::CreateVolume, Code::Unavailable);
        f.attempt = 3;
        assert_eq!(Policy::classify(f), Decision::RetryAfter(2000));
    }
}
