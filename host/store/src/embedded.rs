//! The embedded store: one redb file, crash-safe. Writes go through a
//! [`Committer`], so under load many changes share one fsync.

use std::path::Path;
use std::sync::Arc;

use redb::{Database, ReadOnlyDatabase, ReadableDatabase, ReadableTable, TableDefinition};

use crate::committer::{Change, CommitError, Committer, Table, Waits};
use crate::private::{private_dir, private_file, warn_if_shared};
use crate::{
    AclRecord, NodeRecord, SCHEMA_VERSION, Store, StoreError, TokenRecord, decisions, decode, encode, failed,
};
use berth_model::VolumeRecord;

const VOLUMES: TableDefinition<&str, &[u8]> = TableDefinition::new("volumes");
/// Registered nodes by name (JSON); added without a schema change: a store
/// without the table has no nodes, and older releases never open it.
const NODES: TableDefinition<&str, &[u8]> = TableDefinition::new("nodes");
/// Join tokens by id (JSON, the secret only as its hash); added without a
/// schema change, as nodes were.
const TOKENS: TableDefinition<&str, &[u8]> = TableDefinition::new("tokens");
/// ACL tokens and policies (JSON) by [`AclRecord::key`]; added without a
/// schema change, as the tokens were.
const ACL: TableDefinition<&str, &[u8]> = TableDefinition::new("acl");
/// The cluster's policy set (JSON), under the key `set`; added without a
/// schema change like the tokens.
const POLICY: TableDefinition<&str, &[u8]> = TableDefinition::new("policy");
/// Each plugin's latest conformance report (JSON) by the plugin's name;
/// added without a schema change, as the policy set was.
const CHECKS: TableDefinition<&str, &[u8]> = TableDefinition::new("plugin_checks");
/// The decision log: `<kind>/<chunk key>` to a chunk of entries (see [`crate::decisions`]).
const DECISIONS: TableDefinition<&str, &[u8]> = TableDefinition::new("decisions");
/// Facts about the store itself; added with schema version 1's recording.
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const SCHEMA_KEY: &str = "schema_version";
/// The store's page cache.
const CACHE_BYTES: usize = 16 << 20;

pub struct RedbStore {
    committer: Arc<Committer>,
}

/// A new redb file at `path`: made under a temporary name beside it,
/// initialised by `init`, synced and renamed into place, so that a file
/// that exists is a finished one (a kill while it was made leaves only the
/// temporary, which the next attempt replaces).
pub fn create_beside(path: &Path, init: impl FnOnce(&Path) -> std::io::Result<()>) -> std::io::Result<()> {
    use std::io::Error;
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".new");
    let temporary = std::path::PathBuf::from(temporary);
    let _ = std::fs::remove_file(&temporary);
    private_file(&temporary)?;
    init(&temporary).map_err(|e| Error::new(e.kind(), format!("creating {}: {e}", temporary.display())))?;
    std::fs::rename(&temporary, path).map_err(|e| {
        Error::new(
            e.kind(),
            format!("renaming {} into place: {e}", temporary.display()),
        )
    })?;
    if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| Error::new(e.kind(), format!("syncing {}: {e}", dir.display())))?;
    }
    Ok(())
}

/// A new store, initialised with its tables and schema version.
fn create(path: &Path) -> std::io::Result<()> {
    create_beside(path, |temporary| {
        let db = open_db(temporary).map_err(std::io::Error::other)?;
        prepare(&db, None, false).map_err(std::io::Error::other)
    })
}

/// A store file shorter than this cannot hold redb's header.
const HEADER_BYTES: u64 = 512;

fn open_db(path: &Path) -> Result<Database, redb::DatabaseError> {
    // Every volume is held in memory by the manager; the store's own page
    // cache only needs to serve writes and the load at start.
    redb::Builder::new().set_cache_size(CACHE_BYTES).create(path)
}

/// Runs `open` and turns a panic inside redb (a damaged file can make it
/// panic) into an error naming the file.
fn guarded<T>(path: &Path, open: impl FnOnce() -> Result<T, StoreError>) -> Result<T, StoreError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(open)).unwrap_or_else(|panic| {
        let why = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        Err(StoreError::Open {
            path: path.to_path_buf(),
            message: format!("the file is damaged ({why}): restore it from a backup; it was not changed"),
        })
    })
}

impl RedbStore {
    /// Opens the store file, checks its schema version, and starts its
    /// committer. A missing file is made (beside its place, then renamed in,
    /// so a file that is there was finished); one that is there but empty or
    /// cut short is refused, never taken for a new store.
    pub fn open(path: &Path) -> Result<RedbStore, StoreError> {
        RedbStore::open_waiting(path, Waits::Async)
    }

