//! Where this node published each volume (NodePublishVolume's target
//! paths), kept by the node's own process in a directory of its own under
//! the state directory (`targets/<node>/<volume id>`, one path a line):
//! the controller's records are the controller process's to write.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use tonic::Status;

use crate::volumes::{hash_hex, valid_id};

pub struct Targets {
    dir: PathBuf,
    /// One read-modify-write at a time within this process.
    lock: Mutex<()>,
}

impl Targets {
    pub fn new(state_dir: &Path, node_id: &str) -> Targets {
        Targets {
            dir: state_dir.join("targets").join(hash_hex(node_id)),
            lock: Mutex::new(()),
        }
    }

    /// The target paths `volume_id` is recorded as published at.
    pub fn of(&self, volume_id: &str) -> Vec<String> {
        if !valid_id(volume_id) {
            return Vec::new();
        }
        std::fs::read_to_string(self.dir.join(volume_id))
            .map(|t| t.lines().map(str::to_string).collect())
            .unwrap_or_default()
    }

    pub fn add(&self, volume_id: &str, target: &Path) -> Result<(), Status> {
        self.change(volume_id, |all| {
            let t = target.display().to_string();
            if !all.contains(&t) {
                all.push(t);
            }
        })
    }

    pub fn remove(&self, volume_id: &str, target: &str) -> Result<(), Status> {
        self.change(volume_id, |all| all.retain(|t| t != target))
    }

    fn change(&self, volume_id: &str, edit: impl FnOnce(&mut Vec<String>)) -> Result<(), Status> {
        if !valid_id(volume_id) {
            return Ok(());
        }
        let _one = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut all = self.of(volume_id);
        edit(&mut all);
        let file = self.dir.join(volume_id);
        let written = if all.is_empty() {
            match std::fs::remove_file(&file) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            }
        } else {
            std::fs::create_dir_all(&self.dir).and_then(|()| std::fs::write(&file, all.join("\n") + "\n"))
        };
        written.map_err(|e| {
            crate::disk::disk_status(format!("recording where {volume_id} is published: {e}"), &e)
        })
    }
}
