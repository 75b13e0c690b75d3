//! Which containers hold which volume, by Docker's mount IDs. Written to
//! disk before Berth acts on a change, so a restart forgets no container
//! still running: nothing is unpublished under it, and its Unmount later
//! finds it.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Docker's mount IDs are 64 hex digits; anything far longer is refused.
pub const MAX_ID_BYTES: usize = 256;
/// Containers holding one volume at most.
pub const MAX_HOLDERS: usize = 4096;

type Held = BTreeMap<String, BTreeSet<String>>;

pub struct Holders {
    path: PathBuf,
    held: Mutex<Held>,
}

impl Holders {
    /// The holders written at `path` (none when there is no file yet).
    pub fn open(path: &Path) -> io::Result<Holders> {
        let held = match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", path.display()))
            })?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Held::new(),
            Err(e) => return Err(e),
        };
        Ok(Holders {
            path: path.to_path_buf(),
            held: Mutex::new(held),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn count(&self, volume: &str) -> usize {
        self.lock().get(volume).map_or(0, BTreeSet::len)
    }

    /// Records that `id` holds `volume`, durably; how many hold it now.
    pub fn add(&self, volume: &str, id: &str) -> io::Result<usize> {
        if id.is_empty() || id.len() > MAX_ID_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a mount ID must be 1 to {MAX_ID_BYTES} bytes"),
            ));
        }
        let mut held = self.lock();
        let ids = held.entry(volume.to_string()).or_default();
        if !ids.contains(id) {
            if ids.len() >= MAX_HOLDERS {
                return Err(io::Error::other(format!(
                    "{volume} is held by {MAX_HOLDERS} containers already"
                )));
            }
            ids.insert(id.to_string());
            self.save(&held)?;
        }
        Ok(held.get(volume).map_or(0, BTreeSet::len))
    }

    /// Records that `id` no longer holds `volume`, durably; how many still do.
    pub fn remove(&self, volume: &str, id: &str) -> io::Result<usize> {
        let mut held = self.lock();
        let Some(ids) = held.get_mut(volume) else {
            return Ok(0);
        };
        if !ids.remove(id) {
            return Ok(ids.len());
        }
        let left = ids.len();
        if left == 0 {
            held.remove(volume);
        }
        self.save(&held)?;
        Ok(left)
    }

    /// Replaces the file whole: written beside it, synced, renamed over it.
    fn save(&self, held: &Held) -> io::Result<()> {
        let tmp = self.path.with_extension("json.tmp");
        {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&serde_json::to_vec(held).map_err(io::Error::other)?)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_are_counted_by_id_and_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("holders.json");
        let h = Holders::open(&path).unwrap();
        assert_eq!(h.add("data", "c1").unwrap(), 1);
        assert_eq!(h.add("data", "c1").unwrap(), 1, "the same ID twice is one holder");
        assert_eq!(h.add("data", "c2").unwrap(), 2);
        let h = Holders::open(&path).unwrap();
        assert_eq!(h.count("data"), 2);
        assert_eq!(h.remove("data", "c1").unwrap(), 1);
        assert_eq!(h.remove("data", "unknown").unwrap(), 1);
        assert_eq!(h.remove("data", "c2").unwrap(), 0);
        assert_eq!(Holders::open(&path).unwrap().count("data"), 0);
        assert!(h.add("data", &"x".repeat(MAX_ID_BYTES + 1)).is_err());
    }
}
