//! The API socket: bound owner-only (or as configured) from its first moment.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::model::files::FileError;

/// Why a socket could not be bound; each names the path.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("{} exists and is not a socket", .0.display())]
    NotASocket(PathBuf),
    #[error("{} is in use: is another berth serving there?", .0.display())]
    InUse(PathBuf),
    #[error(transparent)]
    File(#[from] FileError),
}

/// Binds the API socket with `mode` before anyone can connect, replacing a
/// stale socket; refuses to replace anything that is not a socket.
pub fn bind(path: &Path, mode: u32) -> Result<tokio::net::UnixListener, SocketError> {
    use std::os::unix::fs::FileTypeExt;
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(SocketError::NotASocket(path.to_path_buf()));
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(SocketError::InUse(path.to_path_buf()));
        }
        std::fs::remove_file(path).map_err(FileError::at("removing stale socket", path))?;
    }
    if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(FileError::at("creating", dir))?;
    }
    // SAFETY: umask only affects this process's file creation mode; the
    // socket must never exist, even briefly, with looser permissions.
    let old = unsafe { libc::umask(0o777 & !mode as libc::mode_t) };
    let listener = tokio::net::UnixListener::bind(path);
    unsafe { libc::umask(old) };
    let listener = listener.map_err(FileError::at("binding", path))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(FileError::at("setting the mode of", path))?;
    Ok(listener)
}
