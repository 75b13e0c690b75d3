//! Reading every volume at start, decoded on several threads while the
//! caller takes them in: the start of a server with a million volumes is
//! spent decoding JSON, which one thread did alone.
//!
//! One thread reads the raw records in chunks (inside the committer's read,
//! in turn with writes), decoders decode whole chunks, and the caller gets
//! each record as it comes, in no particular order. Every queue between them
//! holds a few chunks: the raw store is never all in memory at once, and
//! neither is a list of every decoded record.

use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};

use redb::{AccessGuard, Database, ReadableDatabase, TableDefinition};

use crate::committer::Committer;
use crate::{StoreError, decode};
use berth_model::VolumeRecord;

/// Records in a chunk: enough that handing one over costs little beside
/// decoding it, few enough that the queues stay small (about 1.5 MiB of
/// raw records a chunk).
const CHUNK: usize = 1024;
/// Chunks waiting in each queue.
const QUEUED: usize = 2;
/// Decoding threads at most, whatever the machine has.
const DECODERS_MAX: usize = 4;

/// Records as redb holds them: its pages, shared, not copied.
type Raw = Vec<(
    AccessGuard<'static, &'static str>,
    AccessGuard<'static, &'static [u8]>,
)>;
type Decoded<T> = Result<Vec<T>, StoreError>;

/// Calls `each` with every record of `table`, decoded; the first record
/// that does not decode (or a failed read) is the error, and `each` is not
/// called again after it.
pub(crate) fn each_volume(
    committer: &Arc<Committer>,
    table: TableDefinition<'static, &'static str, &'static [u8]>,
    each: &mut dyn FnMut(VolumeRecord),
) -> Result<(), StoreError> {
    each_read(committer, table, decode, each)
}

/// Calls `each` with every record of `table` as `read` makes it of its
/// id and stored bytes (on the decoding threads), as [`each_volume`] does.
pub(crate) fn each_read<T: Send>(
    committer: &Arc<Committer>,
    table: TableDefinition<'static, &'static str, &'static [u8]>,
    read: fn(&str, &[u8]) -> Result<T, StoreError>,
    each: &mut dyn FnMut(T),
) -> Result<(), StoreError> {
    let decoders = std::thread::available_parallelism().map_or(1, |n| n.get().clamp(1, DECODERS_MAX));
    let (raw_tx, raw_rx) = sync_channel::<Raw>(QUEUED);
    let raw_rx = Arc::new(Mutex::new(raw_rx));
    let (decoded_tx, decoded_rx) = sync_channel::<Decoded<T>>(QUEUED);
    std::thread::scope(|s| {
        let reader = {
            let committer = committer.clone();
            s.spawn(move || committer.read(move |db| read_chunks(db, table, &raw_tx)))
        };
        for _ in 0..decoders {
            let raw_rx = raw_rx.clone();
            let decoded_tx = decoded_tx.clone();
            s.spawn(move || decode_chunks(&raw_rx, &decoded_tx, read));
        }
        // Only the decoders hold these: once they stop, so does the reader.
        drop(raw_rx);
        drop(decoded_tx);
        let taken = take(&decoded_rx, each);
        // Stops the decoders (their sends fail), and with them the reader.
        drop(decoded_rx);
        let read = reader.join().unwrap_or(Err(StoreError::Closed));
        // A failed decode is the first error; a reader stopped by it is not.
        taken.and(read)
    })
}

fn take<T>(decoded: &Receiver<Decoded<T>>, each: &mut dyn FnMut(T)) -> Result<(), StoreError> {
    for chunk in decoded {
        chunk?.into_iter().for_each(&mut *each);
    }
    Ok(())
}

