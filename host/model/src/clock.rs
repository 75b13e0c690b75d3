//! Wall-clock time, for what is stored and shown (events, retry times,
//! when a node was last heard from). Delays are measured with tokio's
//! monotonic clock, never with this: a step of the wall clock must not
//! change how long anything waits.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (0 before it).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
