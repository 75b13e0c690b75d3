//! The sample retry policy itself, apart from its export, so that a module
//! building on it (a candidate that differs on a few inputs) can include it.

use berth_guest::{Code, Decision, Failure, Retry, backoff_ms, jitter, number_setting};

pub struct SampleRetry;

fn settings(f: &Failure) -> Result<[u64; 5], String> {
    let s = &f.settings;
    Ok([
        number_setting(s, "base-ms", 500)?,
        number_setting(s, "max-ms", 60_000)?,
        number_setting(s, "exhausted-base-ms", 5_000)?,
        number_setting(s, "max-attempts", 8)?,
        number_setting(s, "max-internal-attempts", 3)?,
    ])
}

impl Retry for SampleRetry {
    fn classify(f: Failure) -> Decision {
        let [base, max, exhausted_base, max_attempts, max_internal] = match settings(&f) {
            Ok(s) => s,
            Err(e) => return Decision::GiveUp(format!("bad setting: {e}")),
        };
        let what = format!("{} {}: {}", f.operation.name(), f.code.name(), f.message);
        if f.code == Code::NotFound && f.operation.is_undo() {
            return Decision::Done;
        }
        if u64::from(f.attempt) >= max_attempts {
            return Decision::GiveUp(format!("gave up after {} attempts: {what}", f.attempt));
        }
        let delay = match f.code {
            Code::Cancelled | Code::DeadlineExceeded | Code::Unavailable | Code::Aborted => {
                backoff_ms(f.attempt, base, max)
            }
            Code::ResourceExhausted => backoff_ms(f.attempt, exhausted_base, max.max(exhausted_base)),
            Code::Internal | Code::Unknown if u64::from(f.attempt) < max_internal => {
                backoff_ms(f.attempt, base, max)
            }
            Code::Internal | Code::Unknown => {
                return Decision::GiveUp(format!(
                    "plugin error persisted for {} attempts: {what}",
                    f.attempt
                ));
            }
            _ => return Decision::GiveUp(format!("needs an operator: {what}")),
        };
        Decision::RetryAfter(jitter(delay, 10))
    }
}
