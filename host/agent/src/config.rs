//! `agent.toml`: what `berth agent` runs. Parsed strictly (unknown keys are
//! errors); every error names the key at fault. Relative paths are relative
//! to the file's directory.
//!
//! ```toml
//! node = "node-a"                        # this node's name in the cluster
//! labels = { zone = "a", disk = "ssd" }  # for placement
//! server = "https://berth.example:7443"  # the TLS endpoint; or unix:///run/berth/cluster.sock;
//!                                        # or a list of every server's, tried in turn to find the leader
//! token = "berth1...."                   # to join the first time (`berth cluster token`)
//! dir = "/var/lib/berth/agent"           # the agent's record; staging/ and publish/ below
//! plugin_dir = "/var/lib/berth/plugins"  # optional: sockets appearing here are registered
//! fingerprint_interval = "30s"
//! heartbeat_interval = "5s"
//! deadline = "15s"                       # each node plugin call
//! metrics = "127.0.0.1:9465"             # /metrics, /healthz, /readyz over HTTP; off by default
//!
//! [plugins]                              # the operator's plugin names, as in berth.toml
//! hostpath = "unix:///run/csi/node.sock"
//!
//! [docker]                               # Docker's and Podman's volume plugin on this node
//! socket = "/run/docker/plugins/berth.sock"  # the default: `docker volume create -d berth`
//! socket_mode = "0600"                   # or "0660"; never world-writable
//! plugin = "hostpath"                    # the CSI plugin when `-o plugin=` is not given
//! wait = "2m"                            # how long Docker's requests wait for Berth
//! ```
//!
//! Whether this node's Docker may create and remove volumes is the
//! server's to say (`docker_create_from` in `berth.toml`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use berth_csi::Endpoint;
use berth_model::settings::{
    ConfigError, DockerSocket, docker_socket, duration, invalid, load_file, metrics_address, name_ok,
};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    node: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    server: OneOrMany,
    token: Option<String>,
    dir: PathBuf,
    plugin_dir: Option<PathBuf>,
    fingerprint_interval: Option<String>,
    heartbeat_interval: Option<String>,
    deadline: Option<String>,
    metrics: Option<String>,
    #[serde(default)]
    plugins: BTreeMap<String, String>,
    docker: Option<RawDocker>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDocker {
    socket: Option<PathBuf>,
    socket_mode: Option<String>,
    plugin: Option<String>,
    wait: Option<String>,
}

/// `[docker]`: Docker's and Podman's volume plugin, served on this node.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentDocker {
    pub socket: DockerSocket,
    /// The CSI plugin (the server's name for it) when `-o plugin` is not given.
    pub plugin: Option<String>,
}

/// `server`: one endpoint, or every server's.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

/// Where the server's cluster endpoint is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerAddress {
    /// A unix socket on this machine (its mode guards it).
    Unix(Endpoint),
    /// The TLS endpoint: `https://host:port`.
    Tls { host: String, port: u16 },
}

impl ServerAddress {
    fn parse_tls(rest: &str) -> Result<ServerAddress, ConfigError> {
        let rest = rest.trim_end_matches('/');
        let (host, port) = rest.rsplit_once(':').ok_or_else(|| {
            invalid(
                "server",
                format!("https://{rest} needs a port, like https://berth.example:7443"),
            )
        })?;
        let port = port
            .parse()
            .map_err(|_| invalid("server", format!("{port:?} is not a port")))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(invalid("server", "the server's host is empty"));
        }
        Ok(ServerAddress::Tls {
            host: host.to_string(),
            port,
        })
    }
}

/// `host:port` (a name or address and a port, no path): what an operator
/// means as the TLS endpoint, never a socket file's name.
fn looks_like_host_and_port(text: &str) -> bool {
    !text.contains('/')
        && !text.starts_with("unix:")
        && text.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty() && !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit())
        })
}

impl std::fmt::Display for ServerAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerAddress::Unix(e) => write!(f, "{e}"),
            ServerAddress::Tls { host, port } => write!(f, "https://{host}:{port}"),
        }
    }
}

#[derive(Clone, Debug)]
pub struct AgentConfig {
    pub node: String,
    pub labels: BTreeMap<String, String>,
    /// The servers' cluster endpoints: only the leader's answers, so they
    /// are tried in turn.
    pub servers: Vec<ServerAddress>,
    /// The join token, needed until the agent has its certificate.
    pub token: Option<String>,
    pub dir: PathBuf,
    pub plugin_dir: Option<PathBuf>,
    pub fingerprint_interval: Duration,
    pub heartbeat_interval: Duration,
    pub deadline: Duration,
    /// Where `/metrics`, `/healthz` and `/readyz` are served; none by default.
    pub metrics: Option<std::net::SocketAddr>,
    pub plugins: BTreeMap<String, Endpoint>,
    pub docker: Option<AgentDocker>,
}

