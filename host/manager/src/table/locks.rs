//! One lock per volume, held across a change and its write. An entry lives
//! only while someone holds or waits for its lock: kept for every volume
//! ever changed, the map grew with the table (a string, a count and a
//! mutex each, about 150 bytes a volume) and never gave it back.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;

type Lock = Arc<tokio::sync::Mutex<()>>;

#[derive(Default)]
pub(super) struct VolumeLocks(Mutex<HashMap<String, Lock>>);

/// A volume's lock, held; dropping it lets the next one in, and forgets the
/// lock when nobody else waits for it.
pub(super) struct VolumeHeld<'a> {
    locks: &'a VolumeLocks,
    id: String,
    lock: Lock,
    guard: Option<OwnedMutexGuard<()>>,
}

impl VolumeLocks {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Lock>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for `id`'s lock. Given up while waiting (its future dropped),
    /// the entry is forgotten as on a release.
    pub(super) async fn hold(&self, id: &str) -> VolumeHeld<'_> {
        let lock = self.map().entry(id.to_owned()).or_default().clone();
        let mut held = VolumeHeld {
            locks: self,
            id: id.to_owned(),
            lock,
            guard: None,
        };
        held.guard = Some(held.lock.clone().lock_owned().await);
        held
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map().len()
    }
}

impl Drop for VolumeHeld<'_> {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut map = self.locks.map();
        // The map's and this one's: nobody else holds it or waits for it,
        // and nobody can start to while the map is locked.
        if Arc::strong_count(&self.lock) == 2 && map.get(&self.id).is_some_and(|l| Arc::ptr_eq(l, &self.lock))
        {
            map.remove(&self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_lock_is_kept_while_held_or_awaited_and_forgotten_after() {
        let locks = Arc::new(VolumeLocks::default());
        let first = locks.hold("v1").await;
        assert_eq!(locks.len(), 1);
        // A second change waits for the first.
        let (got_tx, mut got_rx) = tokio::sync::oneshot::channel();
        let waiter = {
            let locks = locks.clone();
            tokio::spawn(async move {
                let _second = locks.hold("v1").await;
                let _ = got_tx.send(());
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            })
        };
        tokio::task::yield_now().await;
        assert!(got_rx.try_recv().is_err(), "the second waits");
        drop(first);
        assert_eq!(locks.len(), 1, "kept for the one waiting");
        got_rx.await.unwrap();
        waiter.await.unwrap();
        assert_eq!(locks.len(), 0, "forgotten once nobody holds it");

        // A wait given up forgets it too.
        let held = locks.hold("v2").await;
        let given_up = tokio::time::timeout(std::time::Duration::from_millis(10), locks.hold("v2")).await;
        assert!(given_up.is_err());
        drop(held);
        assert_eq!(locks.len(), 0);
    }
}
