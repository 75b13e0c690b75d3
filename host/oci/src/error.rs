//! What can go wrong between Berth and a registry, each naming what it was about.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum OciError {
    #[error("{0:?} is not an OCI reference (oci://HOST[:PORT]/REPOSITORY[:TAG][@sha256:DIGEST]): {1}")]
    Reference(String, &'static str),
    #[error("{0:?} is not a sha256 digest (sha256: and 64 lowercase hex digits)")]
    Digest(String),
    #[error("{what} from {at} does not match its digest: expected {expected}, got {actual}")]
    DigestMismatch {
        what: &'static str,
        at: String,
        expected: String,
        actual: String,
    },
    #[error(
        "{0}: plain HTTP is allowed to a registry on loopback only; use HTTPS (with `ca` for a private CA)"
    )]
    PlainHttp(String),
    #[error("registry {registry}: {source}")]
    Connect {
        registry: String,
        #[source]
        source: std::io::Error,
    },
    #[error("registry {registry}: {why}")]
    Http { registry: String, why: String },
    #[error("registry {registry}: {what} answered {status}: {message}")]
    Status {
        registry: String,
        what: String,
        status: u16,
        message: String,
    },
    #[error("registry {registry}: {what} is larger than {max} bytes")]
    TooLarge {
        registry: String,
        what: String,
        max: usize,
    },
    #[error("{at}: not a WebAssembly policy artifact: {why}")]
    Artifact { at: String, why: String },
    #[error("{path}: {why}")]
    File { path: PathBuf, why: String },
    #[error("module {module} is refused: {why}")]
    Signature { module: String, why: String },
}

impl OciError {
    pub(crate) fn file(path: &std::path::Path, why: impl std::fmt::Display) -> OciError {
        OciError::File {
            path: path.to_path_buf(),
            why: why.to_string(),
        }
    }
}

/// A policy module that could not be fetched or checked, named as the
/// operator named it.
#[derive(Debug, thiserror::Error)]
#[error("policy module {module} ({reference}): {error}")]
pub struct FetchError {
    pub module: String,
    pub reference: String,
    #[source]
    pub error: Box<OciError>,
}
