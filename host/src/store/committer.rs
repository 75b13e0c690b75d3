//! One thread per redb file that commits writes in batches: everything
//! waiting goes into one transaction, so under load many changes share one
//! fsync, and each writer is answered only once its change is durable.

use std::sync::{Arc, mpsc};

use redb::{Database, TableDefinition};
use tokio::sync::oneshot;

use super::StoreError;

/// Most changes committed in one transaction.
const MAX_BATCH: usize = 1024;

/// A key and its encoding, made by the writer so the committer only copies bytes.
pub(crate) enum Change {
    Put(String, Vec<u8>),
    Remove(String),
}

type Reply = oneshot::Sender<Result<(), String>>;
pub(crate) type Table = TableDefinition<'static, &'static str, &'static [u8]>;

pub(crate) struct Committer {
    writes: Option<mpsc::Sender<(Change, Reply)>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Committer {
    /// Finishes what is queued, then the thread exits.
    fn drop(&mut self) {
        self.writes.take();
        if let Some(handle) = self.thread.take() {
            let _ = handle.join();
        }
    }
}

impl Committer {
    pub fn start(db: Arc<Database>, table: Table, thread: &str) -> std::io::Result<Committer> {
        let (tx, rx) = mpsc::channel::<(Change, Reply)>();
        let handle = std::thread::Builder::new()
            .name(thread.into())
            .spawn(move || commit_loop(&db, table, rx))?;
        Ok(Committer {
            writes: Some(tx),
            thread: Some(handle),
        })
    }

    /// Returns once the change is durable.
    pub async fn write(&self, change: Change) -> Result<(), StoreError> {
        let (tx, rx) = oneshot::channel();
        self.writes
            .as_ref()
            .ok_or(StoreError::Closed)?
            .send((change, tx))
            .map_err(|_| StoreError::Closed)?;
        rx.await
            .map_err(|_| StoreError::Closed)?
            .map_err(StoreError::Failed)
    }
}

fn commit_loop(db: &Database, table: Table, rx: mpsc::Receiver<(Change, Reply)>) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let started = std::time::Instant::now();
        let result = commit(db, table, &batch).map_err(|e| e.to_string());
        crate::metrics::store_commit(batch.len(), started.elapsed());
        if let Err(e) = &result {
            tracing::error!(error = %e, changes = batch.len(), "commit failed");
        }
        for (_, reply) in batch {
            let _ = reply.send(result.clone());
        }
    }
}

fn commit(db: &Database, table: Table, batch: &[(Change, Reply)]) -> Result<(), redb::Error> {
    let txn = db.begin_write()?;
    {
        let mut table = txn.open_table(table)?;
        for (change, _) in batch {
            match change {
                Change::Put(key, bytes) => {
                    table.insert(key.as_str(), bytes.as_slice())?;
                }
                Change::Remove(key) => {
                    table.remove(key.as_str())?;
                }
            }
        }
    }
    txn.commit()?;
    Ok(())
}
