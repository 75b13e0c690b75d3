//! Volume and node records kept under the state directory.
//!
//! Layout: `volumes/<id>.json` (the record; writing it commits a create),
//! `data/<id>/` (the volume's contents), `nodes/<hash>.json` (what each node
//! plugin registered: id, topology, limit). All access goes through a cap-std
//! `Dir`, so no volume name, id or node id can reach outside the state directory.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tonic::Status;

use crate::disk::{blocking, copy_tree, read_json, remove_record, state_dir_error, write_json};

pub type Segments = BTreeMap<String, String>;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeRecord {
    pub id: String,
    pub name: String,
    pub capacity_bytes: i64,
    pub parameters: BTreeMap<String, String>,
    /// Empty: reachable from every node.
    pub accessible_topology: Vec<Segments>,
    pub published_nodes: BTreeSet<String>,
    /// What the volume was made from, as CreateVolume was asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Source>,
    /// Parameters CreateVolume or ControllerModifyVolume set, and may change again.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub mutable_parameters: BTreeMap<String, String>,
}

/// A volume's content source: a snapshot or another volume, by id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    Snapshot(String),
    Volume(String),
}

/// What CreateVolume is asked for.
pub struct NewVolume {
    pub name: String,
    pub required: i64,
    pub limit: i64,
    pub parameters: BTreeMap<String, String>,
    pub mutable_parameters: BTreeMap<String, String>,
    pub accessible_topology: Vec<Segments>,
    /// The source and where its data is, with its size.
    pub source: Option<(Source, PathBuf, i64)>,
    /// Bytes available to volumes accessible from a segment, (key, value, bytes).
    pub segment_capacity: Vec<(String, String, i64)>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NodeRecord {
    pub node_id: String,
    pub topology: Segments,
    pub max_volumes: u64,
}

/// The controller's view of every volume, with the totals its checks need
/// kept up to date, so no call scans all volumes.
#[derive(Default)]
pub struct Index {
    records: BTreeMap<String, VolumeRecord>,
    used_bytes: i64,
    /// Node id → volumes published there.
    published: HashMap<String, u64>,
}

impl Index {
    /// Replaces (or, with `None`, removes) a record, keeping the totals right.
    fn set(&mut self, id: &str, new: Option<VolumeRecord>) {
        let old = match new {
            Some(rec) => self.records.insert(id.to_string(), rec),
            None => self.records.remove(id),
        };
        if let Some(old) = old {
            self.used_bytes -= old.capacity_bytes;
            for n in &old.published_nodes {
                if let Some(c) = self.published.get_mut(n) {
                    *c = c.saturating_sub(1);
                }
            }
        }
        if let Some(rec) = self.records.get(id) {
            self.used_bytes += rec.capacity_bytes;
            for n in &rec.published_nodes {
                *self.published.entry(n.clone()).or_default() += 1;
            }
        }
    }

    /// Bytes of the volumes accessible from segment `key=value` (a scan:
    /// only with `--capacity-in`).
    fn used_in(&self, key: &str, value: &str) -> i64 {
        self.records
            .values()
            .filter(|r| in_segment(&r.accessible_topology, key, value))
            .map(|r| r.capacity_bytes)
            .sum()
    }

    pub fn published_on(&self, node_id: &str) -> u64 {
        self.published.get(node_id).copied().unwrap_or(0)
    }
}

/// What a change does to one volume's record.
pub enum Outcome<T> {
    /// Nothing to write; answer `T`.
    Keep(T),
    Put(VolumeRecord, T),
    Remove(T),
}

/// Locks serialising the writes of one volume (striped by id), so different
/// volumes are written and synced at the same time.
const WRITER_STRIPES: usize = 64;

pub struct Volumes {
    root: Dir,
    root_path: PathBuf,
    capacity: i64,
    fsync: bool,
    /// Every record, as last committed or being committed; the controller is
    /// the only writer, so in the controller this is the truth (node
    /// processes read the files).
    index: Mutex<Index>,
    writers: Vec<Mutex<()>>,
}

impl Volumes {
    pub fn open(state_dir: &Path, capacity: i64, fsync: bool) -> anyhow::Result<Self> {
        std::fs::create_dir_all(state_dir)?;
        let root_path = state_dir.canonicalize()?;
        let root = Dir::open_ambient_dir(&root_path, ambient_authority())?;
        for sub in ["volumes", "data", "nodes"] {
            root.create_dir_all(sub)?;
        }
        let volumes = Volumes {
            root,
            root_path,
            capacity,
            fsync,
            index: Mutex::new(Index::default()),
            writers: (0..WRITER_STRIPES).map(|_| Mutex::new(())).collect(),
        };
        let all = volumes
            .read_all()
            .map_err(|s| anyhow::anyhow!("{}", s.message()))?;
        {
            let mut index = volumes.guard();
            for r in all {
                let id = r.id.clone();
                index.set(&id, Some(r));
            }
        }
        Ok(volumes)
    }