    /// [`RedbStore::open`], its writers waiting on the committer as `waits` says.
    pub fn open_waiting(path: &Path, waits: Waits) -> Result<RedbStore, StoreError> {
        guarded(path, || RedbStore::open_unguarded(path, waits))
    }

    fn open_unguarded(path: &Path, waits: Waits) -> Result<RedbStore, StoreError> {
        let open_error = |message: String| StoreError::Open {
            path: path.to_path_buf(),
            message,
        };
        if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            private_dir(dir).map_err(|e| open_error(format!("creating {}: {e}", dir.display())))?;
        }
        match std::fs::metadata(path) {
            Ok(meta) if meta.len() < HEADER_BYTES => {
                return Err(open_error(format!(
                    "the file is there but holds {} bytes, too few for a store: it was cut short or emptied. Restore it from a backup; to start a new, empty store instead, remove it (every volume Berth tracked would be forgotten)",
                    meta.len()
                )));
            }
            Ok(meta) => warn_if_shared(
                path,
                &meta,
                "the store file is readable by other users; chmod 600 it",
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                create(path).map_err(|e| open_error(e.to_string()))?
            }
            Err(e) => return Err(open_error(e.to_string())),
        }
        // A store from a newer release is refused before anything could write
        // to it: redb updates the file when it opens it for writing. (A file
        // that needs crash recovery cannot be opened read-only; it is checked
        // below, after recovery, before Berth writes anything.)
        if let Ok(db) = ReadOnlyDatabase::open(path) {
            let found = schema_version(&db).map_err(|e| open_error(e.to_string()))?;
            refuse_newer(path, found)?;
        }
        let db = open_db(path).map_err(|e| open_error(e.to_string()))?;
        let found = schema_version(&db).map_err(|e| open_error(e.to_string()))?;
        refuse_newer(path, found)?;
        prepare(&db, found, crate::committer::quick_repair(path)).map_err(|e| open_error(e.to_string()))?;
        let reopen_path = path.to_path_buf();
        let reopen = Box::new(move || open_db(&reopen_path));
        let committer = Committer::start_waiting(db, path, reopen, "berth-store", waits)
            .map_err(|e| open_error(e.to_string()))?;
        Ok(RedbStore {
            committer: Arc::new(committer),
        })
    }

    /// The store's committer, for what shares its file and its commits: the
    /// records of the server's in-process nodes.
    pub fn committer(&self) -> Arc<Committer> {
        self.committer.clone()
    }

    /// Whether the store can write now (for `/readyz`).
    pub fn health(&self) -> Result<(), CommitError> {
        self.committer.health()
    }

    /// The schema version recorded in the file at `path`, without changing it.
    pub fn recorded_schema(path: &Path) -> Result<Option<u64>, StoreError> {
        let db = ReadOnlyDatabase::open(path).map_err(|e| StoreError::Open {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        schema_version(&db).map_err(failed)
    }

    async fn put_json(
        &self,
        table: Table,
        key: &str,
        value: &impl serde::Serialize,
    ) -> Result<(), StoreError> {
        let bytes = crate::encode_json(key, value)?;
        self.committer
            .write(Change::Put(table, key.to_string(), bytes))
            .await
    }

    async fn remove_key(&self, table: Table, key: &str) -> Result<(), StoreError> {
        self.committer.write(Change::Remove(table, key.to_string())).await
    }

    /// Every JSON value of `table` (none when the table was never made).
    fn load_all<T: serde::de::DeserializeOwned + Send + 'static>(
        &self,
        table: Table,
        what: &'static str,
    ) -> Result<Vec<T>, StoreError> {
        self.committer.read(move |db| read_all(db, table, what))
    }

    #[cfg(test)]
    fn set_schema_version(&self, version: u64) {
        self.committer
            .read(move |db| {
                let txn = db.begin_write().unwrap();
                txn.open_table(META).unwrap().insert(SCHEMA_KEY, version).unwrap();
                txn.commit().unwrap();
                Ok(())
            })
            .unwrap();
    }
}

/// `table` for reading, or `None` when it was never made (a store from
/// before it, or one nothing was written to yet).
fn open_read(
    txn: &redb::ReadTransaction,
    table: Table,
) -> Result<Option<redb::ReadOnlyTable<&'static str, &'static [u8]>>, StoreError> {
    match txn.open_table(table) {
        Ok(t) => Ok(Some(t)),
        Err(redb::TableError::TableDoesNotExist(_)) => Ok(None),
        Err(e) => Err(failed(e)),
    }
}

