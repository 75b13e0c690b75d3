//! `berth.toml`: what `berth serve` runs. Parsed strictly (unknown keys are
//! errors) and validated into [`Config`]; every error names the key at fault.
//! Relative paths are relative to the config file's directory.
//!
//! ```toml
//! state = "state/berth.redb"            # the embedded store (one file)
//! api = "unix:///run/berth/berth.sock"  # default: berth.sock beside the state file
//! socket_mode = "0600"
//! workers = 256
//! fingerprint_interval = "30s"
//! secrets_dir = "secrets"               # one file per secret, KEY=VALUE lines, mode 0600
//! cluster = "unix:///run/berth/cluster.sock"  # where `berth agent`s on this machine dial; none by default
//! cluster_address = "0.0.0.0:7443"     # the TLS endpoint agents on other machines dial; none by default
//! cluster_names = ["berth.example"]     # names and addresses in the server's certificate
//! api_address = "0.0.0.0:7444"          # the API over TLS for remote callers with ACL tokens; none by default
//! api_names = ["berth.example"]         # names and addresses in the API's certificate
//! api_client_ca = "clients-ca.pem"      # client certificates it issued are identities; none by default
//! audit_log = "audit.log"               # JSON lines of every change and refusal (default: beside the state file)
//! heartbeat_timeout = "15s"             # an agent silent this long is down
//! join_token_max_ttl = "24h"            # the longest a join token may live
//! joins_per_minute = 60                 # joins tried from everywhere (one address: a sixth)
//! heartbeats_per_second = 150           # past this, agents are asked to beat less often
//! cluster_connections_per_address = 8192 # TLS connections one address may hold (default: half the endpoint's)
//! metrics = "127.0.0.1:9464"            # /metrics, /healthz, /readyz over HTTP; off by default
//! events_per_volume = 10                # each volume keeps its latest events (0: none)
//! decision_log = 1000                   # policy decisions kept per kind, in the store (0: none)
//! shadow_every_decision = false         # shadows in idle time, within 5 % of a core, dropping the rest (counted)
//! instances_made_ahead = 2              # instances of each policy module ready before a decision needs one (0: none)
//! docker_create_from = ["node-b"]       # agents' nodes whose Docker may create and remove volumes ("*": all)
//! docker_secrets = ["docker-db"]        # the secrets a Docker user may name with -o secret= (default none; "*": all)
//! docker_namespaces = { node-b = "team-b" } # the namespace a node's Docker works in ("*": the rest; default: default)
//! namespace_secrets = { team-a = ["db-a"] }  # the secrets a namespace's volumes may name (default namespace: all; others: none unless given)
//!
//! [store]                               # default: the embedded store in `state`
//! etcd = ["http://10.0.0.1:2379", "http://10.0.0.2:2379"]  # the members' client URLs
//! prefix = "/berth"                     # every key Berth writes is below it
//! name = "server-a"                     # unique among the servers sharing the prefix (default: host name)
//! lease_ttl = "5s"                      # a dead leader is replaced after about this long
//! compact_every = "5m"                  # the leader compacts etcd's history (0s: etcd's own settings do)
//! ca = "etcd-ca.pem"                    # with https:// members: the CA their certificates chain to
//! cert = "etcd-client.pem"              # this server's client certificate and key, for
//! key = "etcd-client.key"               #   etcd's --client-cert-auth
//!
//! [[plugin]]
//! name = "hostpath"                     # the operator's name for it
//! driver = "hostpath.csi.k8s.io"        # the driver name it must report
//! controller = "unix:///run/csi/controller.sock"
//! deadline = "15s"
//!
//! [[node]]
//! name = "node-a"
//! labels = { disk = "ssd" }
//! dir = "nodes/node-a"                  # staging and publish paths live here
//! plugins = { hostpath = "unix:///run/csi/node-a.sock" }
//!
//! [docker]                              # Docker's and Podman's volume plugin, for one [[node]]
//! node = "node-a"
//! socket = "/run/docker/plugins/berth.sock"  # the default: `docker volume create -d berth`
//! socket_mode = "0600"                  # or "0660"; never world-writable
//! create_volumes = true                 # may this Docker create and remove volumes (default false)
//! plugin = "hostpath"                   # when `-o plugin=` is not given
//! wait = "2m"                           # how long Docker's requests wait for Berth
//!
//! [console]                             # the web console, signed in with ACL tokens; off unless set
//! address = "127.0.0.1:7445"            # served over TLS, its certificate from the API's CA
//! names = ["berth.example"]             # names in its certificate (default: as api_names)
//! certificate = "console.pem"           # or a chain of your own, with its key (both or neither)
//! key = "console-key.pem"               # not readable by every user
//!
//! [policy_guard]                        # after `berth policy promote`: roll back by itself
//! failure_share = 0.2                   # when more of the promoted modules' decisions fail (0: never)
//! window = "10m"                        # within this long of the promotion
//! min_decisions = 10                    # once they made at least this many
//!
//! [[policy]]
//! module = "naming.wasm"
//! decisions = ["naming"]                # default: all it exports
//! on_error = "builtin"                  # or "fail" (default)
//! memory = "32MiB"
//! deadline = "100ms"
//! max_answer = "1MiB"
//! settings = { prefix = "team-a" }
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use berth_csi::Endpoint;
use berth_model::settings::file_mode;
pub use berth_model::settings::{ConfigError, duration, invalid, load_file, metrics_address, name_ok};
use berth_model::units::parse_bytes;
use berth_policy::{Decision, ModuleConfig};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    state: Option<PathBuf>,
    api: Option<String>,
    socket_mode: Option<String>,
    workers: Option<usize>,
    fingerprint_interval: Option<String>,
    secrets_dir: Option<PathBuf>,
    cluster: Option<String>,
    cluster_address: Option<String>,
    #[serde(default)]
    cluster_names: Vec<String>,
    api_address: Option<String>,
    #[serde(default)]
    api_names: Vec<String>,
    api_client_ca: Option<PathBuf>,
    audit_log: Option<PathBuf>,
    heartbeat_timeout: Option<String>,
    join_token_max_ttl: Option<String>,
    joins_per_minute: Option<u32>,
    heartbeats_per_second: Option<u32>,
    cluster_connections_per_address: Option<usize>,
    metrics: Option<String>,
    events_per_volume: Option<usize>,
    decision_log: Option<usize>,
    #[serde(default)]
    shadow_every_decision: bool,
    instances_made_ahead: Option<u32>,
    store: Option<store::RawStore>,
    oci: Option<oci::RawOci>,
    policy_trust: Option<oci::RawTrust>,
    policy_guard: Option<guard::RawGuard>,
    docker: Option<docker::RawDocker>,
    console: Option<console::RawConsole>,
    #[serde(default)]
    docker_create_from: Vec<String>,
    #[serde(default)]
    docker_secrets: Vec<String>,
    #[serde(default)]
    namespace_secrets: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    docker_namespaces: BTreeMap<String, String>,
    #[serde(default, rename = "plugin")]
    plugins: Vec<RawPlugin>,
    #[serde(default, rename = "node")]
    nodes: Vec<RawNode>,
    #[serde(default, rename = "policy")]
    policies: Vec<policy_set::RawPolicy>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlugin {
    name: String,
    driver: Option<String>,
    controller: Option<String>,
    deadline: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNode {
    name: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    dir: PathBuf,
    #[serde(default)]
    plugins: BTreeMap<String, String>,
}

/// A validated configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// The embedded store's file; beside it, the API socket and the cluster CA by default.
    pub state: PathBuf,
    /// The volumes and nodes in etcd instead of `state` (`[store] etcd`).
    pub etcd: Option<berth_store::EtcdSettings>,
    pub api: Endpoint,
    pub socket_mode: u32,
    pub workers: usize,
    pub fingerprint_interval: Duration,
    pub secrets_dir: Option<PathBuf>,
    /// Where agents dial (a unix socket, with `socket_mode`).
    pub cluster: Option<Endpoint>,
    /// The TLS endpoint (host:port) agents on other machines dial.
    pub cluster_address: Option<std::net::SocketAddr>,
    /// Names and addresses the server's certificate is valid for.
    pub cluster_names: Vec<String>,
    /// The API over TLS for remote callers (ACL tokens); none by default.
    pub api_address: Option<std::net::SocketAddr>,
    /// The names and addresses in the API's certificate.
    pub api_names: Vec<String>,
    /// The CA whose client certificates the TLS API takes as identities (by
    /// subject, bound with `berth acl certificate bind`); none: tokens only.
    pub api_client_ca: Option<PathBuf>,
    /// Where the audit log is written (rotated past 64 MiB, three kept).
    pub audit_log: PathBuf,
    pub heartbeat_timeout: Duration,
    /// The longest lifetime `berth cluster token` may give a token.
    pub join_token_max_ttl: Duration,
    /// Joins tried in a minute from everywhere; one address may take a sixth.
    pub joins_per_minute: u32,
    /// The fleet's heartbeats the server takes in a second, at most: past
    /// it, every agent is asked to beat less often (0: never asked).
    pub heartbeats_per_second: u32,
    /// TLS connections one address may hold open; `None`: half of what the
    /// endpoint holds (half the process's descriptors, at most 16,384).
    pub cluster_connections_per_address: Option<usize>,
    /// Where `/metrics`, `/healthz` and `/readyz` are served; none by default.
    pub metrics: Option<std::net::SocketAddr>,
    /// How many of its latest events each volume keeps.
    pub events_per_volume: usize,
    /// Decisions the decision log keeps of each kind (0: none is logged).
    pub decision_log: usize,
    /// Shadow modules decide beside every live decision, however much CPU
    /// it takes; by default they keep within 5 % of a core and drop the rest.
    pub shadow_every_decision: bool,
    /// Instances of each live policy module made ahead of need, so a
    /// decision's latency is its call alone (0: each is made on its path).
    pub instances_made_ahead: u32,
    pub plugins: Vec<PluginConfig>,
    pub nodes: Vec<NodeConfig>,
    pub policies: Vec<PolicyConfig>,
    /// The `[[policy]]` tables as written (paths made absolute): what seeds
    /// the cluster's policy set when the store has none.
    pub policy_set: Option<policy_set::SetDraft>,
    /// How modules named `oci://…` are fetched (`[oci]`).
    pub oci: berth_oci::Access,
    /// Where fetched modules are kept, checked, as an OCI image layout.
    pub policy_cache: PathBuf,
    /// Whose signatures modules from a registry need (`[policy_trust]`).
    pub policy_trust: berth_oci::Trust,
    /// When a promotion is rolled back by itself (`[policy_guard]`).
    pub policy_guard: guard::PolicyGuard,
    /// Docker's volume plugin for one in-process node (`[docker]`).
    pub docker: Option<docker::DockerConfig>,
    /// The web console (`[console]`); off by default.
    pub console: Option<console::ConsoleConfig>,
    /// Which agents' nodes may create and remove volumes from their Docker.
    pub docker_create_from: docker::CreateFrom,
    /// The secrets a volume made through Docker may name (none by default).
    pub docker_secrets: docker::CreateFrom,
    /// The secrets each namespace's volumes may name; the default
    /// namespace may name any (as every volume could before namespaces).
    pub namespace_secrets: BTreeMap<String, docker::CreateFrom>,
    /// The namespace each node's Docker works in (`default` unless named).
    pub docker_namespaces: docker::DockerNamespaces,
}

