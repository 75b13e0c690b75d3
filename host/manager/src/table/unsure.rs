//! Volume records whose last write failed. A store may keep a write it
//! could not answer for (etcd's answer lost in a partition), so until a
//! write of the record succeeds, the store may hold it otherwise than the
//! table does. Kept in memory only: a restart loads what the store holds.

use std::collections::HashSet;
use std::sync::Mutex;

use berth_model::VolumeRecord;
use berth_store::{Store, StoreError};

#[derive(Default)]
pub struct Unsure {
    ids: Mutex<HashSet<String>>,
    /// How many: the common case, none, needs no lock.
    count: std::sync::atomic::AtomicUsize,
}

impl Unsure {
    fn ids(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.ids.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes `record` to `store`, noting whether the write failed.
    pub async fn put(&self, store: &dyn Store, record: &VolumeRecord) -> Result<(), StoreError> {
        let written = store.put(record).await;
        self.set(&record.id, written.is_err());
        written
    }

    /// After a write of `id`'s record: whether it failed.
    pub fn set(&self, id: &str, failed: bool) {
        use std::sync::atomic::Ordering;
        if !failed && self.count.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut ids = self.ids();
        let changed = if failed {
            ids.insert(id.to_string())
        } else {
            ids.remove(id)
        };
        if changed {
            self.count.store(ids.len(), Ordering::Relaxed);
        }
    }

    /// Whether the store may hold `id`'s record otherwise than the table.
    pub fn holds(&self, id: &str) -> bool {
        self.count.load(std::sync::atomic::Ordering::Relaxed) > 0 && self.ids().contains(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_write_is_unsure_until_one_succeeds() {
        let u = Unsure::default();
        assert!(!u.holds("a"));
        u.set("a", true);
        u.set("b", true);
        assert!(u.holds("a") && u.holds("b"));
        u.set("a", false);
        assert!(!u.holds("a") && u.holds("b"));
        u.set("b", false);
        assert!(!u.holds("b"));
    }
}
