//! The files Berth keeps state in, for their owner only: records hold
//! names, labels, parameters and contexts, which other local users must not
//! read.

use std::path::Path;

/// Creates `dir` (and missing parents) for the owner only; warns when an
/// existing one lets others in. Records hold names, labels, parameters and
/// contexts: other local users must not read them.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::metadata(dir) {
        Ok(meta) => {
            warn_if_shared(
                dir,
                &meta,
                "the state directory is open to other users; chmod 700 it",
            );
            Ok(())
        }
        Err(_) => std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir),
    }
}

/// Creates the store file for the owner only (before redb writes anything
/// into it); warns when an existing one lets others read it.
pub fn private_file(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::metadata(path) {
        Ok(meta) => {
            warn_if_shared(
                path,
                &meta,
                "the store file is readable by other users; chmod 600 it",
            );
            Ok(())
        }
        Err(_) => std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map(drop)
            .map_err(|e| std::io::Error::new(e.kind(), format!("creating {}: {e}", path.display()))),
    }
}

pub(crate) fn warn_if_shared(path: &Path, meta: &std::fs::Metadata, advice: &str) {
    use std::os::unix::fs::PermissionsExt;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        tracing::warn!(path = %path.display(), mode = format!("{mode:04o}"), "{advice}");
    }
}
