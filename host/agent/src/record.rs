//! The agent's durable record of what it holds on its node: for each volume
//! (by Berth id), the plugin, the plugin's volume id, and how far it is. It is
//! written before a step's outcome is reported, so a restarted agent neither
//! publishes again nor forgets what it must tear down. Secrets are never in it.

use std::collections::BTreeMap;
use std::path::Path;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

use berth_store::{Change, Committer, StoreError, private_dir, private_file};

const HELD: TableDefinition<&str, &[u8]> = TableDefinition::new("held");
/// The record's page cache: it is read once at start and written after;
/// what the node holds is kept in memory by the agent.
const CACHE_BYTES: usize = 2 << 20;
/// A file shorter than this cannot hold redb's header and a first commit.
const UNFINISHED_BELOW: u64 = 4096;

pub use berth_model::NodeLevel as Level;

/// One volume the node holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    pub plugin: String,
    pub volume_id: String,
    pub level: Level,
    /// The plugin stages: the staging path is in use below `Published`.
    pub staged: bool,
}

pub struct NodeRecord {
    committer: Committer,
}

fn open_error(path: &Path, e: impl std::fmt::Display) -> StoreError {
    StoreError::Open {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

impl NodeRecord {
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
            Committer::start(db, reopen, "berth-agent-record").map_err(|e| open_error(path, e))?;
        Ok(NodeRecord { committer })
    }

    /// Whether the record can write now (for `/readyz`).
    pub fn health(&self) -> Result<(), berth_store::CommitError> {
        self.committer.health()
    }

    /// Everything held, by Berth id.
    pub fn load(&self) -> Result<BTreeMap<String, Held>, StoreError> {
        self.committer.read(load)
    }

    /// Records `held`, or forgets the volume when it is absent; returns once durable.
    pub async fn put(&self, berth_id: &str, held: &Held) -> Result<(), StoreError> {
        let change = if held.level == Level::Absent {
            Change::Remove(HELD, berth_id.to_string())
        } else {
            let bytes = serde_json::to_vec(held).map_err(|e| StoreError::Encode {
                id: berth_id.to_string(),
                message: e.to_string(),
            })?;
            Change::Put(HELD, berth_id.to_string(), bytes)
        };
        self.committer.write(change).await
    }
}

/// Everything held in `db`, by Berth id.
fn load(db: &Database) -> Result<BTreeMap<String, Held>, StoreError> {
    let failed = |e: redb::Error| StoreError::Failed(e.to_string());
    let txn = db.begin_read().map_err(|e| failed(e.into()))?;
    let table = txn.open_table(HELD).map_err(|e| failed(e.into()))?;
    let mut out = BTreeMap::new();
    for entry in table.iter().map_err(|e| failed(e.into()))? {
        let (key, value) = entry.map_err(|e| failed(e.into()))?;
        let held = serde_json::from_slice(value.value()).map_err(|e| StoreError::Unreadable {
            id: key.value().to_string(),
            message: e.to_string(),
        })?;
        out.insert(key.value().to_string(), held);
    }
    Ok(out)
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
        assert!(record.load().unwrap().is_empty());
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
        let loaded = r.load().unwrap();
        assert_eq!(loaded.len(), 1);
        assert_eq!(loaded["a"], held(Level::Published));
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    #[test]
    fn a_record_file_killed_while_being_made_is_started_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("record.redb");
        std::fs::write(&path, b"red").unwrap();
        let r = NodeRecord::open(&path).expect("an unfinished file is started again");
        assert!(r.load().unwrap().is_empty());
        drop(r);
        let big = dir.path().join("other.redb");
        std::fs::write(&big, vec![7u8; 8192]).unwrap();
        assert!(
            NodeRecord::open(&big).is_err(),
            "a file that may hold records is never replaced"
        );
    }
}
