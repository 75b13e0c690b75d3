//! The durable store: one redb file, crash-safe. Writers hand their records to
//! a single committer thread that batches everything waiting into one
//! transaction, so under load many changes share one fsync; each writer is
//! answered only once its change is durable.

use std::path::Path;
use std::sync::mpsc;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use tokio::sync::oneshot;

use crate::model::VolumeRecord;

const VOLUMES: TableDefinition<&str, &[u8]> = TableDefinition::new("volumes");
/// The store's page cache.
const CACHE_BYTES: usize = 16 << 20;
/// Most changes committed in one transaction.
const MAX_BATCH: usize = 1024;

enum Change {
    /// A record's id and its encoding, made by the writer so the one
    /// committer thread only copies bytes.
    Put(String, Vec<u8>),
    Remove(String),
}

type Reply = oneshot::Sender<Result<(), String>>;

pub struct Store {
    db: std::sync::Arc<Database>,
    writes: Option<mpsc::Sender<(Change, Reply)>>,
    committer: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Store {
    /// Closes the file for good: the committer finishes what it has and exits.
    fn drop(&mut self) {
        self.writes.take();
        if let Some(handle) = self.committer.take() {
            let _ = handle.join();
        }
    }
}

impl Store {
    /// Opens (or creates) the store file, and starts its committer.
    pub fn open(path: &Path) -> Result<Store, String> {
        if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        }
        // Every volume is held in memory by the manager; the store's own page
        // cache only needs to serve writes and the load at start.
        let db = redb::Builder::new()
            .set_cache_size(CACHE_BYTES)
            .create(path)
            .map_err(|e| format!("opening the store {}: {e}", path.display()))?;
        let txn = db.begin_write().map_err(|e| e.to_string())?;
        txn.open_table(VOLUMES).map_err(|e| e.to_string())?;
        txn.commit().map_err(|e| e.to_string())?;
        let db = std::sync::Arc::new(db);
        let (tx, rx) = mpsc::channel::<(Change, Reply)>();
        let committer = db.clone();
        let handle = std::thread::Builder::new()
            .name("berth-store".into())
            .spawn(move || commit_loop(&committer, rx))
            .map_err(|e| e.to_string())?;
        Ok(Store {
            db,
            writes: Some(tx),
            committer: Some(handle),
        })
    }

    /// Every stored volume.
    pub fn load(&self) -> Result<Vec<VolumeRecord>, String> {
        let txn = self.db.begin_read().map_err(|e| e.to_string())?;
        let table = txn.open_table(VOLUMES).map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        for entry in table.iter().map_err(|e| e.to_string())? {
            let (key, value) = entry.map_err(|e| e.to_string())?;
            let record: VolumeRecord = serde_json::from_slice(value.value())
                .map_err(|e| format!("volume {} in the store is unreadable: {e}", key.value()))?;
            out.push(record);
        }
        Ok(out)
    }

    /// Stores a record; returns once it is durable.
    pub async fn put(&self, record: VolumeRecord) -> Result<(), String> {
        let bytes = serde_json::to_vec(&record).map_err(|e| format!("encoding volume {}: {e}", record.id))?;
        self.write(Change::Put(record.id, bytes)).await
    }

    /// Removes a record; returns once that is durable.
    pub async fn remove(&self, id: &str) -> Result<(), String> {
        self.write(Change::Remove(id.to_string())).await
    }

    async fn write(&self, change: Change) -> Result<(), String> {
        let (tx, rx) = oneshot::channel();
        self.writes
            .as_ref()
            .ok_or("the store is closed")?
            .send((change, tx))
            .map_err(|_| "the store's committer has stopped".to_string())?;
        rx.await
            .map_err(|_| "the store's committer has stopped".to_string())?
    }
}

fn commit_loop(db: &Database, rx: mpsc::Receiver<(Change, Reply)>) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let result = commit(db, &batch);
        if let Err(e) = &result {
            tracing::error!(error = %e, changes = batch.len(), "store commit failed");
        }
        for (_, reply) in batch {
            let _ = reply.send(result.clone());
        }
    }
}

fn commit(db: &Database, batch: &[(Change, Reply)]) -> Result<(), String> {
    let txn = db.begin_write().map_err(|e| e.to_string())?;
    {
        let mut table = txn.open_table(VOLUMES).map_err(|e| e.to_string())?;
        for (change, _) in batch {
            match change {
                Change::Put(id, bytes) => {
                    table
                        .insert(id.as_str(), bytes.as_slice())
                        .map_err(|e| e.to_string())?;
                }
                Change::Remove(id) => {
                    table.remove(id.as_str()).map_err(|e| e.to_string())?;
                }
            }
        }
    }
    txn.commit().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{VolumeSpec, new_id};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn records_survive_reopening_and_batches_commit_together() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let ids: Vec<String> = (0..50).map(|_| new_id()).collect();
        {
            let store = std::sync::Arc::new(Store::open(&path).unwrap());
            let writes = ids.iter().map(|id| {
                let store = store.clone();
                let mut r = VolumeRecord::new(id.clone(), VolumeSpec::default());
                r.csi_name = Some(format!("name-{id}"));
                tokio::spawn(async move { store.put(r).await })
            });
            for w in writes {
                w.await.unwrap().unwrap();
            }
            store.remove(&ids[0]).await.unwrap();
        }
        let store = Store::open(&path).unwrap();
        let loaded = store.load().unwrap();
        assert_eq!(loaded.len(), 49);
        assert!(
            loaded
                .iter()
                .all(|r| r.csi_name.as_deref() == Some(&format!("name-{}", r.id)))
        );
    }
}
