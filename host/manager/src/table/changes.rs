//! Changes of a volume's record: made durable before anyone sees them, one
//! volume at a time (its lock), and the removal of a volume for good.
//!
//! A worker done with a volume may park its last outcomes here instead of
//! writing them at once: the next write of the volume, a request's or the
//! worker's own a moment later, carries them. Under load a request often
//! follows (a publish after its create), and the two writes are one.
//!
//! Invariant: a parked outcome is in no record, in memory or in the store,
//! until a write carries it, so what anyone reads was written. Losing one
//! (a crash, a failed write, a new term) is safe for the reason any
//! unwritten outcome is: the call behind it is idempotent and made again.

use std::collections::HashMap;
use std::sync::Mutex;

use berth_model::VolumeRecord;

use super::{RemoveError, VolumeTable, unavailable};
use crate::{Missing, RequestError};

/// One outcome of a worker's call, applied to the record that carries it.
pub(crate) type Outcome = Box<dyn Fn(&mut VolumeRecord) + Send + Sync>;

/// Parked outcomes by volume id, oldest first.
#[derive(Default)]
pub(crate) struct Parked {
    by_volume: Mutex<HashMap<String, Vec<Outcome>>>,
}

impl Parked {
    fn park(&self, id: &str, outcomes: Vec<Outcome>) {
        if !outcomes.is_empty() {
            self.map().entry(id.to_string()).or_default().extend(outcomes);
        }
    }

    fn take(&self, id: &str) -> Vec<Outcome> {
        self.map().remove(id).unwrap_or_default()
    }

    fn volumes(&self) -> Vec<String> {
        self.map().keys().cloned().collect()
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Outcome>>> {
        self.by_volume.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Puts `outcomes` back before any parked since (a write that failed).
    fn put_back(&self, id: &str, mut outcomes: Vec<Outcome>) {
        if outcomes.is_empty() {
            return;
        }
        let mut map = self.map();
        let later = map.remove(id).unwrap_or_default();
        outcomes.extend(later);
        map.insert(id.to_string(), outcomes);
    }
}

/// The table as a worker parks outcomes in it and a term's end writes them.
pub(crate) struct Parking<'a> {
    table: &'a VolumeTable,
}

impl VolumeTable {
    /// Workers' outcomes waiting for the next write of their volume.
    pub(crate) fn parked(&self) -> Parking<'_> {
        Parking { table: self }
    }

    /// Applies `change` to the latest record, with any outcomes parked for
    /// it, and makes it durable before anyone sees it. Returns what
    /// `change` returned and the new record.
    pub async fn modify<T>(
        &self,
        id: &str,
        change: impl FnOnce(&mut VolumeRecord) -> Result<T, RequestError>,
    ) -> Result<(T, VolumeRecord), RequestError> {
        let _held = self.locks.hold(id).await;
        let mut record = self.by_id(id).ok_or_else(|| Missing::VolumeId(id.to_string()))?;
        let parked = self.parked.take(id);
        for outcome in &parked {
            outcome(&mut record);
        }
        let out = match change(&mut record) {
            Ok(out) => out,
            Err(e) => {
                self.parked.put_back(id, parked);
                return Err(e);
            }
        };
        record.generation += 1;
        if let Err(e) = self.unsure.put(&*self.store, &record).await {
            self.parked.put_back(id, parked);
            return Err(unavailable("the change", e));
        }
        self.lock().insert(record.clone());
        self.changed();
        Ok((out, record))
    }

    /// Removes a volume for good.
    pub async fn remove(&self, id: &str) -> Result<(), berth_store::StoreError> {
        self.remove_if(id, |_| Ok(())).await.map_err(|e| match e {
            RemoveError::Store(e) => e,
            RemoveError::Refused(_) => unreachable!("nothing refuses"),
        })
    }

