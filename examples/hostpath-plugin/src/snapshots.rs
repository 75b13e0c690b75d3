//! Snapshots: a copy of a volume's data taken at CreateSnapshot.
//!
//! Layout: `snapshots/<id>.json` (the record; writing it commits a
//! snapshot), `snapdata/<id>/` (the copied data). Ids are derived from
//! names, so a retried CreateSnapshot finds its snapshot.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use serde::{Deserialize, Serialize};
use tonic::Status;

use crate::disk::{blocking, copy_tree, read_json, remove_record, state_dir_error, write_json};
use crate::volumes::hash_hex;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRecord {
    pub id: String,
    pub name: String,
    pub source_volume_id: String,
    pub size_bytes: i64,
    pub created_ms: u64,
    /// The group snapshot it was taken in, if any (CreateVolumeGroupSnapshot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_snapshot_id: Option<String>,
}

pub struct Snapshots {
    root: Dir,
    root_path: PathBuf,
    fsync: bool,
    /// Every snapshot; the controller is the only writer. One lock for
    /// every change: snapshots are few and rare next to volumes.
    index: Mutex<BTreeMap<String, SnapshotRecord>>,
}

impl Snapshots {
    pub fn open(state_dir: &Path, fsync: bool) -> anyhow::Result<Self> {
        let root_path = state_dir.canonicalize()?;
        let root = Dir::open_ambient_dir(&root_path, ambient_authority())?;
        for sub in ["snapshots", "snapdata"] {
            root.create_dir_all(sub)?;
        }
        let mut index = BTreeMap::new();
        for entry in root.read_dir("snapshots")? {
            let name = entry?.file_name();
            let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".json")) else {
                continue;
            };
            if let Some(rec) = read_json::<SnapshotRecord>(&root, &format!("snapshots/{id}.json"))
                .map_err(|s| anyhow::anyhow!("{}", s.message()))?
            {
                index.insert(rec.id.clone(), rec);
            }
        }
        Ok(Snapshots {
            root,
            root_path,
            fsync,
            index: Mutex::new(index),
        })
    }

    fn guard(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, SnapshotRecord>> {
        self.index.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Where a snapshot's data is, as a real path.
    pub fn data_path(&self, id: &str) -> PathBuf {
        self.root_path.join("snapdata").join(id)
    }

    pub fn get(&self, id: &str) -> Option<SnapshotRecord> {
        self.guard().get(id).cloned()
    }

    /// Every snapshot, sorted by id.
    pub fn list(&self) -> Vec<SnapshotRecord> {
        self.guard().values().cloned().collect()
    }

    /// The snapshots taken in a group snapshot, sorted by id.
    pub fn group(&self, group_snapshot_id: &str) -> Vec<SnapshotRecord> {
        self.guard()
            .values()
            .filter(|s| s.group_snapshot_id.as_deref() == Some(group_snapshot_id))
            .cloned()
            .collect()
    }

    /// Takes a snapshot of a volume whose data is at `data` (in a group
    /// snapshot, with `group`), or returns the one of the same name when it
    /// is of the same volume.
    pub fn create(
        &self,
        name: &str,
        source_volume_id: &str,
        size_bytes: i64,
        data: &Path,
        group: Option<&str>,
    ) -> Result<SnapshotRecord, Status> {
        self.create_made(name, source_volume_id, size_bytes, data, group)
            .map(|(rec, _)| rec)
    }

    /// As `create`, and whether this call made the snapshot (false: it
    /// existed, and is answered again).
    pub fn create_made(
        &self,
        name: &str,
        source_volume_id: &str,
        size_bytes: i64,
        data: &Path,
        group: Option<&str>,
    ) -> Result<(SnapshotRecord, bool), Status> {
        let id = format!("sn-{}", &hash_hex(name)[..32]);
        let mut index = self.guard();
        if let Some(existing) = index.get(&id) {
            if existing.source_volume_id != source_volume_id {
                return Err(Status::already_exists(format!(
                    "snapshot {name:?} exists, of volume {}",
                    existing.source_volume_id
                )));
            }
            return Ok((existing.clone(), false));
        }
        let rec = SnapshotRecord {
            id: id.clone(),
            name: name.to_string(),
            source_volume_id: source_volume_id.to_string(),
            size_bytes,
            created_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            group_snapshot_id: group.map(str::to_string),
        };
        blocking(|| {
            // The data first, the record last: the record commits the snapshot.
            self.root
                .create_dir_all(format!("snapdata/{id}"))
                .map_err(state_dir_error)?;
            copy_tree(data, &self.data_path(&id)).map_err(state_dir_error)?;
            write_json(&self.root, &format!("snapshots/{id}.json"), &rec, self.fsync)?;
            self.sync_dir()
        })?;
        index.insert(id, rec.clone());
        Ok((rec, true))
    }

    /// Deletes a snapshot; a missing one is already deleted.
    pub fn delete(&self, id: &str) -> Result<(), Status> {
        let mut index = self.guard();
        if !index.contains_key(id) {
            return Ok(());
        }
        blocking(|| {
            remove_record(&self.root, &format!("snapshots/{id}.json"))?;
            self.sync_dir()?;
            if let Err(e) = self.root.remove_dir_all(format!("snapdata/{id}")) {
                tracing::warn!(snapshot = id, error = %e, "snapshot data left behind");
            }
            Ok::<_, Status>(())
        })?;
        index.remove(id);
        Ok(())
    }

    fn sync_dir(&self) -> Result<(), Status> {
        if self.fsync {
            self.root
                .open("snapshots")
                .and_then(|d| d.into_std().sync_all())
                .map_err(state_dir_error)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_copies_the_data_and_is_idempotent_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let s = Snapshots::open(dir.path(), false).unwrap();
        let data = dir.path().join("vol");
        std::fs::create_dir_all(data.join("sub")).unwrap();
        std::fs::write(data.join("sub/f"), b"hello").unwrap();
        let a = s.create("snap", "hp-1", 10, &data, None).unwrap();
        assert_eq!(std::fs::read(s.data_path(&a.id).join("sub/f")).unwrap(), b"hello");
        assert_eq!(s.create("snap", "hp-1", 10, &data, None).unwrap(), a);
        let (_, made) = s.create_made("snap", "hp-1", 10, &data, None).unwrap();
        assert!(!made, "answered again, not made");
        let err = s.create("snap", "hp-2", 10, &data, None).unwrap_err();
        assert_eq!(err.code(), tonic::Code::AlreadyExists);
        s.delete(&a.id).unwrap();
        s.delete(&a.id).unwrap();
        assert!(s.list().is_empty());
        assert!(!s.data_path(&a.id).exists());
        // Reopened: what was committed is there.
        s.create("again", "hp-1", 10, &data, None).unwrap();
        assert_eq!(Snapshots::open(dir.path(), false).unwrap().list().len(), 1);
    }
}
