//! One thread per redb file that owns the database and commits writes in
//! batches: everything waiting goes into one transaction, so under load many
//! changes share one fsync, and each writer is answered only once its change
//! is durable.
//!
//! After a commit fails (a full disk, an I/O error) redb refuses every later
//! transaction until the database is opened again, so the thread drops it and
//! opens it again (crash recovery, as after a restart) before the next job:
//! writes succeed again once the disk does, with no restart. Until a commit
//! succeeds, [`Committer::health`] says why writes fail, for `/readyz`.

use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use redb::{Database, TableDefinition, TableHandle};
use tokio::sync::oneshot;

use crate::StoreError;

/// Most changes committed in one transaction.
const MAX_BATCH: usize = 1024;
/// Under load (the last commit had more than one change), the least time
/// from one commit's start to the next: the writes that arrive meanwhile
/// share its fsync. Idle, a write is committed at once.
const GATHER: Duration = Duration::from_millis(2);

pub type Table = TableDefinition<'static, &'static str, &'static [u8]>;

/// A key and its encoding, made by the writer so the committer only copies bytes.
pub enum Change {
    Put(Table, String, Vec<u8>),
    Remove(Table, String),
}

/// Why a commit failed; kept, and answered to every writer of the batch,
/// while writes fail.
#[derive(Clone, Debug, thiserror::Error)]
pub enum CommitError {
    #[error("opening the store again after a failed write: {0}")]
    Reopen(Arc<redb::DatabaseError>),
    #[error("{0}")]
    Commit(Arc<redb::Error>),
}

type Reply = oneshot::Sender<Result<(), CommitError>>;
type Read = Box<dyn FnOnce(Result<&Database, CommitError>) + Send>;
/// Opens the database again, as it was first opened.
pub type Opener = Box<dyn Fn() -> Result<Database, redb::DatabaseError> + Send>;

enum Job {
    Write(Change, Reply),
    Read(Read),
    /// An empty commit: whether writes succeed again.
    Probe,
}

pub struct Committer {
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Why the last commit failed; `None` once one succeeds.
    failing: Arc<Mutex<Option<CommitError>>>,
}

impl Drop for Committer {
    /// Finishes what is queued, then the thread exits (closing the database).
    fn drop(&mut self) {
        self.jobs.take();
        if let Some(handle) = self.thread.take() {
            let _ = handle.join();
        }
    }
}

impl Committer {
    pub fn start(db: Database, reopen: Opener, thread: &str) -> std::io::Result<Committer> {
        let (tx, rx) = mpsc::channel::<Job>();
        let failing = Arc::new(Mutex::new(None));
        let state = Owner {
            db: Some(db),
            reopen,
            failing: failing.clone(),
        };
        let handle = std::thread::Builder::new()
            .name(thread.into())
            .spawn(move || state.run(rx))?;
        Ok(Committer {
            jobs: Some(tx),
            thread: Some(handle),
            failing,
        })
    }

    fn send(&self, job: Job) -> Result<(), StoreError> {
        self.jobs
            .as_ref()
            .ok_or(StoreError::Closed)?
            .send(job)
            .map_err(|_| StoreError::Closed)
    }

    /// Returns once the change is durable.
    pub async fn write(&self, change: Change) -> Result<(), StoreError> {
        let (tx, rx) = oneshot::channel();
        self.send(Job::Write(change, tx))?;
        rx.await
            .map_err(|_| StoreError::Closed)?
            .map_err(StoreError::Commit)
    }

    /// Returns once every change is durable; sent together, they share commits.
    pub async fn write_all(&self, changes: Vec<Change>) -> Result<(), StoreError> {
        let mut replies = Vec::with_capacity(changes.len());
        for change in changes {
            let (tx, rx) = oneshot::channel();
            self.send(Job::Write(change, tx))?;
            replies.push(rx);
        }
        for rx in replies {
            rx.await
                .map_err(|_| StoreError::Closed)?
                .map_err(StoreError::Commit)?;
        }
        Ok(())
    }

    /// Runs `read` on the database, in turn with the writes (blocking).
    pub fn read<T: Send + 'static>(
        &self,
        read: impl FnOnce(&Database) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.send(read_job(read, move |answer| {
            let _ = tx.send(answer);
        }))?;
        rx.recv().map_err(|_| StoreError::Closed)?
    }

    /// [`Committer::read`] for async callers: the runtime's thread is not
    /// blocked while the read waits its turn behind the writes.
    pub async fn read_async<T: Send + 'static>(
        &self,
        read: impl FnOnce(&Database) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (tx, rx) = oneshot::channel();
        self.send(read_job(read, move |answer| {
            let _ = tx.send(answer);
        }))?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Whether writes succeed: the last commit's error while it failed. A
    /// failing store is probed with an empty commit, so health follows the
    /// disk even while nothing else is written.
    pub fn health(&self) -> Result<(), CommitError> {
        let failing = self.failing.lock().unwrap_or_else(|p| p.into_inner()).clone();
        match failing {
            None => Ok(()),
            Some(why) => {
                let _ = self.send(Job::Probe);
                Err(why)
            }
        }
    }
}

