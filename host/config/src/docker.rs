//! `[docker]`: Berth as Docker's and Podman's volume plugin for one of this
//! server's in-process nodes; and `docker_create_from`, which agents' nodes
//! may create and remove volumes from their Docker.

use std::path::{Path, PathBuf};
use std::time::Duration;

use berth_model::settings::docker_socket;
use serde::Deserialize;

use crate::{ConfigError, invalid, name_ok};

pub use berth_model::settings::DOCKER_SOCKET as DEFAULT_SOCKET;

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
    let socket = docker_socket(
        raw.socket.as_deref().map(resolve),
        raw.socket_mode.as_deref(),
        raw.wait.as_deref(),
    )?;
    Ok(Some(DockerConfig {
        node: raw.node,
        socket: socket.socket,
        socket_mode: socket.socket_mode,
        create_volumes: raw.create_volumes,
        plugin: raw.plugin,
        wait: socket.wait,
    }))
}

/// A list of names a key allows, none by default or every one with `["*"]`:
/// the agents' nodes whose Docker may create and remove volumes
/// (`docker_create_from`; every other node's may only use them), the
/// secrets a Docker user may name (`docker_secrets`).
#[derive(Clone, Debug, Default, PartialEq)]
pub enum CreateFrom {
    #[default]
    None,
    Nodes(Vec<String>),
    /// `["*"]`: every one.
    Every,
}

impl CreateFrom {
    pub(crate) fn parse(key: &str, raw: Vec<String>) -> Result<CreateFrom, ConfigError> {
        if raw.is_empty() {
            return Ok(CreateFrom::None);
        }
        if raw.iter().any(|n| n == "*") {
            if raw.len() > 1 {
                return Err(invalid(key, "\"*\" already means every one: list it alone"));
            }
            return Ok(CreateFrom::Every);
        }
        for n in &raw {
            name_ok(key, n)?;
        }
        Ok(CreateFrom::Nodes(raw))
    }

    pub fn allows(&self, node: &str) -> bool {
        match self {
            CreateFrom::None => false,
            CreateFrom::Nodes(nodes) => nodes.iter().any(|n| n == node),
            CreateFrom::Every => true,
        }
    }
}

/// `namespace_secrets`: per namespace (a DNS label), the secrets its
/// volumes may name, in the same form as `docker_secrets`.
pub(crate) fn namespace_secrets(
    raw: std::collections::BTreeMap<String, Vec<String>>,
) -> Result<std::collections::BTreeMap<String, CreateFrom>, ConfigError> {
    raw.into_iter()
        .map(|(namespace, secrets)| {
            let key = format!("namespace_secrets.{namespace}");
            berth_model::Namespace::parse(&namespace).map_err(|e| invalid(&key, e.to_string()))?;
            Ok((namespace, CreateFrom::parse(&key, secrets)?))
        })
        .collect()
}

/// `docker_namespaces`: the namespace each node's Docker works in, by node
/// name (`"*"`: every node not named); `default` for a node none names.
/// A Docker user is then a tenant like the rest: its names, quota and
/// secrets are its namespace's.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DockerNamespaces(std::collections::BTreeMap<String, berth_model::Namespace>);

impl DockerNamespaces {
    pub(crate) fn parse(
        raw: std::collections::BTreeMap<String, String>,
    ) -> Result<DockerNamespaces, ConfigError> {
        raw.into_iter()
            .map(|(node, namespace)| {
                let key = format!("docker_namespaces.{node}");
                if node != "*" {
                    name_ok(&key, &node)?;
                }
                let namespace =
                    berth_model::Namespace::parse(&namespace).map_err(|e| invalid(&key, e.to_string()))?;
                Ok((node, namespace))
            })
            .collect::<Result<_, ConfigError>>()
            .map(DockerNamespaces)
    }

    /// The namespace `node`'s Docker works in.
    pub fn of(&self, node: &str) -> berth_model::Namespace {
        self.0
            .get(node)
            .or_else(|| self.0.get("*"))
            .cloned()
            .unwrap_or_default()
    }
}
