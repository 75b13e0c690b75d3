//! `[docker]`: Berth as Docker's and Podman's volume plugin for one of this
//! server's in-process nodes.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::{ConfigError, duration, invalid};

/// Where Docker looks for plugins' sockets.
pub const DEFAULT_SOCKET: &str = "/run/docker/plugins/berth.sock";

#[derive(Clone, Debug, PartialEq)]
pub struct DockerConfig {
    /// The in-process `[[node]]` this machine's Docker runs on.
    pub node: String,
    /// Docker finds the plugin by the socket's name (`-d berth` for `berth.sock`).
    pub socket: PathBuf,
    /// Never world-writable: 0600 (root's Docker) by default, 0660 for a group.
    pub socket_mode: u32,
    /// Whether this Docker may create and remove volumes (else only use them).
    pub create_volumes: bool,
    /// The plugin a volume is made on when `-o plugin` is not given.
    pub plugin: Option<String>,
    /// How long Docker's requests wait for Berth.
    pub wait: Duration,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDocker {
    node: String,
    socket: Option<PathBuf>,
    socket_mode: Option<String>,
    #[serde(default)]
    create_volumes: bool,
    plugin: Option<String>,
    wait: Option<String>,
}

pub(crate) fn docker(
    raw: Option<RawDocker>,
    nodes: &[String],
    plugins: &[String],
    resolve: impl Fn(&Path) -> PathBuf,
) -> Result<Option<DockerConfig>, ConfigError> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    if !nodes.contains(&raw.node) {
        return Err(invalid(
            "docker.node",
            format!(
                "{:?} is not one of this server's [[node]] tables ({nodes:?})",
                raw.node
            ),
        ));
    }
    if let Some(p) = raw.plugin.as_ref().filter(|p| !plugins.contains(p)) {
        return Err(invalid(
            "docker.plugin",
            format!("{p:?} is not one of the [[plugin]] tables ({plugins:?})"),
        ));
    }
    let socket_mode = crate::file_mode("docker.socket_mode", raw.socket_mode.as_deref())?;
    if socket_mode & 0o002 != 0 {
        return Err(invalid(
            "docker.socket_mode",
            format!(
                "{socket_mode:o} lets anyone on the machine create, mount and remove volumes; use 0600 or 0660"
            ),
        ));
    }
    let wait = duration("docker.wait", raw.wait.as_deref(), "2m")?;
    Ok(Some(DockerConfig {
        node: raw.node,
        socket: raw
            .socket
            .as_deref()
            .map_or_else(|| PathBuf::from(DEFAULT_SOCKET), resolve),
        socket_mode,
        create_volumes: raw.create_volumes,
        plugin: raw.plugin,
        wait,
    }))
}
