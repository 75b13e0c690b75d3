//! Volumes that cannot progress, by id, with why and since when. Derived
//! from the plugins' and nodes' state as the reconciler finds it, so kept
//! in memory only.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Why a volume cannot progress, and since when (ms since the epoch).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiting {
    pub reason: String,
    pub since_ms: u64,
}

/// Room kept in the map however few wait.
const ROOM: usize = 1024;

#[derive(Default)]
pub struct Waits {
    by_id: Mutex<HashMap<String, Waiting>>,
    /// How many volumes wait: the common case, none, needs no lock.
    count: AtomicUsize,
}

impl Waits {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Waiting>> {
        self.by_id.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records why `id` cannot progress; `since` stays while the reason does.
    pub fn set(&self, id: &str, reason: String, now_ms: u64) {
        let mut w = self.map();
        match w.get_mut(id) {
            Some(old) if old.reason == reason => {}
            _ => {
                let new = Waiting {
                    reason,
                    since_ms: now_ms,
                };
                if w.insert(id.to_string(), new).is_none() {
                    self.count.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// `id` progresses (or is gone): it waits for nothing.
    pub fn clear(&self, id: &str) {
        if self.count() == 0 {
            return;
        }
        let mut w = self.map();
        if w.remove(id).is_some() {
            self.count.fetch_sub(1, Ordering::Relaxed);
            // A restart's every volume may wait for its node's agent at
            // once, and a map keeps its room when emptied: room for a
            // million entries is over 100 MB.
            if w.capacity() > ROOM && w.len() * 4 < w.capacity() {
                let room = (w.len() * 2).max(ROOM);
                w.shrink_to(room);
            }
        }
    }

    pub fn get(&self, id: &str) -> Option<Waiting> {
        if self.count() == 0 {
            return None;
        }
        self.map().get(id).cloned()
    }

    pub fn count(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_room_of_a_restarts_waiting_volumes_is_given_back_as_they_stop_waiting() {
        let w = Waits::default();
        let room = || w.map().capacity();
        for i in 0..20_000 {
            w.set(
                &format!("v{i}"),
                "waiting for node \"n1\", whose agent is unknown".into(),
                1,
            );
        }
        let full = room();
        assert!(full >= 20_000);
        for i in 0..19_990 {
            w.clear(&format!("v{i}"));
        }
        assert!(room() <= ROOM * 2, "{} of {full} kept for 10 waiting", room());
        assert_eq!(w.get("v19995").map(|w| w.since_ms), Some(1));
        assert!(w.get("v5").is_none());
        assert_eq!(w.count(), 10);
    }
}
