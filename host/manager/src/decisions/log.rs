//! The decision log: every policy decision the manager asks for, handed over
//! without waiting (a full queue drops the entry and counts it) and written
//! to the store in batches by one task, each decision kind a ring of the
//! newest `keep` entries. A crash loses at most the batch in flight: the log
//! is a record of decisions, not a part of any volume's state.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;

use berth_policy::Decision;
use berth_policy::logged::Logged;
use berth_store::Store;

/// Entries waiting for the writer; past this, decisions go unlogged (counted).
const QUEUE: usize = 4096;
/// The most one write to the store carries.
const BATCH: usize = 256;
/// How long the writer waits for a batch to fill once it has an entry.
const LINGER: Duration = Duration::from_millis(100);
/// The most one entry may take, well within a store write (a placement among
/// thousands of nodes goes unlogged rather than stall the store).
pub const MAX_ENTRY_BYTES: usize = 256 << 10;

pub struct DecisionLog {
    tx: Option<mpsc::Sender<Logged>>,
    dropped: Arc<AtomicU64>,
}

impl DecisionLog {
    /// A log keeping `keep` entries of each kind in `store`; none when 0.
    pub fn start(store: Arc<dyn Store>, keep: usize) -> DecisionLog {
        let dropped = Arc::new(AtomicU64::new(0));
        if keep == 0 {
            return DecisionLog { tx: None, dropped };
        }
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(write_loop(store, keep, rx, dropped.clone()));
        DecisionLog {
            tx: Some(tx),
            dropped,
        }
    }

    /// Hands `entry` to the writer, never waiting.
    pub fn record(&self, entry: Logged) {
        if let Some(tx) = &self.tx
            && tx.try_send(entry).is_err()
        {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Entries not logged: the queue was full, the entry too large, or the store failed.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// A key that sorts in time order and is this writer's own: the time, a
/// random tag of this process (two leaders in one millisecond), a counter.
fn keys() -> impl FnMut(u64) -> String {
    // new_id's last characters are random.
    let id = berth_model::new_id();
    let tag = id[id.len() - 6..].to_string();
    let mut n = 0u64;
    move |at_ms| {
        n += 1;
        format!("{at_ms:013}-{tag}-{n:010}")
    }
}

async fn write_loop(
    store: Arc<dyn Store>,
    keep: usize,
    mut rx: mpsc::Receiver<Logged>,
    dropped: Arc<AtomicU64>,
) {
    let mut key = keys();
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        let Some(first) = rx.recv().await else {
            return;
        };
        batch.push(first);
        let linger = tokio::time::sleep(LINGER);
        tokio::pin!(linger);
        while batch.len() < BATCH {
            tokio::select! {
                entry = rx.recv() => match entry {
                    Some(e) => batch.push(e),
                    None => break,
                },
                () = &mut linger => break,
            }
        }
        let mut batches = Vec::new();
        let mut n = 0u64;
        for decision in Decision::ALL {
            let mut entries = Vec::new();
            for entry in batch.iter().filter(|e| e.input.decision() == decision) {
                match serde_json::to_vec(entry) {
                    Ok(json) if json.len() <= MAX_ENTRY_BYTES => entries.push((key(entry.at_ms), json)),
                    _ => {
                        dropped.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            n += entries.len() as u64;
            if !entries.is_empty() {
                batches.push(berth_store::LoggedBatch {
                    kind: decision.interface().to_string(),
                    entries,
                });
            }
        }
        if !batches.is_empty()
            && let Err(error) = store.append_decisions(batches, keep).await
        {
            dropped.fetch_add(n, Ordering::Relaxed);
            tracing::warn!(%error, "decisions not logged");
        }
        batch.clear();
    }
}

/// Up to `limit` logged decisions of `decision` with keys after `after`,
/// oldest first: a page of the log. Entries that do not read are left out.
pub async fn read(
    store: &dyn Store,
    decision: Decision,
    after: &str,
    limit: usize,
) -> Result<Vec<(String, Logged)>, berth_store::StoreError> {
    let page = store.read_decisions(decision.interface(), after, limit).await?;
    Ok(page
        .into_iter()
        .filter_map(|(key, json)| match serde_json::from_slice::<Logged>(&json) {
            Ok(entry) => Some((key, entry)),
            Err(error) => {
                // An entry an older or newer release wrote otherwise: skipped, not fatal.
                tracing::debug!(%key, %error, "a logged decision does not read");
                None
            }
        })
        .collect())
}
