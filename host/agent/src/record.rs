//! The agent's durable record of what it holds on its node: for each volume
//! (by Berth id), the plugin, the plugin's volume id, and how far it is. It is
//! written before a step's outcome is reported, so a restarted agent neither
//! publishes again nor forgets what it must tear down. Secrets are never in it.
//!
//! `berth agent` keeps it in a file of its own. An in-process `[[node]]` of a
//! server on the embedded store keeps it in a table of the store's file, its
//! writes in the store's commits: one file, one fsync stream for the process.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::{Database, ReadableDatabase, TableDefinition};
use serde::{Deserialize, Serialize};

use berth_store::{Change, Committer, StoreError, private_dir, private_file};

const HELD: TableDefinition<&str, &[u8]> = TableDefinition::new("held");
/// In the server's store: every in-process node's volumes, keyed `NODE/ID`
/// (both plain names, so no key of one node starts another's).
const NODES_HELD: TableDefinition<&str, &[u8]> = TableDefinition::new("node-held");
/// The record's page cache: it is read once at start and written after;
/// what the node holds is kept in memory by the agent.
const CACHE_BYTES: usize = 2 << 20;
/// A file shorter than this cannot hold redb's header and a first commit.
const UNFINISHED_BELOW: u64 = 4096;

pub use berth_model::NodeLevel as Level;

/// One volume the node holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    /// Shared: every volume of a node names one of a few plugins.
    pub plugin: berth_model::Interned,
    pub volume_id: String,
    pub level: Level,
    /// The plugin stages: the staging path is in use below `Published`.
    pub staged: bool,
}

/// Where a node's record is kept.
#[derive(Clone)]
pub enum RecordPlace {
    /// A redb file of its own (`berth agent`; a `[[node]]` of a server on etcd).
    File(PathBuf),
    /// The `node-held` table of the server's embedded store, written by the
    /// store's committer. A record `file` an earlier release kept for the
    /// node is moved in when the record opens.
    Store {
        committer: Arc<Committer>,
        store: PathBuf,
        node: String,
        file: PathBuf,
    },
}

impl RecordPlace {
    /// Where it is, for people.
    pub fn describe(&self) -> String {
        match self {
            RecordPlace::File(path) => path.display().to_string(),
            RecordPlace::Store { store, node, .. } => {
                format!("{} (table node-held, node {node})", store.display())
            }
        }
    }
}

impl std::fmt::Debug for RecordPlace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

pub struct NodeRecord {
    committer: Arc<Committer>,
    table: berth_store::Table,
    /// What each key starts with: `NODE/` in the store's shared table.
    prefix: String,
}

