//! The API socket: bound owner-only (or as configured) from its first moment.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Binds the API socket with `mode` before anyone can connect, replacing a
/// stale socket; refuses to replace anything that is not a socket.
pub fn bind(path: &Path, mode: u32) -> Result<tokio::net::UnixListener, String> {
    use std::os::unix::fs::FileTypeExt;
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(format!("{} exists and is not a socket", path.display()));
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(format!(
                "{} is in use: is another berth serving there?",
                path.display()
            ));
        }
        std::fs::remove_file(path).map_err(|e| format!("removing stale socket {}: {e}", path.display()))?;
    }
    if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    // SAFETY: umask only affects this process's file creation mode; the
    // socket must never exist, even briefly, with looser permissions.
    let old = unsafe { libc::umask(0o777 & !mode as libc::mode_t) };
    let listener = tokio::net::UnixListener::bind(path);
    unsafe { libc::umask(old) };
    let listener = listener.map_err(|e| format!("binding {}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("setting the mode of {}: {e}", path.display()))?;
    Ok(listener)
}
