//! The plugin registry: every configured plugin socket, fingerprinted on start
//! and periodically after, with a health state and a readable reason.
//!
//! A health change is logged once when it happens, not on every tick.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::client::{ClientOptions, CsiClient};
use crate::endpoint::Endpoint;
use crate::fingerprint::{Fingerprint, Role, fingerprint};

/// Nomad's interval, and a sensible one: cheap for the plugin, quick enough to notice.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(30);

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Health {
    /// Not fingerprinted yet.
    Unknown,
    Healthy,
    Unhealthy {
        reason: String,
    },
}

impl Health {
    fn same_state(&self, other: &Health) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct PluginStatus {
    pub health: Health,
    /// The last successful fingerprint, kept while the plugin is unhealthy.
    /// Shared: every step reads the capabilities, none changes them.
    pub fingerprint: Option<Arc<Fingerprint>>,
    pub last_checked: Option<SystemTime>,
    /// How many times the health state changed.
    pub transitions: u64,
}

/// What the operator configured for one plugin socket.
#[derive(Clone, Debug)]
pub struct PluginSpec {
    /// The operator's name for this socket, used in logs and errors.
    pub id: String,
    pub endpoint: Endpoint,
    /// The driver name the plugin must report, when the operator names one.
    pub expected_name: Option<String>,
    pub client: ClientOptions,
    /// The services this endpoint is there for.
    pub role: Role,
}

/// Failed fingerprints in a row before a healthy plugin counts as unhealthy:
/// one lost call is not an outage, and placement avoids unhealthy nodes.
pub const UNHEALTHY_AFTER: u32 = 3;

pub struct Plugin {
    spec: PluginSpec,
    client: CsiClient,
    status: watch::Sender<PluginStatus>,
    failed_in_a_row: std::sync::atomic::AtomicU32,
}

impl Plugin {
    fn new(spec: PluginSpec) -> Self {
        let mut client = CsiClient::lazy(spec.endpoint.clone(), spec.client);
        client.set_label(&spec.id);
        let (status, _) = watch::channel(PluginStatus {
            health: Health::Unknown,
            fingerprint: None,
            last_checked: None,
            transitions: 0,
        });
        Plugin {
            spec,
            client,
            status,
            failed_in_a_row: Default::default(),
        }
    }

    pub fn id(&self) -> &str {
        &self.spec.id
    }

    pub fn client(&self) -> &CsiClient {
        &self.client
    }

    pub fn status(&self) -> PluginStatus {
        self.status.borrow().clone()
    }

    /// Watch status changes, e.g. to wait until a plugin is healthy.
    pub fn subscribe(&self) -> watch::Receiver<PluginStatus> {
        self.status.subscribe()
    }

    /// Fingerprints the plugin once and records the outcome. A plugin that
    /// cannot be reached becomes unhealthy at once unless it was healthy;
    /// then only after [`UNHEALTHY_AFTER`] failures in a row.
    pub async fn refresh(&self) -> Health {
        use std::sync::atomic::Ordering;
        let outcome = fingerprint(&self.client, self.spec.role).await;
        let health = match &outcome {
            Err(e) => {
                let failed = self.failed_in_a_row.fetch_add(1, Ordering::Relaxed) + 1;
                let healthy = self.status.borrow().health == Health::Healthy;
                if healthy && failed < UNHEALTHY_AFTER {
                    tracing::debug!(plugin = %self.spec.id, error = %e, failed, "fingerprint failed; still counted healthy");
                    Health::Healthy
                } else {
                    Health::Unhealthy {
                        reason: e.to_string(),
                    }
                }
            }
            Ok(fp) => {
                self.failed_in_a_row.store(0, Ordering::Relaxed);
                self.judge(fp)
            }
        };
        self.status.send_modify(|st| {
            if !st.health.same_state(&health) {
                st.transitions += 1;
                match &health {
                    Health::Healthy => tracing::info!(plugin = %self.spec.id, "plugin is healthy"),
                    Health::Unhealthy { reason } => {
                        tracing::warn!(plugin = %self.spec.id, %reason, "plugin is unhealthy")
                    }
                    Health::Unknown => {}
                }
            } else if st.health != health {
                tracing::debug!(plugin = %self.spec.id, ?health, "plugin health reason changed");
            }
            st.health = health.clone();
            st.last_checked = Some(SystemTime::now());
            if let Ok(fp) = outcome {
                st.fingerprint = Some(Arc::new(fp));
            }
        });
        health
    }

    fn judge(&self, fp: &Fingerprint) -> Health {
        if let Some(expected) = &self.spec.expected_name
            && &fp.name != expected
        {
            return Health::Unhealthy {
                reason: format!("plugin reports driver name {:?}, expected {expected:?}", fp.name),
            };
        }
        if !fp.ready {
            return Health::Unhealthy {
                reason: "plugin reports it is not ready (still initialising)".into(),
            };
        }
        Health::Healthy
    }
}

/// All configured plugins, keyed by the operator's id.
pub struct Registry {
    plugins: RwLock<BTreeMap<String, Arc<Plugin>>>,
    interval: Duration,
}

impl Registry {
    pub fn new(interval: Duration) -> Arc<Self> {
        Arc::new(Registry {
            plugins: RwLock::new(BTreeMap::new()),
            interval,
        })
    }

    /// Adds a plugin socket; an existing entry with the same id is replaced.
    pub fn add(&self, spec: PluginSpec) -> Arc<Plugin> {
        let plugin = Arc::new(Plugin::new(spec));
        self.write().insert(plugin.id().to_string(), plugin.clone());
        plugin
    }

    pub fn remove(&self, id: &str) -> Option<Arc<Plugin>> {
        self.write().remove(id)
    }

    pub fn get(&self, id: &str) -> Option<Arc<Plugin>> {
        self.read().get(id).cloned()
    }

    pub fn list(&self) -> Vec<Arc<Plugin>> {
        self.read().values().cloned().collect()
    }

    /// Fingerprints every plugin now, then again every interval, until the
    /// returned handle is dropped.
    pub fn start(&self) -> RefreshTasks {
        let mut tasks = JoinSet::new();
        for plugin in self.list() {
            let interval = self.interval;
            tasks.spawn(async move {
                let mut ticks = tokio::time::interval(interval);
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    ticks.tick().await;
                    plugin.refresh().await;
                }
            });
        }
        RefreshTasks { _tasks: tasks }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<Plugin>>> {
        self.plugins
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, Arc<Plugin>>> {
        self.plugins
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Keeps the periodic fingerprinting running; dropping it stops every task.
pub struct RefreshTasks {
    _tasks: JoinSet<()>,
}
