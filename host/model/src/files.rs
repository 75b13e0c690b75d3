//! A file or directory Berth could not create, read or write: what it was
//! doing, and where. Every crate's error for its own files holds one.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
#[error("{doing} {}: {source}", .path.display())]
pub struct FileError {
    pub doing: &'static str,
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

impl FileError {
    /// For `map_err`: `doing` at `path` failed.
    pub fn at(doing: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> FileError {
        let path = path.to_path_buf();
        move |source| FileError { doing, path, source }
    }
}
