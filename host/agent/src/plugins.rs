//! The node's CSI node plugins: sockets named in the agent's config, and
//! sockets that appear in its plugin directory (named by the file, without
//! `.sock`). A socket that goes away from the directory is unregistered.
//! Each is fingerprinted (Identity and Node) on registering and every
//! interval after.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use berth_proto::berth::v1 as wire;

use berth_csi::fingerprint::{Fingerprint, NodeInfo, Role};
use berth_csi::registry::{Health, Plugin, PluginSpec, PluginStatus, Registry};
use berth_csi::{ClientOptions, CsiClient, Endpoint};
use berth_model::bounds;

pub struct NodePlugins {
    registry: Arc<Registry>,
    configured: BTreeMap<String, Endpoint>,
    dir: Option<PathBuf>,
    deadline: Duration,
    /// Sockets already refused (and logged).
    refused: std::sync::Mutex<std::collections::HashSet<PathBuf>>,
}

impl NodePlugins {
    pub fn new(
        configured: BTreeMap<String, Endpoint>,
        dir: Option<PathBuf>,
        deadline: Duration,
    ) -> Arc<Self> {
        let plugins = Arc::new(NodePlugins {
            registry: Registry::new(Duration::MAX),
            configured,
            dir,
            deadline,
            refused: Default::default(),
        });
        if let Some(dir) = &plugins.dir {
            warn_if_shared(dir);
        }
        for (name, endpoint) in &plugins.configured {
            plugins.add(name, endpoint.clone());
        }
        plugins
    }

    fn add(&self, name: &str, endpoint: Endpoint) -> Arc<Plugin> {
        self.registry.add(PluginSpec {
            id: name.to_string(),
            endpoint,
            expected_name: None,
            client: ClientOptions {
                deadline: self.deadline,
                wait: Duration::ZERO,
            },
            role: Role::Node,
        })
    }

    /// Whether the plugin stages (STAGE_UNSTAGE_VOLUME); assumed until fingerprinted.
    pub fn stages(&self, plugin: &str) -> bool {
        use berth_csi::proto::node_service_capability::rpc::Type as NodeCap;
        self.registry
            .get(plugin)
            .and_then(|p| p.status().fingerprint)
            .is_none_or(|f| f.has_node_capability(NodeCap::StageUnstageVolume))
    }

    pub fn client(&self, plugin: &str) -> Option<CsiClient> {
        self.registry.get(plugin).map(|p| p.client().clone())
    }

    /// Registers sockets new in the plugin directory (fingerprinting them) and
    /// unregisters those gone from it. True when something changed. Only a
    /// socket owned by root or by the agent's own user is taken (another
    /// user's would be sent volumes' secrets), named plainly, and no more
    /// than a node may run.
    pub async fn scan(&self) -> bool {
        let Some(dir) = &self.dir else { return false };
        let mut found = BTreeMap::new();
        if let Ok(entries) = std::fs::read_dir(dir) {
            use std::os::unix::fs::{FileTypeExt, MetadataExt};
            // SAFETY: geteuid has no preconditions and cannot fail.
            let me = unsafe { libc::geteuid() };
            for e in entries.flatten() {
                let Ok(meta) = e.metadata() else { continue };
                if !meta.file_type().is_socket() {
                    continue;
                }
                let file = e.file_name().to_string_lossy().into_owned();
                let name = file.trim_end_matches(".sock").to_string();
                let known = self.registry.get(&name).is_some();
                let refused = if self.configured.contains_key(&name) {
                    continue;
                } else if meta.uid() != 0 && meta.uid() != me {
                    Some(format!(
                        "owned by uid {}, neither root nor the agent's user",
                        meta.uid()
                    ))
                } else if known {
                    None
                } else if let Err(e) = bounds::plain("plugin", &name) {
                    Some(e.to_string())
                } else if self.configured.len() + found.len() >= bounds::NODE_PLUGINS_MAX {
                    Some(format!(
                        "a node runs at most {} plugins",
                        bounds::NODE_PLUGINS_MAX
                    ))
                } else {
                    None
                };
                match refused {
                    Some(why) => self.refuse_once(&e.path(), &why),
                    None => drop(found.insert(name, e.path())),
                }
            }
        }
        let mut changed = false;
        for p in self.registry.list() {
            if !self.configured.contains_key(p.id()) && !found.contains_key(p.id()) {
                tracing::info!(plugin = %p.id(), "node plugin socket gone; unregistered");
                self.registry.remove(p.id());
                changed = true;
            }
        }
        for (name, path) in found {
            if self.registry.get(&name).is_none() {
                let Ok(endpoint) = Endpoint::parse(&path.display().to_string()) else {
                    continue;
                };
                tracing::info!(plugin = %name, socket = %path.display(), "node plugin socket appeared; registered");
                self.add(&name, endpoint).refresh().await;
                changed = true;
            }
        }
        changed
    }