/// Every JSON value of `table` (none when the table was never made); a
/// value that does not decode is an error naming it.
fn read_all<T: serde::de::DeserializeOwned>(
    db: &Database,
    table: Table,
    what: &str,
) -> Result<Vec<T>, StoreError> {
    let txn = db.begin_read().map_err(failed)?;
    let Some(table) = open_read(&txn, table)? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for entry in table.iter().map_err(failed)? {
        let (key, value) = entry.map_err(failed)?;
        out.push(
            serde_json::from_slice(value.value()).map_err(|e| StoreError::Unreadable {
                id: format!("{what} {}", key.value()),
                message: e.to_string(),
            })?,
        );
    }
    Ok(out)
}

fn refuse_newer(path: &Path, found: Option<u64>) -> Result<(), StoreError> {
    match found {
        Some(found) if found > SCHEMA_VERSION => Err(StoreError::NewerSchema {
            path: path.to_path_buf(),
            found,
            supported: SCHEMA_VERSION,
        }),
        _ => Ok(()),
    }
}

/// The recorded version; a file with volumes but no version is version 1
/// (written before versions were recorded); `None` for a new file.
fn schema_version(db: &impl ReadableDatabase) -> Result<Option<u64>, redb::Error> {
    let txn = db.begin_read()?;
    match txn.open_table(META) {
        Ok(meta) => {
            if let Some(v) = meta.get(SCHEMA_KEY)? {
                return Ok(Some(v.value()));
            }
        }
        Err(redb::TableError::TableDoesNotExist(_)) => {}
        Err(e) => return Err(e.into()),
    }
    match txn.open_table(VOLUMES) {
        Ok(_) => Ok(Some(1)),
        Err(redb::TableError::TableDoesNotExist(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Creates the tables and records the version where it is missing; with
/// `quick_repair`, the commit records the allocator state, so that a crash
/// before the first write does not leave a walk of the file to the next open.
fn prepare(db: &Database, found: Option<u64>, quick_repair: bool) -> Result<(), redb::Error> {
    let mut txn = db.begin_write()?;
    txn.set_quick_repair(quick_repair);
    txn.open_table(VOLUMES)?;
    {
        let mut meta = txn.open_table(META)?;
        if meta.get(SCHEMA_KEY)?.is_none() {
            meta.insert(SCHEMA_KEY, found.unwrap_or(SCHEMA_VERSION))?;
        }
    }
    txn.commit()?;
    Ok(())
}

#[tonic::async_trait]
impl Store for RedbStore {
    fn load(&self) -> Result<Vec<VolumeRecord>, StoreError> {
        self.committer.read(|db| {
            let txn = db.begin_read().map_err(failed)?;
            let table = txn.open_table(VOLUMES).map_err(failed)?;
            let mut out = Vec::new();
            for entry in table.iter().map_err(failed)? {
                let (key, value) = entry.map_err(failed)?;
                out.push(decode(key.value(), value.value())?);
            }
            Ok(out)
        })
    }

    fn load_each(&self, each: &mut dyn FnMut(VolumeRecord)) -> Result<(), StoreError> {
        crate::load::each_volume(&self.committer, VOLUMES, each)
    }

    fn load_keyed(&self, each: &mut dyn FnMut(crate::Loaded)) -> Result<(), StoreError> {
        crate::load::each_read(&self.committer, VOLUMES, crate::keyed, &mut |v| {
            each(crate::Loaded::Stored(v))
        })
    }

    fn volume_count(&self) -> Result<u64, StoreError> {
        self.committer.read(|db| {
            let txn = db.begin_read().map_err(failed)?;
            match txn.open_table(VOLUMES) {
                Ok(t) => redb::ReadableTableMetadata::len(&t).map_err(failed),
                Err(redb::TableError::TableDoesNotExist(_)) => Ok(0),
                Err(e) => Err(failed(e)),
            }
        })
    }

    async fn put(&self, record: &VolumeRecord) -> Result<(), StoreError> {
        let bytes = encode(record)?;
        self.committer
            .write(Change::Put(VOLUMES, record.id.clone(), bytes))
            .await
    }

    async fn remove(&self, id: &str) -> Result<(), StoreError> {
        self.committer
            .write(Change::Remove(VOLUMES, id.to_string()))
            .await
    }

    fn load_nodes(&self) -> Result<Vec<NodeRecord>, StoreError> {
        self.load_all(NODES, "node")
    }

    async fn put_node(&self, node: &NodeRecord) -> Result<(), StoreError> {
        self.put_json(NODES, &node.name, node).await
    }

    async fn remove_node(&self, name: &str) -> Result<(), StoreError> {
        self.remove_key(NODES, name).await
    }

    fn load_tokens(&self) -> Result<Vec<TokenRecord>, StoreError> {
        self.load_all(TOKENS, "join token")
    }

    async fn put_token(&self, token: &TokenRecord) -> Result<(), StoreError> {
        self.put_json(TOKENS, &token.id, token).await
    }

    async fn remove_token(&self, id: &str) -> Result<(), StoreError> {
        self.remove_key(TOKENS, id).await
    }

    fn load_acl(&self) -> Result<Vec<AclRecord>, StoreError> {
        self.load_all(ACL, "ACL record")
    }

    async fn put_acl(&self, record: &AclRecord) -> Result<(), StoreError> {
        self.put_json(ACL, &record.key(), record).await
    }

    async fn remove_acl(&self, key: &str) -> Result<(), StoreError> {
        self.remove_key(ACL, key).await
    }

    fn load_policy_set(&self) -> Result<Option<crate::PolicySetRecord>, StoreError> {
        Ok(self.load_all(POLICY, "policy set")?.into_iter().next())
    }

    fn load_plugin_checks(&self) -> Result<Vec<crate::PluginCheckRecord>, StoreError> {
        self.load_all(CHECKS, "plugin check")
    }

    async fn put_plugin_check(&self, check: &crate::PluginCheckRecord) -> Result<(), StoreError> {
        self.put_json(CHECKS, &check.plugin, check).await
    }

    async fn put_policy_set(&self, set: &crate::PolicySetRecord) -> Result<(), StoreError> {
        self.put_json(POLICY, "set", set).await
    }

    async fn append_decisions(
        &self,
        batches: Vec<crate::LoggedBatch>,
        keep: usize,
    ) -> Result<(), StoreError> {
        let batches: Vec<(String, Vec<(String, Vec<u8>)>)> =
            batches.into_iter().map(|b| b.kept(keep)).collect();
        let kinds: Vec<(String, usize)> = batches.iter().map(|(k, e)| (k.clone(), e.len())).collect();
        // Each kind's chunk keys and how they are trimmed, with the value
        // of the chunk across the ring's edge; then one write of it all.
        let stored: Vec<(Vec<String>, decisions::Trim, Option<Vec<u8>>)> = self
            .committer
            .read_async(move |db| {
                let txn = db.begin_read().map_err(failed)?;
                let table = open_read(&txn, DECISIONS)?;
                let mut out = Vec::with_capacity(kinds.len());
                for (kind, added) in &kinds {
                    let (first, end) = (format!("{kind}/"), format!("{kind}0"));
                    let mut keys = Vec::new();
                    if let Some(table) = &table {
                        for entry in table.range(first.as_str()..end.as_str()).map_err(failed)? {
                            keys.push(entry.map_err(failed)?.0.value()[first.len()..].to_string());
                        }
                    }
                    let trim = decisions::trim(&keys, *added, keep);
                    let edge = match (&table, keys.get(trim.whole)) {
                        (Some(table), Some(edge)) if trim.cut > 0 => table
                            .get(format!("{kind}/{edge}").as_str())
                            .map_err(failed)?
                            .map(|v| v.value().to_vec()),
                        _ => None,
                    };
                    out.push((keys, trim, edge));
                }
                Ok(out)
            })
            .await?;
        let mut changes = Vec::new();
        for ((kind, fresh), (keys, trim, edge)) in batches.into_iter().zip(stored) {
            changes.extend(
                decisions::appended(&keys, &trim, edge, fresh)
                    .into_iter()
                    .map(|(k, value)| match value {
                        Some(value) => Change::Put(DECISIONS, format!("{kind}/{k}"), value),
                        None => Change::Remove(DECISIONS, format!("{kind}/{k}")),
                    }),
            );
        }
        self.committer.write_all(changes).await
    }

    async fn read_decisions(
        &self,
        kind: &str,
        after: &str,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let (start, end, prefix) = (format!("{kind}/{after}"), format!("{kind}0"), format!("{kind}/"));
        let mut page = decisions::Page::new(after, limit);
        self.committer
            .read_async(move |db| {
                let txn = db.begin_read().map_err(failed)?;
                let Some(table) = open_read(&txn, DECISIONS)? else {
                    return Ok(Vec::new());
                };
                for entry in table.range(start.as_str()..end.as_str()).map_err(failed)? {
                    let (key, value) = entry.map_err(failed)?;
                    let key = key.value().strip_prefix(prefix.as_str()).unwrap_or_default();
                    if page.take(key, value.value().to_vec()) {
                        break;
                    }
                }
                Ok(page.entries)
            })
            .await
    }
}

pub mod check;
#[cfg(test)]
mod tests;
