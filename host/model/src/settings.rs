//! Reading a config file (`berth.toml`, `agent.toml`): the error that names
//! the key at fault, and the value rules both files share.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why a config was refused; [`ConfigError::Invalid`] names the key at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Not TOML, or keys and types that `berth.toml` does not have (the
    /// message names the line and the key).
    #[error("{0}")]
    Syntax(String),
    #[error("{key}: {message}")]
    Invalid { key: String, message: String },
    #[error("{}: {error}", path.display())]
    InFile { path: PathBuf, error: Box<ConfigError> },
}

impl ConfigError {
    /// The key at fault, when one is.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Invalid { key, .. } => Some(key),
            ConfigError::InFile { error, .. } => error.key(),
            _ => None,
        }
    }
}

pub fn invalid(key: impl Into<String>, message: impl ToString) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        message: message.to_string(),
    }
}

/// Reads a config file and parses it with relative paths taken from its
/// directory (made absolute: paths handed to CSI plugins must be); errors
/// name the file.
pub fn load_file<T>(
    path: &Path,
    parse: impl FnOnce(&str, &Path) -> Result<T, ConfigError>,
) -> Result<T, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let base = std::path::absolute(dir).map_err(|source| ConfigError::Read {
        path: dir.to_path_buf(),
        source,
    })?;
    parse(&text, &base).map_err(|e| ConfigError::InFile {
        path: path.to_path_buf(),
        error: Box::new(e),
    })
}

/// `metrics = "host:port"`, in `berth.toml` and `agent.toml`.
pub fn metrics_address(value: Option<&str>) -> Result<Option<std::net::SocketAddr>, ConfigError> {
    value
        .map(|a| {
            a.parse().map_err(|_| {
                invalid(
                    "metrics",
                    format!("{a:?} is not an address like \"127.0.0.1:9464\" (an IP address and a port)"),
                )
            })
        })
        .transpose()
}

pub fn duration(key: &str, value: Option<&str>, default: &str) -> Result<Duration, ConfigError> {
    let text = value.unwrap_or(default);
    humantime::parse_duration(text)
        .map_err(|e| invalid(key, format!("{text:?} is not a duration like \"15s\" ({e})")))
}

/// Names are used in paths and keys: keep them plain.
pub fn name_ok(key: &str, name: &str) -> Result<(), ConfigError> {
    crate::bounds::name(name).map_err(|_| {
        invalid(
            key,
            format!("{name:?} must be 1 to 63 letters, digits, '-', '_' or '.', not starting with '.'"),
        )
    })
}

/// An octal file mode as config files write it (`"0600"`); 0600 unset.
pub fn file_mode(key: &str, text: Option<&str>) -> Result<u32, ConfigError> {
    let Some(m) = text else {
        return Ok(0o600);
    };
    u32::from_str_radix(m.trim_start_matches("0o"), 8)
        .ok()
        .filter(|m| *m <= 0o777)
        .ok_or_else(|| invalid(key, format!("{m:?} is not an octal file mode like \"0600\"")))
}

/// Where Docker looks for plugins' sockets; `-d berth` finds this one.
pub const DOCKER_SOCKET: &str = "/run/docker/plugins/berth.sock";

/// Where and how Docker's and Podman's volume plugin is served, as
/// `[docker]` in `berth.toml` and in `agent.toml` both write it.
#[derive(Clone, Debug, PartialEq)]
pub struct DockerSocket {
    pub socket: PathBuf,
    /// Never world-writable: 0600 (root's Docker) by default, 0660 for a group.
    pub socket_mode: u32,
    /// How long Docker's requests wait for Berth.
    pub wait: Duration,
}

/// `[docker]`'s `socket` (already resolved against the file's directory),
/// `socket_mode` and `wait`.
pub fn docker_socket(
    socket: Option<PathBuf>,
    socket_mode: Option<&str>,
    wait: Option<&str>,
) -> Result<DockerSocket, ConfigError> {
    let socket_mode = file_mode("docker.socket_mode", socket_mode)?;
    if socket_mode & 0o002 != 0 {
        return Err(invalid(
            "docker.socket_mode",
            format!(
                "{socket_mode:o} lets anyone on the machine create, mount and remove volumes; use 0600 or 0660"
            ),
        ));
    }
    Ok(DockerSocket {
        socket: socket.unwrap_or_else(|| PathBuf::from(DOCKER_SOCKET)),
        socket_mode,
        wait: duration("docker.wait", wait, "2m")?,
    })
}
