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

/// From this file size on, every commit also records redb's allocator
/// state (its quick repair): after a crash, the next open reads it instead
/// of walking and checksumming the whole file (3–8 s for a million
/// volumes, 2.3 GB), at the cost of a second sync a commit (0.55 → 1.7 ms
/// at that size). Below it, that walk takes less than the syncs would.
pub const QUICK_REPAIR_FROM: u64 = 256 << 20;

/// Whether commits to the file at `path` record the allocator state.
pub fn quick_repair(path: &std::path::Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.len() >= QUICK_REPAIR_FROM)
}

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
    #[error("opening the store {} again after a failed write: {source}", path.display())]
    Reopen {
        path: Arc<std::path::PathBuf>,
        source: Arc<redb::DatabaseError>,
    },
    /// The file is named: the disk under it is what an operator looks at.
    #[error("writing the store {}: {source}", path.display())]
    Commit {
        path: Arc<std::path::PathBuf>,
        source: Arc<redb::Error>,
    },
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

/// How a caller waits for its answer from the committer's thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Waits {
    /// On the runtime, as any future: the thread's answer wakes it.
    #[default]
    Async,
    /// On a thread of tokio's blocking pool. Tokio counts that as work in
    /// progress, so a runtime on a paused clock (`tokio::time::pause`)
    /// does not move its clock to the next timer while a commit is under
    /// way: the paused-time tests of a server with in-process nodes. A
    /// thread per waiting writer, so not for production.
    InBlockingPool,
}

pub struct Committer {
    jobs: Option<mpsc::Sender<Job>>,
    waits: Waits,
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
    /// Commits to `db`, the file at `path` (opened again with `reopen`), on
    /// a thread named `thread`.
    pub fn start(
        db: Database,
        path: &std::path::Path,
        reopen: Opener,
        thread: &str,
    ) -> std::io::Result<Committer> {
        Committer::start_waiting(db, path, reopen, thread, Waits::Async)
    }

    /// [`Committer::start`], its callers waiting as `waits` says.
    pub fn start_waiting(
        db: Database,
        path: &std::path::Path,
        reopen: Opener,
        thread: &str,
        waits: Waits,
    ) -> std::io::Result<Committer> {
        let (tx, rx) = mpsc::channel::<Job>();
        let failing = Arc::new(Mutex::new(None));
        let state = Owner {
            db: Some(db),
            path: Arc::new(path.to_path_buf()),
            reopen,
            failing: failing.clone(),
        };
        let handle = std::thread::Builder::new()
            .name(thread.into())
            .spawn(move || state.run(rx))?;
        Ok(Committer {
            jobs: Some(tx),
            waits,
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

    /// The thread's answer on `rx`, waited for as `self.waits` says.
    async fn answer<T: Send + 'static>(&self, rx: oneshot::Receiver<T>) -> Result<T, StoreError> {
        match self.waits {
            Waits::Async => rx.await.map_err(|_| StoreError::Closed),
            Waits::InBlockingPool => tokio::task::spawn_blocking(move || rx.blocking_recv())
                .await
                .map_err(|_| StoreError::Closed)?
                .map_err(|_| StoreError::Closed),
        }
    }

    /// Returns once the change is durable.
    pub async fn write(&self, change: Change) -> Result<(), StoreError> {
        let (tx, rx) = oneshot::channel();
        self.send(Job::Write(change, tx))?;
        self.answer(rx).await?.map_err(StoreError::Commit)
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
            self.answer(rx).await?.map_err(StoreError::Commit)?;
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
        self.answer(rx).await?
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
    /// Shared with the errors that name it (a clone per commit is a count).
    path: Arc<std::path::PathBuf>,
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
                Err(e) => {
                    return Err(CommitError::Reopen {
                        path: self.path.clone(),
                        source: Arc::new(e),
                    });
                }
            }
        }
        Ok(self.db.as_ref().expect("opened above"))
    }