#[derive(Clone, Debug)]
pub struct PluginConfig {
    pub name: String,
    pub driver: Option<String>,
    pub controller: Option<Endpoint>,
    pub deadline: Duration,
}

#[derive(Clone, Debug)]
pub struct NodeConfig {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub dir: PathBuf,
    /// Plugin name → the node plugin's socket on this node.
    pub plugins: BTreeMap<String, Endpoint>,
}

#[derive(Clone, Debug)]
pub struct PolicyConfig {
    /// Its `path` is empty for a module in a registry until it is fetched.
    pub module: ModuleConfig,
    pub decisions: Vec<Decision>,
    /// The registry reference the module comes from, pinned by digest.
    pub source: Option<berth_oci::Reference>,
    /// The SHA-256 a module file must have (`digest`), as a policy set pins it.
    pub digest: Option<String>,
    /// Decides beside the live module (`mode = "shadow"`), its answers never used.
    pub shadow: bool,
}

/// Workers are cheap tasks that mostly wait on plugins: enough for hundreds of volumes in flight.
pub const DEFAULT_WORKERS: usize = 256;

/// Enough to tell a volume's last lifecycle and a few failures, at about
/// 100 bytes each in the record.
pub const DEFAULT_EVENTS_PER_VOLUME: usize = 10;
/// Decisions kept per kind: enough to replay a day of a small cluster.
pub const DEFAULT_DECISION_LOG: usize = 1000;
/// Past this the log is a second store of volumes, not a sample of decisions.
pub const MAX_DECISION_LOG: usize = 100_000;
/// Instances of each policy module made ahead of need, by default.
pub const DEFAULT_INSTANCES_MADE_AHEAD: u32 = 2;
/// The most: parked instances hold at most a quarter of the engine's pools
/// whatever this says, so more only holds memory.
pub const MAX_INSTANCES_MADE_AHEAD: u32 = 16;
/// No operator may let a join token live longer than this.
/// Joins tried in a minute from everywhere, by default: a few nodes at a
/// time, as most sites add them; a fleet brought up at once sets more.
pub const DEFAULT_JOINS_PER_MINUTE: u32 = 60;
pub const MAX_JOINS_PER_MINUTE: u32 = 1_000_000;
/// Heartbeats the server takes in a second, by default: within about 5 % of
/// a core on a small machine, so 750 agents beat every 5 s, 5,000 every 33 s.
pub const DEFAULT_HEARTBEATS_PER_SECOND: u32 = 150;
const MAX_JOIN_TOKEN_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

