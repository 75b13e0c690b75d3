//! Pacing a fleet's heartbeats: the server takes at most
//! `heartbeats_per_second` of them, so past a certain size every agent is
//! asked to beat less often (as Nomad grows its heartbeat TTL with the
//! cluster). The interval asked for only grows over a server's life: a
//! session's timeout (three asked intervals) never shrinks under an agent
//! that has not heard the news yet.

use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use berth_proto::berth::v1 as wire;

/// Growth of the fleet worth telling every agent about.
const GROWTH: (u64, u64) = (5, 4);

#[derive(Debug, Default)]
pub struct Pace {
    /// 0: unpaced (every agent beats at its own interval).
    per_second: AtomicU32,
    /// The interval below which nothing is asked (the agents' own, as the
    /// server's heartbeat timeout assumes it), in milliseconds.
    floor_ms: AtomicU64,
    sessions: AtomicI64,
    /// The interval asked for, in milliseconds; 0 while nothing is.
    asked_ms: AtomicU64,
}

impl Pace {
    /// At most `per_second` heartbeats, once the fleet is large enough that
    /// agents beating every `floor` would send more.
    pub fn set(&self, per_second: u32, floor: Duration) {
        self.per_second.store(per_second, Ordering::Relaxed);
        self.floor_ms.store(floor.as_millis() as u64, Ordering::Relaxed);
    }

    /// A session was linked (`1`) or let go of (`-1`).
    pub(crate) fn linked(&self, delta: i64) {
        self.sessions.fetch_add(delta, Ordering::Relaxed);
    }

    pub fn sessions(&self) -> usize {
        self.sessions.load(Ordering::Relaxed).max(0) as usize
    }

    /// The interval asked for (zero while nothing is).
    pub fn asked(&self) -> Duration {
        Duration::from_millis(self.asked_ms.load(Ordering::Relaxed))
    }

    /// What a new session is told, when anything is asked.
    pub fn terms(&self) -> Option<wire::Terms> {
        match self.asked_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(wire::Terms {
                heartbeat_interval_ms: ms,
            }),
        }
    }

    /// New terms for every session when the fleet has grown enough since
    /// the last ones (by a quarter) to be worth telling.
    pub fn grown(&self) -> Option<wire::Terms> {
        let per_second = u64::from(self.per_second.load(Ordering::Relaxed));
        if per_second == 0 {
            return None;
        }
        let want = self.sessions() as u64 * 1000 / per_second;
        if want <= self.floor_ms.load(Ordering::Relaxed) {
            return None;
        }
        let asked = self.asked_ms.load(Ordering::Relaxed);
        if want * GROWTH.1 < asked * GROWTH.0 {
            return None;
        }
        // Two sessions attaching at once: one of them tells everyone.
        self.asked_ms
            .compare_exchange(asked, want, Ordering::Relaxed, Ordering::Relaxed)
            .ok()?;
        Some(wire::Terms {
            heartbeat_interval_ms: want,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_fleet_is_not_paced_a_large_one_is_and_only_ever_slower() {
        let p = Pace::default();
        p.set(100, Duration::from_secs(5));
        p.linked(400);
        assert_eq!(p.grown(), None, "400 nodes every 5 s: 80 a second");
        assert_eq!(p.terms(), None);
        p.linked(200);
        let terms = p.grown().expect("600 nodes every 5 s is 120 a second");
        assert_eq!(terms.heartbeat_interval_ms, 6000);
        assert_eq!(p.asked(), Duration::from_secs(6));
        p.linked(100);
        assert_eq!(p.grown(), None, "a sixth more is not worth telling everyone");
        p.linked(100);
        assert_eq!(p.grown().map(|t| t.heartbeat_interval_ms), Some(8000));
        p.linked(-700);
        assert_eq!(p.grown(), None, "a fleet that shrank is not asked to beat faster");
        assert_eq!(p.asked(), Duration::from_secs(8));
        assert_eq!(p.terms().map(|t| t.heartbeat_interval_ms), Some(8000));
    }

    #[test]
    fn unpaced_by_default() {
        let p = Pace::default();
        p.linked(100_000);
        assert_eq!(p.grown(), None);
    }
}