    /// Logs a refused socket the first time it is seen.
    fn refuse_once(&self, path: &std::path::Path, why: &str) {
        let mut refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        if refused.len() < 1024 && refused.insert(path.to_path_buf()) {
            tracing::warn!(socket = %path.display(), reason = %why, "a socket in the plugin directory is not taken");
        }
    }

    /// Fingerprints every plugin once, all at the same time.
    pub async fn refresh(&self) {
        let mut all = tokio::task::JoinSet::new();
        for p in self.registry.list() {
            all.spawn(async move {
                p.refresh().await;
            });
        }
        while all.join_next().await.is_some() {}
    }

    pub fn reports(&self) -> Vec<wire::NodePluginReport> {
        self.registry
            .list()
            .iter()
            .map(|p| report(p.id(), &p.status()))
            .collect()
    }
}

/// A plugin directory others may write to lets them plant sockets: those
/// are refused by owner, but the operator should know.
fn warn_if_shared(dir: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::metadata(dir) else { return };
    if meta.permissions().mode() & 0o002 != 0 {
        tracing::warn!(dir = %dir.display(), "the plugin directory is writable by every user; only sockets owned by root or the agent's user are taken");
    }
}

/// A plugin's status as the cluster protocol carries it.
pub fn report(plugin: &str, status: &PluginStatus) -> wire::NodePluginReport {
    let (health, reason) = match &status.health {
        Health::Unknown => ("unknown", String::new()),
        Health::Healthy => ("healthy", String::new()),
        Health::Unhealthy { reason } => ("unhealthy", reason.clone()),
    };
    wire::NodePluginReport {
        plugin: plugin.to_string(),
        health: health.into(),
        reason,
        fingerprint: status.fingerprint.as_ref().map(|f| {
            let node = f.node.clone();
            wire::NodeFingerprint {
                driver: f.name.clone(),
                vendor_version: f.vendor_version.clone(),
                plugin_capabilities: f.plugin_capabilities.clone(),
                node_capabilities: node.as_ref().map(|n| n.capabilities.clone()).unwrap_or_default(),
                node_id: node.as_ref().map(|n| n.node_id.clone()).unwrap_or_default(),
                max_volumes: node.as_ref().and_then(|n| n.max_volumes_per_node).unwrap_or(0) as i64,
                topology: node
                    .map(|n| n.accessible_topology.into_iter().collect())
                    .unwrap_or_default(),
            }
        }),
    }
}

/// The status the server keeps for a node plugin an agent reported.
pub fn status_of(node: &str, r: &wire::NodePluginReport) -> PluginStatus {
    let health = match r.health.as_str() {
        "healthy" => Health::Healthy,
        "unhealthy" => Health::Unhealthy {
            reason: r.reason.clone(),
        },
        _ => Health::Unknown,
    };
    PluginStatus {
        health,
        fingerprint: r.fingerprint.as_ref().map(|f| {
            Arc::new(Fingerprint {
                endpoint: format!("agent {node}"),
                name: f.driver.clone(),
                vendor_version: f.vendor_version.clone(),
                manifest: BTreeMap::new(),
                ready: true,
                plugin_capabilities: f.plugin_capabilities.clone(),
                controller: None,
                node: Some(NodeInfo {
                    node_id: f.node_id.clone(),
                    max_volumes_per_node: u64::try_from(f.max_volumes).ok().filter(|n| *n > 0),
                    accessible_topology: f.topology.clone().into_iter().collect(),
                    capabilities: f.node_capabilities.clone(),
                }),
                unserved: Vec::new(),
            })
        }),
        last_checked: Some(std::time::SystemTime::now()),
        transitions: 0,
    }
}