fn open_error(path: &Path, e: impl std::fmt::Display) -> StoreError {
    StoreError::Open {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

impl NodeRecord {
    /// Opens the record at `place`; `true` with it when it held nothing
    /// before (a new node, or a record lost: the caller checks the mounts).
    pub async fn open_at(place: &RecordPlace) -> Result<(NodeRecord, bool), StoreError> {
        match place {
            RecordPlace::File(path) => {
                let new = !path.exists();
                Ok((NodeRecord::open(path)?, new))
            }
            RecordPlace::Store {
                committer,
                node,
                file,
                ..
            } => {
                let record = NodeRecord {
                    committer: committer.clone(),
                    table: NODES_HELD,
                    prefix: format!("{node}/"),
                };
                let moved = match file.exists() {
                    true => record.move_in(file).await?,
                    false => false,
                };
                let new = !moved && !record.holds_any()?;
                Ok((record, new))
            }
        }
    }

    /// Copies what a record file of an earlier release holds into this
    /// record, durably, then removes the file. Killed between the two, it
    /// is copied again at the next start: the same entries, nothing lost.
    async fn move_in(&self, file: &Path) -> Result<bool, StoreError> {
        let old = NodeRecord::open(file)?.load().await?;
        let changes = old
            .iter()
            .map(|(id, held)| self.change(id, held))
            .collect::<Result<Vec<_>, _>>()?;
        self.committer.write_all(changes).await?;
        std::fs::remove_file(file).map_err(|e| open_error(file, e))?;
        tracing::info!(file = %file.display(), volumes = old.len(), "the node record was moved into the store");
        Ok(true)
    }

    pub fn open(path: &Path) -> Result<NodeRecord, StoreError> {
        if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            private_dir(dir).map_err(|e| open_error(path, e))?;
        }
        if !path.exists() {
            // Made beside and renamed in: a kill meanwhile leaves no file
            // here that is not a finished record.
            berth_store::create_beside(path, |temporary| {
                let db = redb::Builder::new()
                    .create(temporary)
                    .map_err(std::io::Error::other)?;
                let txn = db.begin_write().map_err(std::io::Error::other)?;
                txn.open_table(HELD).map_err(std::io::Error::other)?;
                txn.commit().map_err(std::io::Error::other)
            })
            .map_err(|e| open_error(path, e))?;
        }
        private_file(path).map_err(|e| open_error(path, e))?;
        let create = || redb::Builder::new().set_cache_size(CACHE_BYTES).create(path);
        let db = match create() {
            Ok(db) => db,
            // Killed while the file was being made: it never held a record.
            Err(e) if std::fs::metadata(path).is_ok_and(|m| m.len() < UNFINISHED_BELOW) => {
                tracing::warn!(path = %path.display(), error = %e, "the node record was never finished; starting it again");
                std::fs::remove_file(path).map_err(|e| open_error(path, e))?;
                private_file(path).map_err(|e| open_error(path, e))?;
                create().map_err(|e| open_error(path, e))?
            }
            Err(e) => return Err(open_error(path, e)),
        };
        let txn = db.begin_write().map_err(|e| open_error(path, e))?;
        txn.open_table(HELD).map_err(|e| open_error(path, e))?;
        txn.commit().map_err(|e| open_error(path, e))?;
        let reopen_path = path.to_path_buf();
        let reopen = Box::new(move || {
            redb::Builder::new()
                .set_cache_size(CACHE_BYTES)
                .create(&reopen_path)
        });
        let committer =
            Committer::start(db, path, reopen, "berth-agent-record").map_err(|e| open_error(path, e))?;
        Ok(NodeRecord {
            committer: Arc::new(committer),
            table: HELD,
            prefix: String::new(),
        })
    }

    /// Whether the record can write now (for `/readyz`).
    pub fn health(&self) -> Result<(), berth_store::CommitError> {
        self.committer.health()
    }

    /// Everything held, by Berth id.
    pub async fn load(&self) -> Result<BTreeMap<String, Held>, StoreError> {
        let (table, prefix) = (self.table, self.prefix.clone());
        // Not on the caller's thread: a server's `[[node]]` agents start
        // beside its API, and a node of a million volumes takes seconds.
        self.committer
            .read_async(move |db| load(db, table, &prefix))
            .await
    }

    /// Whether anything is held, read without loading it all (a node of
    /// 100,000 volumes is loaded once, by the converger).
    fn holds_any(&self) -> Result<bool, StoreError> {
        let (table, prefix) = (self.table, self.prefix.clone());
        self.committer.read(move |db| {
            let mut any = false;
            scan(db, table, &prefix, |_, _| {
                any = true;
                Ok(false)
            })?;
            Ok(any)
        })
    }

    /// Records `held`, or forgets the volume when it is absent; returns once durable.
    pub async fn put(&self, berth_id: &str, held: &Held) -> Result<(), StoreError> {
        self.committer.write(self.change(berth_id, held)?).await
    }

    fn change(&self, berth_id: &str, held: &Held) -> Result<Change, StoreError> {
        let key = format!("{}{berth_id}", self.prefix);
        if held.level == Level::Absent {
            return Ok(Change::Remove(self.table, key));
        }
        let bytes = serde_json::to_vec(held).map_err(|e| StoreError::Encode {
            id: berth_id.to_string(),
            message: e.to_string(),
        })?;
        Ok(Change::Put(self.table, key, bytes))
    }
}

/// Everything held in `table` under `prefix`, by Berth id.
fn load(
    db: &Database,
    table: berth_store::Table,
    prefix: &str,
) -> Result<BTreeMap<String, Held>, StoreError> {
    let mut out = BTreeMap::new();
    scan(db, table, prefix, |id, bytes| {
        let held = serde_json::from_slice(bytes).map_err(|e| StoreError::Unreadable {
            id: id.to_string(),
            message: e.to_string(),
        })?;
        out.insert(id.to_string(), held);
        Ok(true)
    })?;
    Ok(out)
}

/// Hands `each` every entry of `table` under `prefix` (its Berth id and
/// bytes), in key order, for as long as it answers `true`.
fn scan(
    db: &Database,
    table: berth_store::Table,
    prefix: &str,
    mut each: impl FnMut(&str, &[u8]) -> Result<bool, StoreError>,
) -> Result<(), StoreError> {
    let failed = |e: redb::Error| StoreError::Failed(e.to_string());
    let txn = db.begin_read().map_err(|e| failed(e.into()))?;
    let table = match txn.open_table(table) {
        Ok(t) => t,
        // The store's table is made by the first write to it.
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
        Err(e) => return Err(failed(e.into())),
    };
    for entry in table.range(prefix..).map_err(|e| failed(e.into()))? {
        let (key, value) = entry.map_err(|e| failed(e.into()))?;
        let Some(id) = key.value().strip_prefix(prefix) else {
            break;
        };
        if !each(id, value.value())? {
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_record_killed_while_it_was_made_leaves_nothing_in_its_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.redb");
        // What a kill part-way through making the record leaves: a temporary
        // beside it, larger than any header, that is not a database.
        std::fs::write(dir.path().join("agent.redb.new"), vec![7u8; 64 << 10]).unwrap();
        assert!(!path.exists());
        let record = NodeRecord::open(&path).unwrap();
        assert!(record.load().await.unwrap().is_empty());
        drop(record);
        assert!(!dir.path().join("agent.redb.new").exists());
        NodeRecord::open(&path).expect("a finished record opens again");
    }

    #[tokio::test]
    async fn what_is_held_survives_reopening_and_absent_is_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent/record.redb");
        let held = |level| Held {
            plugin: "sample".into(),
            volume_id: "vol-1".into(),
            level,
            staged: true,
        };
        {
            let r = NodeRecord::open(&path).unwrap();
            r.put("a", &held(Level::Published)).await.unwrap();
            r.put("b", &held(Level::Staged)).await.unwrap();
            r.put("b", &held(Level::Absent)).await.unwrap();
        }
        let r = NodeRecord::open(&path).unwrap();
        let loaded = r.load().await.unwrap();
        assert_eq!(loaded.len(), 1);
        assert_eq!(loaded["a"], held(Level::Published));
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    #[tokio::test]
    async fn a_record_file_killed_while_being_made_is_started_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("record.redb");
        std::fs::write(&path, b"red").unwrap();
        let r = NodeRecord::open(&path).expect("an unfinished file is started again");
        assert!(r.load().await.unwrap().is_empty());
        drop(r);
        let big = dir.path().join("other.redb");
        std::fs::write(&big, vec![7u8; 8192]).unwrap();
        assert!(
            NodeRecord::open(&big).is_err(),
            "a file that may hold records is never replaced"
        );
    }

    /// A held volume as the previous release wrote it (the plugin's name a
    /// plain string); it reads, and is written again, byte for byte.
    #[test]
    fn a_held_volume_written_by_the_previous_release_reads_and_writes_the_same() {
        let before = br#"{"plugin":"hostpath","volume_id":"vol-7","level":"published","staged":true}"#;
        let read: Held = serde_json::from_slice(before).unwrap();
        assert_eq!(read.plugin, "hostpath");
        assert_eq!(read.level, Level::Published);
        assert_eq!(serde_json::to_vec(&read).unwrap(), before.to_vec());
    }

    fn held(level: Level) -> Held {
        Held {
            plugin: "sample".into(),
            volume_id: "vol-1".into(),
            level,
            staged: true,
        }
    }

    fn in_store(store: &berth_store::RedbStore, node: &str, dir: &Path) -> RecordPlace {
        RecordPlace::Store {
            committer: store.committer(),
            store: dir.join("berth.redb"),
            node: node.into(),
            file: dir.join(node).join("agent.redb"),
        }
    }

    #[tokio::test]
    async fn nodes_in_the_store_keep_their_own_volumes_and_a_file_of_before_is_moved_in() {
        let dir = tempfile::tempdir().unwrap();
        // As releases before kept an in-process node's record: a file of its own.
        {
            let old = NodeRecord::open(&dir.path().join("a/agent.redb")).unwrap();
            old.put("v1", &held(Level::Published)).await.unwrap();
            old.put("v2", &held(Level::Staged)).await.unwrap();
        }
        let store = berth_store::RedbStore::open(&dir.path().join("berth.redb")).unwrap();
        let (a, new) = NodeRecord::open_at(&in_store(&store, "a", dir.path()))
            .await
            .unwrap();
        assert!(!new, "what the file held is the record");
        assert!(
            !dir.path().join("a/agent.redb").exists(),
            "the file is removed once moved"
        );
        // A node whose name begins another's sees none of the other's keys.
        let (ab, new) = NodeRecord::open_at(&in_store(&store, "ab", dir.path()))
            .await
            .unwrap();
        assert!(new);
        ab.put("v3", &held(Level::Published)).await.unwrap();
        a.put("v2", &held(Level::Absent)).await.unwrap();
        drop((a, ab, store));

        let store = berth_store::RedbStore::open(&dir.path().join("berth.redb")).unwrap();
        let (a, new) = NodeRecord::open_at(&in_store(&store, "a", dir.path()))
            .await
            .unwrap();
        assert!(!new);
        let loaded = a.load().await.unwrap();
        assert_eq!(loaded.keys().collect::<Vec<_>>(), ["v1"]);
        assert_eq!(loaded["v1"], held(Level::Published));
        let (ab, _) = NodeRecord::open_at(&in_store(&store, "ab", dir.path()))
            .await
            .unwrap();
        assert_eq!(ab.load().await.unwrap().keys().collect::<Vec<_>>(), ["v3"]);
        let (_, new) = NodeRecord::open_at(&in_store(&store, "b", dir.path()))
            .await
            .unwrap();
        assert!(new, "a node that never held anything starts new");
    }

    #[tokio::test]
    async fn a_file_moved_in_before_a_kill_removed_it_is_moved_again_without_loss() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a/agent.redb");
        {
            let old = NodeRecord::open(&file).unwrap();
            old.put("v1", &held(Level::Published)).await.unwrap();
        }
        let copy = dir.path().join("copy.redb");
        std::fs::copy(&file, &copy).unwrap();
        let store = berth_store::RedbStore::open(&dir.path().join("berth.redb")).unwrap();
        NodeRecord::open_at(&in_store(&store, "a", dir.path()))
            .await
            .unwrap();
        // Killed after the copy was durable, before the file went.
        std::fs::rename(&copy, &file).unwrap();
        let (a, new) = NodeRecord::open_at(&in_store(&store, "a", dir.path()))
            .await
            .unwrap();
        assert!(!new && !file.exists());
        assert_eq!(a.load().await.unwrap()["v1"], held(Level::Published));
    }
}