    fn guard(&self) -> MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn writer(&self, id: &str) -> MutexGuard<'_, ()> {
        let stripe = id
            .bytes()
            .fold(0usize, |h, b| h.wrapping_mul(31).wrapping_add(b as usize));
        self.writers[stripe % WRITER_STRIPES]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// The directory holding a volume's data, as a real path for mounting.
    pub fn data_path(&self, id: &str) -> PathBuf {
        self.root_path.join("data").join(id)
    }

    pub fn get(&self, id: &str) -> Result<Option<VolumeRecord>, Status> {
        if !valid_id(id) {
            return Ok(None);
        }
        read_json(&self.root, &format!("volumes/{id}.json"))
    }

    /// Every volume, sorted by id (from the controller's index).
    pub fn list(&self) -> Result<Vec<VolumeRecord>, Status> {
        Ok(self.guard().records.values().cloned().collect())
    }

    fn read_all(&self) -> Result<Vec<VolumeRecord>, Status> {
        let mut out = Vec::new();
        for entry in self.root.read_dir("volumes").map_err(state_dir_error)? {
            let name = entry.map_err(state_dir_error)?.file_name();
            let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".json")) else {
                continue;
            };
            if let Some(rec) = self.get(id)? {
                out.push(rec);
            }
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    pub fn used_bytes(&self) -> Result<i64, Status> {
        Ok(self.guard().used_bytes)
    }

    /// Bytes of the volumes accessible from segment `key=value`.
    pub fn used_in(&self, key: &str, value: &str) -> Result<i64, Status> {
        Ok(self.guard().used_in(key, value))
    }

    pub fn total_bytes(&self) -> i64 {
        self.capacity
    }

    /// Decides a change to volume `id` from the index, applies it there at
    /// once (so checks of later calls count it), then commits it to disk.
    /// The answer waits for the commit; a failed commit is rolled back.
    fn change<T>(
        &self,
        id: &str,
        decide: impl FnOnce(&Index, Option<&VolumeRecord>) -> Result<Outcome<T>, Status>,
    ) -> Result<T, Status> {
        self.change_with(id, decide, |_| Ok(()))
    }

    /// [`Volumes::change`], with `fill` run on a new volume's data directory
    /// before its record is written.
    fn change_with<T>(
        &self,
        id: &str,
        decide: impl FnOnce(&Index, Option<&VolumeRecord>) -> Result<Outcome<T>, Status>,
        fill: impl FnOnce(&Path) -> io::Result<()>,
    ) -> Result<T, Status> {
        let _writer = self.writer(id);
        let (outcome, old) = {
            let mut index = self.guard();
            let old = index.records.get(id).cloned();
            let outcome = decide(&index, old.as_ref())?;
            match &outcome {
                Outcome::Keep(_) => {}
                Outcome::Put(rec, _) => index.set(id, Some(rec.clone())),
                Outcome::Remove(_) => index.set(id, None),
            }
            (outcome, old)
        };
        // Disk work blocks: let the runtime move other calls to other threads meanwhile.
        let committed = blocking(|| match &outcome {
            Outcome::Keep(_) => Ok(()),
            Outcome::Put(rec, _) => {
                if old.is_none() {
                    // The data directory first, the record last: the record commits the create.
                    self.root
                        .create_dir_all(format!("data/{id}"))
                        .map_err(state_dir_error)?;
                    fill(&self.data_path(id)).map_err(state_dir_error)?;
                }
                self.save(rec)
            }
            Outcome::Remove(_) => {
                remove_record(&self.root, &format!("volumes/{id}.json"))?;
                self.sync_dir("volumes")?;
                if let Err(e) = self.root.remove_dir_all(format!("data/{id}")) {
                    tracing::warn!(volume = id, error = %e, "volume data left behind");
                }
                Ok(())
            }
        });
        if let Err(e) = committed {
            self.guard().set(id, old);
            return Err(e);
        }
        Ok(match outcome {
            Outcome::Keep(t) | Outcome::Put(_, t) | Outcome::Remove(t) => t,
        })
    }