    fn commit(&mut self, writes: &mut Vec<(Change, Reply)>, probe: bool) {
        if writes.is_empty() && !probe {
            return;
        }
        let started = std::time::Instant::now();
        let quick = quick_repair(&self.path);
        let path = self.path.clone();
        let result = self.open().and_then(|db| {
            commit(db, writes, quick).map_err(|e| CommitError::Commit {
                path,
                source: Arc::new(e),
            })
        });
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

fn commit(db: &Database, batch: &[(Change, Reply)], quick_repair: bool) -> Result<(), redb::Error> {
    let mut txn = db.begin_write()?;
    txn.set_quick_repair(quick_repair);
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

#[cfg(test)]
mod tests {
    use super::*;
    use redb::{ReadableDatabase, StorageBackend};

    /// Bytes that outlive the database written to them, as a file outlives
    /// a process killed without closing it.
    #[derive(Clone, Debug, Default)]
    struct Disk(Arc<Mutex<Vec<u8>>>);

    impl StorageBackend for Disk {
        fn len(&self) -> Result<u64, std::io::Error> {
            Ok(self.0.lock().unwrap().len() as u64)
        }
        fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
            let start = offset as usize;
            out.copy_from_slice(&self.0.lock().unwrap()[start..start + out.len()]);
            Ok(())
        }
        fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
            self.0.lock().unwrap().resize(len as usize, 0);
            Ok(())
        }
        fn sync_data(&self) -> Result<(), std::io::Error> {
            Ok(())
        }
        fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
            let start = offset as usize;
            self.0.lock().unwrap()[start..start + data.len()].copy_from_slice(data);
            Ok(())
        }
    }

    const T: Table = TableDefinition::new("t");

    /// Commits one change, "crashes", and opens again: whether that open
    /// walked the file to repair it, and whether the change is there.
    fn crash_after_commit(quick_repair: bool) -> (bool, bool) {
        let disk = Disk::default();
        let db = redb::Builder::new().create_with_backend(disk.clone()).unwrap();
        let (reply, _) = oneshot::channel();
        commit(&db, &[(Change::Put(T, "a".into(), vec![1]), reply)], quick_repair).unwrap();
        // Never closed: nothing records that the file was left in order.
        std::mem::forget(db);
        let repaired = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = repaired.clone();
        let db = redb::Builder::new()
            .set_repair_callback(move |_| seen.store(true, std::sync::atomic::Ordering::SeqCst))
            .create_with_backend(disk)
            .unwrap();
        let kept = db
            .begin_read()
            .unwrap()
            .open_table(T)
            .unwrap()
            .get("a")
            .unwrap()
            .is_some();
        (repaired.load(std::sync::atomic::Ordering::SeqCst), kept)
    }

    #[test]
    fn a_large_stores_commits_spare_the_next_open_a_repair_after_a_crash() {
        assert_eq!(
            crash_after_commit(false),
            (true, true),
            "without: the open walks the file"
        );
        assert_eq!(
            crash_after_commit(true),
            (false, true),
            "with: it reads the recorded state"
        );
    }

    #[test]
    fn commits_record_the_allocator_state_from_the_threshold_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        assert!(!quick_repair(&path), "no file");
        let file = std::fs::File::create(&path).unwrap();
        file.set_len(QUICK_REPAIR_FROM - 1).unwrap();
        assert!(!quick_repair(&path));
        // Sparse: no disk written for the test.
        file.set_len(QUICK_REPAIR_FROM).unwrap();
        assert!(quick_repair(&path));
    }

    /// A disk whose every sync takes real time, as a loaded machine's does.
    #[derive(Debug)]
    struct Slow(Disk);

    impl StorageBackend for Slow {
        fn len(&self) -> Result<u64, std::io::Error> {
            self.0.len()
        }
        fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
            self.0.read(offset, out)
        }
        fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
            self.0.set_len(len)
        }
        fn sync_data(&self) -> Result<(), std::io::Error> {
            std::thread::sleep(Duration::from_millis(50));
            Ok(())
        }
        fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
            self.0.write(offset, data)
        }
    }

    /// How far a paused clock moved while one write was committed, with a
    /// timer an hour away the only other thing the runtime waits for.
    async fn clock_moved_during_a_write(waits: Waits) -> Duration {
        let dir = tempfile::tempdir().unwrap();
        let db = redb::Builder::new()
            .create_with_backend(Slow(Disk::default()))
            .unwrap();
        let reopen: Opener = Box::new(|| unreachable!("no commit fails here"));
        let committer =
            Committer::start_waiting(db, &dir.path().join("s.redb"), reopen, "test", waits).unwrap();
        let _timer = tokio::spawn(tokio::time::sleep(Duration::from_secs(3600)));
        let started = tokio::time::Instant::now();
        committer
            .write(Change::Put(T, "a".into(), vec![1]))
            .await
            .unwrap();
        started.elapsed()
    }

    #[tokio::test(start_paused = true)]
    async fn a_paused_clock_moves_on_during_a_commit_unless_writers_wait_in_the_blocking_pool() {
        assert_eq!(
            clock_moved_during_a_write(Waits::Async).await,
            Duration::from_secs(3600),
            "waited on the runtime: the clock jumps to the next timer"
        );
        assert_eq!(
            clock_moved_during_a_write(Waits::InBlockingPool).await,
            Duration::ZERO,
            "waited in the blocking pool: it stays put"
        );
    }
}