fn read_chunks(
    db: &Database,
    table: TableDefinition<'static, &'static str, &'static [u8]>,
    raw: &SyncSender<Raw>,
) -> Result<(), StoreError> {
    let txn = db.begin_read().map_err(crate::failed)?;
    let table = match txn.open_table(table) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
        Err(e) => return Err(crate::failed(e)),
    };
    let mut chunk = Vec::with_capacity(CHUNK);
    // A range of a read-only table holds its pages itself: its entries
    // outlive the table, and are sent as they are.
    for entry in table.range::<&str>(..).map_err(crate::failed)? {
        let (key, value) = entry.map_err(crate::failed)?;
        chunk.push((key, value));
        if chunk.len() == CHUNK
            && raw
                .send(std::mem::replace(&mut chunk, Vec::with_capacity(CHUNK)))
                .is_err()
        {
            // Nobody decodes any more: the caller stopped at an error.
            return Ok(());
        }
    }
    if !chunk.is_empty() {
        let _ = raw.send(chunk);
    }
    Ok(())
}

fn decode_chunks<T>(
    raw: &Mutex<Receiver<Raw>>,
    decoded: &SyncSender<Decoded<T>>,
    read: fn(&str, &[u8]) -> Result<T, StoreError>,
) {
    loop {
        let next = raw.lock().unwrap_or_else(|p| p.into_inner()).recv();
        let Ok(chunk) = next else {
            return;
        };
        let records = chunk
            .iter()
            .map(|(id, bytes)| read(id.value(), bytes.value()))
            .collect();
        if decoded.send(records).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{RedbStore, Store};
    use berth_model::{VolumeSpec, new_id};

    const VOLUMES: TableDefinition<&str, &[u8]> = TableDefinition::new("volumes");

    #[tokio::test]
    async fn every_record_comes_once_and_a_bad_one_stops_the_load_with_its_id() {
        let dir = tempfile::tempdir().unwrap();
        let store = RedbStore::open(&dir.path().join("state.redb")).unwrap();
        let mut empty = 0;
        store.load_each(&mut |_| empty += 1).unwrap();
        assert_eq!(
            (empty, store.volume_count().unwrap()),
            (0, 0),
            "no volumes table yet"
        );

        // More than two chunks, the last one short.
        let n = CHUNK * 2 + 7;
        let mut ids = Vec::new();
        for i in 0..n {
            let r = berth_model::VolumeRecord::new(
                new_id(),
                VolumeSpec {
                    name: format!("v{i}"),
                    ..Default::default()
                },
            );
            store.put(&r).await.unwrap();
            ids.push(r.id);
        }
        let mut seen = Vec::new();
        store.load_each(&mut |r| seen.push(r.id)).unwrap();
        seen.sort();
        ids.sort();
        assert_eq!(seen, ids);
        assert_eq!(store.volume_count().unwrap(), n as u64);
        let mut keyed = Vec::new();
        store
            .load_keyed(&mut |loaded| match loaded {
                crate::Loaded::Stored(v) => keyed.push(v.keys.id),
                crate::Loaded::Record(_) => panic!("the embedded store hands its records over as stored"),
            })
            .unwrap();
        keyed.sort();
        assert_eq!(keyed, ids);

        // A record that does not decode, in the middle of the table.
        let bad = ids[CHUNK + 3].clone();
        let key = bad.clone();
        store
            .committer()
            .read(move |db| {
                let txn = db.begin_write().unwrap();
                txn.open_table(VOLUMES)
                    .unwrap()
                    .insert(key.as_str(), b"{not json".as_slice())
                    .unwrap();
                txn.commit().unwrap();
                Ok(())
            })
            .unwrap();
        let mut taken = 0;
        match store.load_each(&mut |_| taken += 1) {
            Err(StoreError::Unreadable { id, .. }) => assert_eq!(id, bad),
            other => panic!("expected the bad record named, got {other:?}"),
        }
        assert!(taken < n, "the load stopped at the bad record");
        // And so does a load that reads the records' keys alone.
        match store.load_keyed(&mut |_| {}) {
            Err(StoreError::Unreadable { id, .. }) => assert_eq!(id, bad),
            other => panic!("expected the bad record named, got {:?}", other.err()),
        }
    }
}
