//! CSI endpoints: plugins listen on unix domain sockets.

use std::fmt;
use std::path::{Path, PathBuf};

/// `sun_path` holds 108 bytes including the terminating NUL on Linux.
const MAX_SOCKET_PATH: usize = 107;

/// Why an endpoint was refused; each names the text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    #[error("endpoint is empty; expected unix:///path/to/csi.sock")]
    Empty,
    #[error("endpoint {0:?} must name an absolute path after unix:// (unix:///path/to/csi.sock)")]
    NotAbsolute(String),
    #[error(
        "endpoint {text:?} uses scheme {scheme:?}; CSI plugins listen on unix sockets (unix:///path/to/csi.sock)"
    )]
    NotUnix { text: String, scheme: String },
    #[error("endpoint {0:?} names no socket path")]
    NoPath(String),
    #[error("socket path {path:?} is {len} bytes; unix sockets allow at most {MAX_SOCKET_PATH}")]
    TooLong { path: String, len: usize },
}

/// A plugin's unix socket, parsed from `unix:///abs/path`, `unix:path` or a bare path.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Endpoint {
    path: PathBuf,
}

impl Endpoint {
    pub fn parse(text: &str) -> Result<Self, EndpointError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(EndpointError::Empty);
        }
        let path = if let Some(rest) = text.strip_prefix("unix://") {
            if !rest.starts_with('/') {
                return Err(EndpointError::NotAbsolute(text.into()));
            }
            rest
        } else if let Some(rest) = text.strip_prefix("unix:") {
            rest
        } else if let Some((scheme, _)) = text.split_once("://") {
            return Err(EndpointError::NotUnix {
                text: text.into(),
                scheme: scheme.into(),
            });
        } else {
            text
        };
        if path.is_empty() {
            return Err(EndpointError::NoPath(text.into()));
        }
        Endpoint::at(PathBuf::from(path))
    }

    /// The endpoint at `path`, checked against the socket path limit.
    fn at(path: PathBuf) -> Result<Self, EndpointError> {
        let len = path.as_os_str().len();
        if len > MAX_SOCKET_PATH {
            return Err(EndpointError::TooLong {
                path: path.display().to_string(),
                len,
            });
        }
        Ok(Endpoint { path })
    }

    /// A relative endpoint taken from `base` (a config file's directory);
    /// the path limit applies to the resolved path.
    pub fn resolve(self, base: &Path) -> Result<Self, EndpointError> {
        if self.path.is_absolute() {
            Ok(self)
        } else {
            Endpoint::at(base.join(&self.path))
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_absolute() {
            write!(f, "unix://{}", self.path.display())
        } else {
            write!(f, "unix:{}", self.path.display())
        }
    }
}

impl std::str::FromStr for Endpoint {
    type Err = EndpointError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Endpoint::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_usual_spellings() {
        let abs = Endpoint::parse("unix:///run/csi/csi.sock").unwrap();
        assert_eq!(abs.path(), Path::new("/run/csi/csi.sock"));
        assert_eq!(abs.to_string(), "unix:///run/csi/csi.sock");
        assert_eq!(
            Endpoint::parse("/run/csi.sock").unwrap(),
            Endpoint::parse("unix:/run/csi.sock").unwrap()
        );
        let rel = Endpoint::parse("unix:csi.sock").unwrap();
        assert_eq!(rel.path(), Path::new("csi.sock"));
        assert_eq!(rel.to_string(), "unix:csi.sock");
    }

    #[test]
    fn rejects_with_a_reason() {
        let cases = [
            ("", "empty"),
            ("tcp://127.0.0.1:10000", "scheme \"tcp\""),
            ("unix://relative.sock", "absolute path"),
            ("unix:", "names no socket path"),
        ];
        for (input, needle) in cases {
            let err = Endpoint::parse(input).unwrap_err().to_string();
            assert!(err.contains(needle), "{input:?}: {err}");
        }
        let long = format!("/{}", "x".repeat(120));
        assert!(
            Endpoint::parse(&long)
                .unwrap_err()
                .to_string()
                .contains("at most 107")
        );
    }
}