    /// Creates a volume, or returns the existing one of the same name when it
    /// is compatible (the spec's idempotency rule). With a source, its data
    /// is copied in before the record is written (the record commits).
    /// The volume of that name, made unless it exists; and whether this call made it.
    pub fn create(&self, new: NewVolume, check_conflicts: bool) -> Result<(VolumeRecord, bool), Status> {
        let NewVolume {
            name,
            required,
            limit,
            parameters,
            mutable_parameters,
            accessible_topology,
            source,
            segment_capacity,
        } = new;
        let id = id_for(&name);
        let source_id = source.as_ref().map(|(s, _, _)| s.clone());
        let source_size = source.as_ref().map_or(0, |(_, _, size)| *size);
        let copy_from = source.map(|(_, path, _)| path);
        self.change_with(
            &id,
            |index, existing| {
                if let Some(existing) = existing {
                    if existing.name != name {
                        return Err(Status::already_exists(format!(
                            "volume id {id} is taken by another name"
                        )));
                    }
                    let fits = existing.capacity_bytes >= required
                        && (limit == 0 || existing.capacity_bytes <= limit);
                    if check_conflicts
                        && (!fits || existing.parameters != parameters || existing.source != source_id)
                    {
                        return Err(Status::already_exists(format!(
                            "volume {name:?} exists with capacity {} and different parameters, size or source",
                            existing.capacity_bytes
                        )));
                    }
                    return Ok(Outcome::Keep((existing.clone(), false)));
                }
                let size = if required > 0 {
                    required.max(source_size)
                } else if limit > 0 {
                    limit
                } else {
                    source_size.max(1 << 30)
                };
                if limit > 0 && size > limit {
                    return Err(Status::out_of_range(format!(
                        "the source has {source_size} bytes, more than the limit of {limit}"
                    )));
                }
                let free = self.capacity - index.used_bytes;
                if size > free {
                    return Err(Status::resource_exhausted(format!(
                        "{size} bytes requested, {free} bytes free"
                    )));
                }
                for (k, v, bytes) in &segment_capacity {
                    if !in_segment(&accessible_topology, k, v) {
                        continue;
                    }
                    let used = index.used_in(k, v);
                    if size > bytes - used {
                        return Err(Status::resource_exhausted(format!(
                            "{size} bytes requested, {} bytes free in {k}={v}",
                            bytes - used
                        )));
                    }
                }
                let rec = VolumeRecord {
                    id: id.clone(),
                    name: name.to_string(),
                    capacity_bytes: size,
                    parameters,
                    accessible_topology,
                    published_nodes: BTreeSet::new(),
                    source: source_id,
                    mutable_parameters,
                };
                Ok(Outcome::Put(rec.clone(), (rec, true)))
            },
            |data| match &copy_from {
                Some(from) => copy_tree(from, data),
                None => Ok(()),
            },
        )
    }

    /// Grows a volume to at least `required` bytes; a volume already that
    /// large is left as it is. Returns its capacity.
    pub fn expand(&self, id: &str, required: i64, limit: i64) -> Result<Option<i64>, Status> {
        self.update(id, |index, rec| {
            if rec.capacity_bytes >= required {
                return Ok(rec.capacity_bytes);
            }
            if limit > 0 && required > limit {
                return Err(Status::out_of_range(format!(
                    "required {required} is above the limit {limit}"
                )));
            }
            let free = self.capacity - index.used_bytes;
            if required - rec.capacity_bytes > free {
                return Err(Status::resource_exhausted(format!(
                    "{} more bytes requested, {free} bytes free",
                    required - rec.capacity_bytes
                )));
            }
            rec.capacity_bytes = required;
            Ok(required)
        })
    }