    /// Removes a volume for good if `check` passes on its latest record.
    pub async fn remove_if(
        &self,
        id: &str,
        check: impl FnOnce(&VolumeRecord) -> Result<(), RequestError>,
    ) -> Result<(), RemoveError> {
        let _held = self.locks.hold(id).await;
        if let Some(r) = self.by_id(id) {
            check(&r).map_err(RemoveError::Refused)?;
        }
        self.store.remove(id).await.map_err(RemoveError::Store)?;
        self.lock().remove(id);
        self.waits().clear(id);
        self.uncalled.forget(id);
        self.unsure.set(id, false);
        self.parked.take(id);
        self.changed();
        Ok(())
    }
}

impl Parking<'_> {
    /// Parks a worker's outcomes for the next write of volume `id`.
    pub(crate) fn park(&self, id: &str, outcomes: Vec<Outcome>) {
        self.table.parked.park(id, outcomes);
    }

    /// Takes the outcomes parked for volume `id`: a worker carrying them
    /// in its own copy of the record.
    pub(crate) fn take(&self, id: &str) -> Vec<Outcome> {
        self.table.parked.take(id)
    }

    /// Writes the outcomes parked for every volume now, each with its
    /// volume's record: before a term ends, so the next need not make
    /// those calls again. A write that fails is left (the calls are made
    /// again); how many were written.
    pub(crate) async fn write_all(&self) -> usize {
        let mut written = 0;
        for id in self.table.parked.volumes() {
            // A change of nothing: the write carries what is parked.
            match self.table.modify(&id, |_| Ok(())).await {
                Ok(_) => written += 1,
                Err(e) => tracing::debug!(volume = %id, error = %e, "parked outcomes not written"),
            }
        }
        written
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_store::RedbStore;
    use std::sync::Arc;

    #[tokio::test]
    async fn parked_outcomes_are_seen_only_once_a_write_carries_them() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(RedbStore::open(&dir.path().join("s.redb")).unwrap());
        let t = VolumeTable::load(store.clone()).unwrap();
        let mut r = VolumeRecord::new("id1".into(), Default::default());
        r.spec_mut().name = "data".into();
        t.insert_new(r, |_| true, |_| Ok(())).await.unwrap();
        t.parked().park(
            "id1",
            vec![Box::new(|r: &mut VolumeRecord| {
                r.csi_name = Some("pv-data".into())
            })],
        );
        assert_eq!(t.by_id("id1").unwrap().csi_name, None, "parked: in no record yet");
        // A request's change that fails leaves them parked.
        let refused = t
            .modify("id1", |_| Err::<(), _>(RequestError::Invalid("no".into())))
            .await;
        assert!(refused.is_err());
        let ((), written) = t
            .modify("id1", |r| {
                r.spec_mut().labels.clear();
                Ok(())
            })
            .await
            .unwrap();
        assert_eq!(
            written.csi_name.as_deref(),
            Some("pv-data"),
            "carried by the next write"
        );
        let stored = berth_store::Store::load(&*store).unwrap();
        assert_eq!(stored[0].csi_name.as_deref(), Some("pv-data"), "durable with it");
        assert!(t.parked().take("id1").is_empty(), "carried once");
        t.parked()
            .park("id1", vec![Box::new(|r: &mut VolumeRecord| r.csi_name = None)]);
        t.remove("id1").await.unwrap();
        assert!(
            t.parked().take("id1").is_empty(),
            "a volume removed takes its parked outcomes along"
        );
    }

    fn event(n: u64) -> Outcome {
        Box::new(move |r: &mut VolumeRecord| r.generation = r.generation * 10 + n)
    }

    #[test]
    fn outcomes_put_back_go_before_those_parked_since() {
        let parked = Parked::default();
        parked.map().insert("v".into(), vec![event(3)]);
        let taken = vec![event(1), event(2)];
        parked.put_back("v", taken);
        let mut r = VolumeRecord::new("v".into(), Default::default());
        for o in parked.take("v") {
            o(&mut r);
        }
        assert_eq!(r.generation, 123);
        assert!(parked.take("v").is_empty());
    }
}