/// A read that hands its answer to `reply`.
fn read_job<T: Send + 'static>(
    read: impl FnOnce(&Database) -> Result<T, StoreError> + Send + 'static,
    reply: impl FnOnce(Result<T, StoreError>) + Send + 'static,
) -> Job {
    Job::Read(Box::new(move |db| {
        reply(db.map_err(StoreError::Commit).and_then(read))
    }))
}

/// The committer thread's side.
struct Owner {
    db: Option<Database>,
    reopen: Opener,
    failing: Arc<Mutex<Option<CommitError>>>,
}

impl Owner {
    fn run(mut self, rx: mpsc::Receiver<Job>) {
        // When the last commit started, and whether it had company: a
        // commit under load waits out the window before the next starts.
        let mut last: Option<(Instant, bool)> = None;
        while let Ok(first) = rx.recv() {
            // Asleep, not waiting on the channel: the writes that come
            // meanwhile do not each wake this thread. A read (its caller
            // blocks) is not held back.
            if let (Some((started, true)), Job::Write(..)) = (last, &first) {
                let wait = (started + GATHER).saturating_duration_since(Instant::now());
                if !wait.is_zero() {
                    std::thread::sleep(wait);
                }
            }
            let mut writes = Vec::new();
            let mut probe = false;
            let mut next = Some(first);
            while let Some(job) = next.take() {
                match job {
                    Job::Write(change, reply) => writes.push((change, reply)),
                    Job::Probe => probe = true,
                    // A read sees every write queued before it.
                    Job::Read(read) => {
                        self.commit(&mut writes, probe);
                        probe = false;
                        let db = self.open();
                        read(db);
                    }
                }
                if writes.len() < MAX_BATCH {
                    next = rx.try_recv().ok();
                }
            }
            if !writes.is_empty() || probe {
                last = Some((Instant::now(), writes.len() > 1));
            }
            self.commit(&mut writes, probe);
        }
    }

    /// The database, opened again first when a failure closed it.
    fn open(&mut self) -> Result<&Database, CommitError> {
        if self.db.is_none() {
            match (self.reopen)() {
                Ok(db) => {
                    tracing::warn!("the store was opened again after a failed write");
                    self.db = Some(db);
                }
                Err(e) => return Err(CommitError::Reopen(Arc::new(e))),
            }
        }
        Ok(self.db.as_ref().expect("opened above"))
    }

    fn commit(&mut self, writes: &mut Vec<(Change, Reply)>, probe: bool) {
        if writes.is_empty() && !probe {
            return;
        }
        let started = std::time::Instant::now();
        let result = self
            .open()
            .and_then(|db| commit(db, writes).map_err(|e| CommitError::Commit(Arc::new(e))));
        berth_metrics::store_commit(writes.len(), started.elapsed());
        let mut failing = self.failing.lock().unwrap_or_else(|p| p.into_inner());
        match &result {
            Ok(()) => {
                if failing.take().is_some() {
                    tracing::warn!("store writes succeed again");
                }
            }
            Err(e) => {
                if failing.is_none() {
                    tracing::error!(error = %e, changes = writes.len(), "commit failed; the store is opened again before the next write");
                }
                *failing = Some(e.clone());
                // redb refuses every transaction after a failed one until reopened.
                self.db = None;
            }
        }
        drop(failing);
        for (_, reply) in writes.drain(..) {
            let _ = reply.send(result.clone());
        }
    }
}

fn commit(db: &Database, batch: &[(Change, Reply)]) -> Result<(), redb::Error> {
    let txn = db.begin_write()?;
    {
        // Changes to one table come in runs: it stays open through each.
        let mut open: Option<(Table, redb::Table<'_, &str, &[u8]>)> = None;
        for (change, _) in batch {
            let (table, key) = match change {
                Change::Put(table, key, _) | Change::Remove(table, key) => (*table, key.as_str()),
            };
            let same = open.as_ref().is_some_and(|(t, _)| t.name() == table.name());
            if !same {
                // The table before closes first: one table is open at a time.
                drop(open.take());
                open = Some((table, txn.open_table(table)?));
            }
            let (_, t) = open.as_mut().expect("opened above");
            match change {
                Change::Put(_, _, bytes) => {
                    t.insert(key, bytes.as_slice())?;
                }
                Change::Remove(..) => {
                    t.remove(key)?;
                }
            }
        }
    }
    txn.commit()?;
    Ok(())
}