    /// Sets the mutable parameters named in `changes`, leaving the others
    /// as they are (keys left out change nothing, as the spec asks);
    /// `None` when there is no such volume.
    pub fn modify(&self, id: &str, changes: BTreeMap<String, String>) -> Result<Option<()>, Status> {
        self.update(id, |_, rec| {
            rec.mutable_parameters.extend(changes);
            Ok(())
        })
    }

    /// Deletes a volume; a missing one is already deleted.
    pub fn delete(&self, id: &str) -> Result<(), Status> {
        if !valid_id(id) {
            return Ok(());
        }
        self.change(id, |_, rec| match rec {
            None => Ok(Outcome::Keep(())),
            Some(rec) if !rec.published_nodes.is_empty() => Err(Status::failed_precondition(format!(
                "volume {id} is still published to {:?}",
                rec.published_nodes
            ))),
            Some(_) => Ok(Outcome::Remove(())),
        })
    }

    /// Applies `change` to a volume's record; `None` when there is no such volume.
    /// `change` sees the index, for checks across volumes, and leaves the
    /// record untouched when there is nothing to do.
    pub fn update<T>(
        &self,
        id: &str,
        change: impl FnOnce(&Index, &mut VolumeRecord) -> Result<T, Status>,
    ) -> Result<Option<T>, Status> {
        if !valid_id(id) {
            return Ok(None);
        }
        self.change(id, |index, rec| {
            let Some(old) = rec else {
                return Ok(Outcome::Keep(None));
            };
            let mut rec = old.clone();
            let out = change(index, &mut rec)?;
            Ok(if rec == *old {
                Outcome::Keep(Some(out))
            } else {
                Outcome::Put(rec, Some(out))
            })
        })
    }

    pub fn register_node(&self, node: &NodeRecord) -> Result<(), Status> {
        write_json(
            &self.root,
            &format!("nodes/{}.json", hash_hex(&node.node_id)),
            node,
            self.fsync,
        )?;
        self.sync_dir("nodes")
    }

    pub fn node(&self, node_id: &str) -> Result<Option<NodeRecord>, Status> {
        read_json(&self.root, &format!("nodes/{}.json", hash_hex(node_id)))
    }

    fn save(&self, rec: &VolumeRecord) -> Result<(), Status> {
        write_json(&self.root, &format!("volumes/{}.json", rec.id), rec, self.fsync)?;
        self.sync_dir("volumes")
    }

    /// Makes a rename or removal in `dir` durable.
    fn sync_dir(&self, dir: &str) -> Result<(), Status> {
        if self.fsync {
            self.root
                .open(dir)
                .and_then(|d| d.into_std().sync_all())
                .map_err(state_dir_error)?;
        }
        Ok(())
    }
}

/// Whether a volume accessible from `accessible` is reachable from segment `key=value`.
fn in_segment(accessible: &[Segments], key: &str, value: &str) -> bool {
    accessible.is_empty()
        || accessible
            .iter()
            .any(|s| s.get(key).map(String::as_str) == Some(value))
}

/// Whether a node with `segments` can reach a volume accessible from `accessible`.
pub fn reachable(accessible: &[Segments], segments: &Segments) -> bool {
    accessible.is_empty()
        || accessible
            .iter()
            .any(|t| t.iter().all(|(k, v)| segments.get(k) == Some(v)))
}

/// Volume ids are derived from names, so a retried CreateVolume finds its volume.
fn id_for(name: &str) -> String {
    format!("hp-{}", &hash_hex(name)[..32])
}

pub(crate) fn valid_id(id: &str) -> bool {
    id.strip_prefix("hp-")
        .is_some_and(|h| h.len() == 32 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

pub(crate) fn hash_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests;
