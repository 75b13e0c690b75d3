//! When each retrying volume is due, by the monotonic clock. A record keeps
//! its retry's wall-clock time, to show and to read after a restart; waits
//! are measured from the moment the retry was decided, so stepping the
//! wall clock (back an hour, say) changes no wait. A retry decided before
//! this process started is due by the wall clock, but never later than the
//! wait the policy asked for.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use berth_model::Retrying;

#[derive(Default)]
pub(crate) struct Deadlines {
    /// By volume id: the retry (its wall-clock time) and when it is due.
    due: Mutex<HashMap<String, (u64, Instant)>>,
}

impl Deadlines {
    /// A retry decided now, `delay` from now.
    pub fn set(&self, id: &str, retry: &Retrying, delay: Duration) {
        self.lock()
            .insert(id.to_string(), (retry.next_attempt_ms, Instant::now() + delay));
    }

    /// How long until `retry` is due (zero: now). `now_ms` is the wall
    /// clock, read only for a retry this process did not decide.
    pub fn remaining(&self, id: &str, retry: &Retrying, now_ms: u64) -> Duration {
        let now = Instant::now();
        let mut due = self.lock();
        if let Some((ms, at)) = due.get(id)
            && *ms == retry.next_attempt_ms
        {
            return at.saturating_duration_since(now);
        }
        let mut left = retry.next_attempt_ms.saturating_sub(now_ms);
        if retry.delay_ms > 0 {
            left = left.min(retry.delay_ms);
        }
        let left = Duration::from_millis(left);
        due.insert(id.to_string(), (retry.next_attempt_ms, now + left));
        left
    }

    /// The volume no longer waits to retry (or is gone).
    pub fn clear(&self, id: &str) {
        self.lock().remove(id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (u64, Instant)>> {
        self.due.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retry(next_attempt_ms: u64, delay_ms: u64) -> Retrying {
        Retrying {
            operation: "NodeStageVolume on node-a".into(),
            attempt: 1,
            first_failure_ms: 0,
            next_attempt_ms,
            delay_ms,
            last_error: String::new(),
            policy_failures: 0,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_wall_clock_step_changes_no_wait() {
        let d = Deadlines::default();
        let wall = 1_000_000_000;
        let r = retry(wall + 5_000, 5_000);
        d.set("v", &r, Duration::from_secs(5));
        tokio::time::advance(Duration::from_secs(3)).await;
        // The wall clock went back an hour meanwhile: two seconds are left all the same.
        assert_eq!(d.remaining("v", &r, wall - 3_600_000), Duration::from_secs(2));
        // And forward an hour: still two.
        assert_eq!(d.remaining("v", &r, wall + 3_600_000), Duration::from_secs(2));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(d.remaining("v", &r, wall - 3_600_000), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_read_after_a_restart_waits_no_longer_than_decided() {
        let d = Deadlines::default();
        let wall = 1_000_000_000;
        // Decided by the previous process for 5 s from `wall`; the wall clock
        // has since gone back an hour.
        let r = retry(wall + 5_000, 5_000);
        assert_eq!(d.remaining("v", &r, wall - 3_600_000), Duration::from_secs(5));
        // Measured from then on by the monotonic clock.
        tokio::time::advance(Duration::from_secs(4)).await;
        assert_eq!(d.remaining("v", &r, wall - 3_600_000), Duration::from_secs(1));
        // A record from before the wait was kept follows the wall clock.
        let old = retry(wall + 7_000, 0);
        assert_eq!(d.remaining("w", &old, wall), Duration::from_secs(7));
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_retry_replaces_the_last() {
        let d = Deadlines::default();
        d.set("v", &retry(10, 10), Duration::from_secs(10));
        let next = retry(20, 1_000);
        d.set("v", &next, Duration::from_secs(1));
        assert_eq!(d.remaining("v", &next, 0), Duration::from_secs(1));
        d.clear("v");
        assert_eq!(d.remaining("v", &next, 20), Duration::ZERO);
    }
}
