//! The state directory's disk: records written whole (a temporary file
//! renamed over), read back, removed; data copied and measured; and a disk
//! call's failure as the CO should take it.

use std::io::{self, Write};
use std::path::Path;

use cap_std::fs::Dir;
use serde::{Deserialize, Serialize};
use tonic::Status;

/// Runs blocking disk work from a request handler without stalling the
/// runtime's other tasks.
pub(crate) fn blocking<R>(f: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

/// Copies the contents of directory `from` into `to` (which exists);
/// files already there are overwritten, so a copy cut short is redone whole.
pub fn copy_tree(from: &Path, to: &Path) -> io::Result<()> {
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        let kind = entry.file_type()?;
        if kind.is_dir() {
            std::fs::create_dir_all(&target)?;
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// Bytes used by the files under `dir`.
pub fn used_bytes(dir: &Path) -> io::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            total += used_bytes(&entry.path())?;
        } else if kind.is_file() {
            total += entry.metadata()?.len();
        }
    }
    Ok(total)
}

pub(crate) fn read_json<T: for<'de> Deserialize<'de>>(root: &Dir, path: &str) -> Result<Option<T>, Status> {
    match root.read_to_string(path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| Status::data_loss(format!("{path} is corrupt: {e}"))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(state_dir_error(e)),
    }
}

/// Writes a temporary file and renames it over the target, so a crash leaves
/// either the old record or the new one.
pub(crate) fn write_json<T: Serialize>(root: &Dir, path: &str, value: &T, fsync: bool) -> Result<(), Status> {
    let tmp = format!("{path}.tmp");
    let bytes = serde_json::to_vec_pretty(value).map_err(|e| Status::internal(e.to_string()))?;
    let mut file = root.create(&tmp).map_err(state_dir_error)?;
    file.write_all(&bytes).map_err(state_dir_error)?;
    if fsync {
        file.sync_all().map_err(state_dir_error)?;
    }
    drop(file);
    root.rename(&tmp, root, path).map_err(state_dir_error)?;
    Ok(())
}

/// A failed call on the state directory's disk, as the CO should take it.
pub(crate) fn state_dir_error(e: io::Error) -> Status {
    disk_status(format!("state directory: {e}"), &e)
}

/// A disk call's failure: a disk that is full, gone read-only or failing
/// its I/O is a condition to wait out (the CO retries RESOURCE_EXHAUSTED and
/// UNAVAILABLE), not the plugin's own fault (INTERNAL).
pub(crate) fn disk_status(message: String, e: &io::Error) -> Status {
    match e.kind() {
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded => Status::resource_exhausted(message),
        io::ErrorKind::ReadOnlyFilesystem => Status::unavailable(message),
        _ if e.raw_os_error() == Some(libc::EIO) => Status::unavailable(message),
        _ => Status::internal(message),
    }
}

/// Removes a record; one already gone is removed (a removal whose
/// directory sync failed, asked again).
pub(crate) fn remove_record(root: &Dir, path: &str) -> Result<(), Status> {
    match root.remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(state_dir_error(e)),
        _ => Ok(()),
    }
}