impl AgentConfig {
    pub fn load(path: &Path) -> Result<AgentConfig, ConfigError> {
        load_file(path, AgentConfig::parse)
    }

    pub fn parse(text: &str, base: &Path) -> Result<AgentConfig, ConfigError> {
        let raw: Raw = berth_model::strict_toml::from_toml(text)?;
        let resolve = |p: &Path| {
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                base.join(p)
            }
        };
        name_ok("node", &raw.node)?;
        let endpoint = |key: &str, text: &str| {
            Endpoint::parse(text)
                .and_then(|e| e.resolve(base))
                .map_err(|e| invalid(key, e))
        };
        let mut plugins = BTreeMap::new();
        for (name, ep) in &raw.plugins {
            name_ok(&format!("plugins.{name}"), name)?;
            plugins.insert(name.clone(), endpoint(&format!("plugins.{name}"), ep)?);
        }
        if plugins.len() > berth_model::bounds::NODE_PLUGINS_MAX {
            return Err(invalid(
                "plugins",
                format!(
                    "{} plugins; a node runs at most {}",
                    plugins.len(),
                    berth_model::bounds::NODE_PLUGINS_MAX
                ),
            ));
        }
        berth_model::bounds::labels(raw.labels.iter()).map_err(|e| invalid("labels", e))?;
        if plugins.is_empty() && raw.plugin_dir.is_none() {
            return Err(invalid(
                "plugins",
                "no node plugin: name sockets under [plugins], or set plugin_dir",
            ));
        }
        let servers = match raw.server {
            OneOrMany::One(one) => vec![one],
            OneOrMany::Many(many) => many,
        };
        if servers.is_empty() {
            return Err(invalid("server", "name at least one server's cluster endpoint"));
        }
        let servers = servers
            .iter()
            .map(|text| match text.strip_prefix("https://") {
                Some(rest) => ServerAddress::parse_tls(rest),
                None if text.starts_with("http://") => Err(invalid(
                    "server",
                    format!("{text}: the cluster endpoint speaks TLS only: write https://…"),
                )),
                None if looks_like_host_and_port(text) => Err(invalid(
                    "server",
                    format!(
                        "{text:?} is a host and port: write \"https://{text}\" for the server's TLS endpoint (or unix:///path for a socket on this machine)"
                    ),
                )),
                None => Ok(ServerAddress::Unix(endpoint("server", text)?)),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let docker = raw
            .docker
            .map(|d| {
                if let Some(p) = &d.plugin {
                    name_ok("docker.plugin", p)?;
                }
                Ok::<_, ConfigError>(AgentDocker {
                    socket: docker_socket(
                        d.socket.as_deref().map(resolve),
                        d.socket_mode.as_deref(),
                        d.wait.as_deref(),
                    )?,
                    plugin: d.plugin,
                })
            })
            .transpose()?;
        let heartbeat_interval = duration("heartbeat_interval", raw.heartbeat_interval.as_deref(), "5s")?;
        if heartbeat_interval < Duration::from_millis(10) {
            return Err(invalid("heartbeat_interval", "must be at least 10ms"));
        }
        Ok(AgentConfig {
            node: raw.node,
            labels: raw.labels,
            servers,
            token: raw.token,
            dir: resolve(&raw.dir),
            plugin_dir: raw.plugin_dir.as_deref().map(resolve),
            fingerprint_interval: duration(
                "fingerprint_interval",
                raw.fingerprint_interval.as_deref(),
                "30s",
            )?,
            heartbeat_interval,
            deadline: duration("deadline", raw.deadline.as_deref(), "15s")?,
            metrics: metrics_address(raw.metrics.as_deref())?,
            plugins,
            docker,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_config_parses_with_paths_from_its_directory() {
        let c = AgentConfig::parse(
            r#"
            node = "node-a"
            labels = { zone = "a" }
            server = "unix:cluster.sock"
            dir = "agent"
            plugin_dir = "/var/lib/berth/plugins"
            heartbeat_interval = "1s"
            [plugins]
            sample = "unix:///run/csi/node.sock"
            "#,
            Path::new("/etc/berth"),
        )
        .unwrap();
        assert_eq!(c.node, "node-a");
        assert_eq!(
            c.servers,
            [ServerAddress::Unix(
                Endpoint::parse("/etc/berth/cluster.sock").unwrap()
            )]
        );
        let tls = AgentConfig::parse(
            "node = \"a\"\nserver = \"https://10.0.0.1:7443\"\ndir = \"d\"\n[plugins]\nx = \"/x.sock\"",
            Path::new("/"),
        )
        .unwrap();
        assert_eq!(
            tls.servers,
            [ServerAddress::Tls {
                host: "10.0.0.1".into(),
                port: 7443
            }]
        );
        let several = AgentConfig::parse(
            "node = \"a\"\nserver = [\"https://s1:7443\", \"https://s2:7443\"]\ndir = \"d\"\n[plugins]\nx = \"/x.sock\"",
            Path::new("/"),
        )
        .unwrap();
        assert_eq!(several.servers.len(), 2, "every server's endpoint, in order");
        assert_eq!(several.servers[1].to_string(), "https://s2:7443");
        assert_eq!(c.dir, Path::new("/etc/berth/agent"));
        assert_eq!(c.heartbeat_interval, Duration::from_secs(1));
        assert_eq!(c.fingerprint_interval, Duration::from_secs(30));
        assert_eq!(c.plugins["sample"].path(), Path::new("/run/csi/node.sock"));
    }

    #[test]
    fn errors_name_the_key() {
        let base = Path::new("/etc/berth");
        let key = |text: &str| {
            AgentConfig::parse(text, base)
                .unwrap_err()
                .key()
                .map(str::to_string)
        };
        let ok = "server = \"unix:///s.sock\"\ndir = \"d\"\n";
        assert_eq!(
            key(&format!("node = \"a b\"\n{ok}[plugins]\nx = \"/x.sock\"")).as_deref(),
            Some("node")
        );
        assert_eq!(key(&format!("node = \"a\"\n{ok}")).as_deref(), Some("plugins"));
        assert_eq!(
            key(&format!(
                "node = \"a\"\n{ok}heartbeat_interval = \"soon\"\n[plugins]\nx = \"/x.sock\""
            ))
            .as_deref(),
            Some("heartbeat_interval")
        );
        assert!(matches!(
            AgentConfig::parse(&format!("node = \"a\"\n{ok}colour = 1\n"), base),
            Err(ConfigError::Syntax(_))
        ));
        assert_eq!(
            key(&format!(
                "node = \"a\"\n{ok}metrics = \"9465\"\n[plugins]\nx = \"/x.sock\""
            ))
            .as_deref(),
            Some("metrics")
        );
        let with_metrics =
            format!("node = \"a\"\n{ok}metrics = \"127.0.0.1:9465\"\n[plugins]\nx = \"/x.sock\"");
        let c = AgentConfig::parse(&with_metrics, base).unwrap();
        assert_eq!(c.metrics, Some("127.0.0.1:9465".parse().unwrap()));
        assert_eq!(c.docker, None, "no Docker plugin unless asked for");
    }

    #[test]
    fn docker_is_served_when_asked_for_and_never_world_writable() {
        let base = Path::new("/etc/berth");
        let with = |table: &str| {
            AgentConfig::parse(
                &format!(
                    "node = \"a\"\nserver = \"unix:///s.sock\"\ndir = \"d\"\n[plugins]\nx = \"/x.sock\"\n[docker]\n{table}"
                ),
                base,
            )
        };
        let d = with("").unwrap().docker.unwrap();
        assert_eq!(d.socket.socket, Path::new(berth_model::settings::DOCKER_SOCKET));
        assert_eq!(
            (d.socket.socket_mode, d.socket.wait),
            (0o600, Duration::from_secs(120))
        );
        let d = with("socket = \"docker.sock\"\nsocket_mode = \"0660\"\nplugin = \"x\"\nwait = \"30s\"\n")
            .unwrap()
            .docker
            .unwrap();
        assert_eq!(d.socket.socket, Path::new("/etc/berth/docker.sock"));
        assert_eq!(d.plugin.as_deref(), Some("x"));
        for (table, key) in [
            ("socket_mode = \"0666\"\n", "docker.socket_mode"),
            ("plugin = \"../x\"\n", "docker.plugin"),
            ("wait = \"soon\"\n", "docker.wait"),
        ] {
            assert_eq!(with(table).unwrap_err().key(), Some(key), "{table}");
        }
        assert!(
            matches!(with("create_volumes = true\n"), Err(ConfigError::Syntax(_))),
            "the server's to say"
        );
    }

    #[test]
    fn a_host_and_port_without_a_scheme_is_refused_with_what_to_write() {
        for (server, says) in [
            ("127.0.0.1:7443", "write \"https://127.0.0.1:7443\""),
            ("berth.example:7443", "https://berth.example:7443"),
            ("http://berth.example:7443", "TLS only"),
        ] {
            let text = format!("node = \"n\"\nserver = \"{server}\"\ndir = \"d\"\nplugin_dir = \"p\"\n");
            let err = AgentConfig::parse(&text, Path::new("/etc/berth"))
                .unwrap_err()
                .to_string();
            assert!(err.contains("server") && err.contains(says), "{server}: {err}");
        }
        let unix = AgentConfig::parse(
            "node = \"n\"\nserver = \"cluster.sock\"\ndir = \"d\"\nplugin_dir = \"p\"\n",
            Path::new("/etc/berth"),
        );
        assert!(unix.is_ok(), "a socket's file name is still a socket");
    }
}