impl Config {
    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        load_file(path, Config::parse)
    }

    /// Parses config text; relative paths are taken from `base`.
    pub fn parse(text: &str, base: &Path) -> Result<Config, ConfigError> {
        let raw: Raw = berth_model::strict_toml::from_toml(text)?;
        let resolve = |p: &Path| {
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                base.join(p)
            }
        };
        let state = resolve(
            raw.state
                .as_deref()
                .unwrap_or(Path::new("berth-state/state.redb")),
        );
        let api = match raw.api {
            Some(a) => Endpoint::parse(&a)
                .and_then(|e| e.resolve(base))
                .map_err(|e| invalid("api", e))?,
            None => {
                let sock = state.with_file_name("berth.sock");
                Endpoint::parse(&sock.display().to_string())
                    .map_err(|e| invalid("api", format!("(default {}) {e}", sock.display())))?
            }
        };
        let socket_mode = file_mode("socket_mode", raw.socket_mode.as_deref())?;
        if socket_mode & 0o002 != 0 {
            return Err(invalid(
                "socket_mode",
                format!(
                    "{socket_mode:o} lets anyone on the machine manage every volume, node and policy through \
                     the API socket; use 0600 or 0660"
                ),
            ));
        }
        let workers = raw.workers.unwrap_or(DEFAULT_WORKERS);
        if workers == 0 || workers > 4096 {
            return Err(invalid("workers", format!("{workers} is not between 1 and 4096")));
        }
        let fingerprint_interval =
            duration("fingerprint_interval", raw.fingerprint_interval.as_deref(), "30s")?;
        let etcd = raw.store.map(|s| store::etcd_settings(s, base)).transpose()?;

        if raw.plugins.is_empty() {
            return Err(invalid(
                "plugin",
                "no [[plugin]]: configure at least one CSI plugin",
            ));
        }
        let mut plugins = Vec::new();
        for (i, p) in raw.plugins.into_iter().enumerate() {
            let at = format!("plugin[{i}]");
            name_ok(&format!("{at}.name"), &p.name)?;
            if plugins.iter().any(|q: &PluginConfig| q.name == p.name) {
                return Err(invalid(
                    format!("{at}.name"),
                    format!("{:?} is used by another [[plugin]]", p.name),
                ));
            }
            if let Some(d) = &p.driver {
                berth_csi::fingerprint::validate_plugin_name(d)
                    .map_err(|e| invalid(format!("{at}.driver"), e))?;
            }
            let controller = p
                .controller
                .as_deref()
                .map(|c| {
                    Endpoint::parse(c)
                        .and_then(|e| e.resolve(base))
                        .map_err(|e| invalid(format!("{at}.controller"), e))
                })
                .transpose()?;
            plugins.push(PluginConfig {
                deadline: duration(&format!("{at}.deadline"), p.deadline.as_deref(), "15s")?,
                name: p.name,
                driver: p.driver,
                controller,
            });
        }

        let mut nodes: Vec<NodeConfig> = Vec::new();
        for (i, n) in raw.nodes.into_iter().enumerate() {
            let at = format!("node[{i}]");
            name_ok(&format!("{at}.name"), &n.name)?;
            if nodes.iter().any(|m| m.name == n.name) {
                return Err(invalid(
                    format!("{at}.name"),
                    format!("{:?} is used by another [[node]]", n.name),
                ));
            }
            let mut endpoints = BTreeMap::new();
            for (plugin, ep) in n.plugins {
                if !plugins.iter().any(|p| p.name == plugin) {
                    return Err(invalid(
                        format!("{at}.plugins.{plugin}"),
                        format!("there is no [[plugin]] named {plugin:?}"),
                    ));
                }
                let ep = Endpoint::parse(&ep)
                    .and_then(|e| e.resolve(base))
                    .map_err(|e| invalid(format!("{at}.plugins.{plugin}"), e))?;
                endpoints.insert(plugin, ep);
            }
            berth_model::bounds::labels(n.labels.iter()).map_err(|e| invalid(format!("{at}.labels"), e))?;
            nodes.push(NodeConfig {
                name: n.name,
                labels: n.labels,
                dir: resolve(&n.dir),
                plugins: endpoints,
            });
        }

        let policy_set = policy_set::SetDraft::from_raw(raw.policies, base);
        let policies = policy_set.policies()?;
        let policy_set = (!policies.is_empty()).then_some(policy_set);

        let oci = oci::access(raw.oci, resolve);
        let policy_trust = oci::trust(raw.policy_trust, resolve)?;
        let policy_cache = state.with_file_name("policy-modules");
        let docker = docker::docker(
            raw.docker,
            &nodes.iter().map(|n| n.name.clone()).collect::<Vec<_>>(),
            &plugins.iter().map(|p| p.name.clone()).collect::<Vec<_>>(),
            resolve,
        )?;
        let audit_log = raw
            .audit_log
            .as_deref()
            .map(resolve)
            .unwrap_or_else(|| state.with_file_name("audit.log"));
        if raw.api_client_ca.is_some() && raw.api_address.is_none() {
            return Err(invalid(
                "api_client_ca",
                "needs api_address: it names who may call the TLS API",
            ));
        }
        Ok(Config {
            docker,
            console: console::console(raw.console, &resolve)?,
            docker_create_from: docker::CreateFrom::parse("docker_create_from", raw.docker_create_from)?,
            docker_secrets: docker::CreateFrom::parse("docker_secrets", raw.docker_secrets)?,
            namespace_secrets: docker::namespace_secrets(raw.namespace_secrets)?,
            docker_namespaces: docker::DockerNamespaces::parse(raw.docker_namespaces)?,
            oci,
            policy_cache,
            policy_trust,
            policy_guard: guard::guard(raw.policy_guard)?,
            state,
            etcd,
            api,
            socket_mode,
            workers,
            fingerprint_interval,
            secrets_dir: raw.secrets_dir.as_deref().map(resolve),
            cluster: raw
                .cluster
                .as_deref()
                .map(|c| {
                    Endpoint::parse(c)
                        .and_then(|e| e.resolve(base))
                        .map_err(|e| invalid("cluster", e))
                })
                .transpose()?,
            cluster_names: server_names::server_names(
                "cluster_names",
                raw.cluster_address.as_deref(),
                raw.cluster_names,
            )?,
            api_names: server_names::server_names("api_names", raw.api_address.as_deref(), raw.api_names)?,
            api_address: server_names::address("api_address", raw.api_address.as_deref(), "0.0.0.0:7444")?,
            api_client_ca: raw.api_client_ca.as_deref().map(resolve),
            audit_log,
            cluster_address: server_names::address(
                "cluster_address",
                raw.cluster_address.as_deref(),
                "0.0.0.0:7443",
            )?,
            heartbeat_timeout: duration("heartbeat_timeout", raw.heartbeat_timeout.as_deref(), "15s")?,
            join_token_max_ttl: match duration(
                "join_token_max_ttl",
                raw.join_token_max_ttl.as_deref(),
                "24h",
            )? {
                ttl if ttl > MAX_JOIN_TOKEN_TTL => {
                    return Err(invalid("join_token_max_ttl", "is more than 30 days"));
                }
                ttl if ttl < Duration::from_secs(1) => {
                    return Err(invalid("join_token_max_ttl", "is less than a second"));
                }
                ttl => ttl,
            },
            joins_per_minute: match raw.joins_per_minute {
                None => DEFAULT_JOINS_PER_MINUTE,
                Some(n) if (1..=MAX_JOINS_PER_MINUTE).contains(&n) => n,
                Some(n) => {
                    return Err(invalid(
                        "joins_per_minute",
                        format!("{n} is not between 1 and {MAX_JOINS_PER_MINUTE}"),
                    ));
                }
            },
            cluster_connections_per_address: match raw.cluster_connections_per_address {
                Some(0) => return Err(invalid("cluster_connections_per_address", "is 0")),
                n => n,
            },
            heartbeats_per_second: raw.heartbeats_per_second.unwrap_or(DEFAULT_HEARTBEATS_PER_SECOND),
            metrics: metrics_address(raw.metrics.as_deref())?,
            events_per_volume: match raw.events_per_volume {
                None => DEFAULT_EVENTS_PER_VOLUME,
                Some(n) if n <= 1000 => n,
                Some(n) => return Err(invalid("events_per_volume", format!("{n} is more than 1000"))),
            },
            shadow_every_decision: raw.shadow_every_decision,
            instances_made_ahead: match raw.instances_made_ahead {
                None => DEFAULT_INSTANCES_MADE_AHEAD,
                Some(n) if n <= MAX_INSTANCES_MADE_AHEAD => n,
                Some(n) => {
                    return Err(invalid(
                        "instances_made_ahead",
                        format!("{n} is more than {MAX_INSTANCES_MADE_AHEAD}"),
                    ));
                }
            },
            decision_log: match raw.decision_log {
                None => DEFAULT_DECISION_LOG,
                Some(n) if n <= MAX_DECISION_LOG => n,
                Some(n) => {
                    return Err(invalid(
                        "decision_log",
                        format!("{n} is more than {MAX_DECISION_LOG}"),
                    ));
                }
            },
            plugins,
            nodes,
            policies,
            policy_set,
        })
    }

    pub fn plugin(&self, name: &str) -> Option<&PluginConfig> {
        self.plugins.iter().find(|p| p.name == name)
    }

    pub fn node(&self, name: &str) -> Option<&NodeConfig> {
        self.nodes.iter().find(|n| n.name == name)
    }
}

pub(crate) fn size(key: &str, value: Option<&str>, default: usize) -> Result<usize, ConfigError> {
    match value {
        None => Ok(default),
        Some(v) => parse_bytes(v).map_err(|e| invalid(key, e)),
    }
}

/// A socket's mode, an octal string like "0600"; 0600 when not given.
pub mod console;
pub mod docker;
pub mod guard;
mod oci;
pub mod policy_set;
mod server_names;
mod store;

#[cfg(test)]
mod tests;
