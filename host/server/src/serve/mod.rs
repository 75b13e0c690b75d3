//! `berth serve`: wires the pieces together and runs until told to stop.
//!
//! With the embedded store the server leads for as long as it runs. With
//! etcd, several servers share the store and only the elected one leads
//! ([`replicated`]); what a leader runs is a [`term`] either way.

mod api_h2;
mod api_tls;
mod console;
pub(crate) mod endpoints;
mod error;
pub mod modules;
pub mod policy_set;
mod replicated;
mod rollout;
pub(crate) mod term;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use crate::api::{self, ReloadError};
use crate::cluster::pki::{ClusterCa, ca_dir};
use crate::config::Config;
use crate::metrics;
use crate::policy::{Decision, EngineOptions, ModuleConfig, Policies, PolicyStats};
use crate::store::RedbStore;
pub use error::ServeError;

/// The modules a config names, with the decisions each is to serve.
pub(super) fn modules(config: &Config) -> Vec<(ModuleConfig, Vec<Decision>)> {
    modules_in(config, false)
}

/// The modules shadowing decisions (`mode = "shadow"`).
pub(super) fn shadow_modules(config: &Config) -> Vec<(ModuleConfig, Vec<Decision>)> {
    modules_in(config, true)
}

fn modules_in(config: &Config, shadow: bool) -> Vec<(ModuleConfig, Vec<Decision>)> {
    config
        .policies
        .iter()
        .filter(|p| p.shadow == shadow)
        .map(|p| (p.module.clone(), p.decisions.clone()))
        .collect()
}

/// The share of one core shadow modules may take, unless every decision is to be shadowed.
const SHADOW_SHARE: f64 = 0.05;

fn engine_options(config: &Config) -> EngineOptions {
    let max_memory = config
        .policies
        .iter()
        .map(|p| p.module.limits.memory_bytes)
        .max()
        .unwrap_or(0);
    EngineOptions {
        max_module_memory: max_memory.max(EngineOptions::default().max_module_memory),
        // A takeover or a restart maps the code compiled before instead of compiling.
        compiled_dir: Some(config.state.with_file_name("policy-compiled")),
        shadow_share: (!config.shadow_every_decision).then_some(SHADOW_SHARE),
        warm_instances: config.instances_made_ahead,
        ..EngineOptions::default()
    }
}

/// Puts `config`'s modules, live and shadow, in service at once.
pub(super) fn put_modules(policies: &Policies, config: &Config) -> Result<(), crate::policy::SetError> {
    policies.replace_set(&modules(config), &shadow_modules(config))
}

/// The policy set in service, and what changes it: on SIGHUP and
/// `berth policy reload` (the config file's `[[policy]]` tables, applied as
/// a new version), and `berth policy apply` (a file of them).
pub struct Reloader {
    pub(super) path: Option<PathBuf>,
    pub(super) policies: Arc<Policies>,
    /// This server's own settings: how registries are reached and trusted.
    pub(super) config: Config,
    pub(super) store: Arc<dyn crate::store::Store>,
    /// The set in service (none on a server with no set stored and no `[[policy]]`).
    pub(super) set: tokio::sync::Mutex<Option<crate::store::PolicySetRecord>>,
    /// This server's name, recorded with a set it stores.
    pub(super) server: String,
    /// `[policy_trust]` as last read: a reload reads it again, and every
    /// module put in service from then on is checked against it.
    pub(super) trust: std::sync::RwLock<berth_oci::Trust>,
    /// Whether a set that verifies is in service: a server that started with
    /// one that does not acts on no volume until one is put in service.
    pub(super) trusted: tokio::sync::watch::Sender<bool>,
}

#[tonic::async_trait]
impl crate::api::PolicyReload for Arc<Reloader> {
    async fn reload(&self) -> Result<Vec<PolicyStats>, ReloadError> {
        Reloader::reload(self).await
    }

    async fn apply(
        &self,
        text: &str,
        base: &std::path::Path,
    ) -> Result<crate::api::SetInService, ReloadError> {
        let outcome = async {
            let draft = crate::config::policy_set::SetDraft::parse_to_apply(text, base)?;
            self.put_in_service(draft).await
        }
        .await;
        log_outcome(&outcome);
        outcome
    }

    async fn promote(
        &self,
        decision: Option<crate::policy::Decision>,
    ) -> Result<crate::api::SetInService, ReloadError> {
        let outcome = Reloader::promote(self, decision).await;
        log_outcome(&outcome);
        outcome
    }

    async fn rollback(&self, to: Option<u64>) -> Result<crate::api::SetInService, ReloadError> {
        let outcome = Reloader::rollback(self, to, "asked by an operator").await;
        log_outcome(&outcome);
        outcome
    }

    async fn in_service(&self) -> crate::api::SetInService {
        crate::api::SetInService {
            set: self.set.lock().await.clone(),
            stats: self.policies.stats(),
        }
    }
}

fn log_outcome(outcome: &Result<crate::api::SetInService, ReloadError>) {
    match outcome {
        Ok(s) => tracing::info!(
            version = s.set.as_ref().map_or(0, |s| s.version),
            modules = s.stats.len(),
            "policy set in service"
        ),
        Err(e) => tracing::error!(error = %e, "policy reload failed; the modules in service stay"),
    }
}

impl Reloader {
    /// Reads the config file again and puts its `[[policy]]` tables in
    /// service as the cluster's set, all or none; without any, loads the
    /// stored set again. A module needing more memory than the engine was
    /// started with needs a restart.
    pub async fn reload(self: &Arc<Self>) -> Result<Vec<PolicyStats>, ReloadError> {
        let Some(path) = self.path.clone() else {
            return Err(ReloadError::NoConfig);
        };
        let outcome = async {
            let config = tokio::task::spawn_blocking(move || Config::load(&path))
                .await
                .map_err(ReloadError::Stopped)??;
            // A key removed is distrusted from now on, whatever comes next.
            *self.trust.write().unwrap_or_else(|p| p.into_inner()) = config.policy_trust.clone();
            match config.policy_set {
                Some(draft) => self.put_in_service(draft).await,
                None => {
                    let stored = self.set.lock().await.clone();
                    let text = stored.as_ref().map(|s| s.text.clone()).unwrap_or_default();
                    let config = policy_set::effective(&self.settings(), &text)
                        .await
                        .map_err(ReloadError::as_trust_failure)?;
                    self.swap(config).await?;
                    Ok(crate::api::SetInService {
                        set: stored,
                        stats: self.policies.stats(),
                    })
                }
            }
        }
        .await;
        log_outcome(&outcome);
        outcome.map(|s| s.stats)
    }

    /// Pins `draft`, loads it, and stores it as the next version when it
    /// differs from the set in service. Nothing is stored unless every
    /// module loaded.
    async fn put_in_service(
        &self,
        draft: crate::config::policy_set::SetDraft,
    ) -> Result<crate::api::SetInService, ReloadError> {
        let pinned = policy_set::pin(draft, &self.settings()).await?;
        self.store_version(pinned.text(), "apply".into(), Vec::new(), |_| Ok(()))
            .await
    }

    /// Loads `text` and stores it as the next version (for `change`), unless
    /// it is the set in service already. `check` sees the set in service
    /// first, under the same lock (a promotion or rollback checks it is still
    /// what it was asked of).
    pub(super) async fn store_version(
        &self,
        text: String,
        change: String,
        promoted: Vec<String>,
        check: impl FnOnce(Option<&crate::store::PolicySetRecord>) -> Result<(), ReloadError>,
    ) -> Result<crate::api::SetInService, ReloadError> {
        let config = policy_set::effective(&self.settings(), &text)
            .await
            .map_err(ReloadError::as_trust_failure)?;
        let mut current = self.set.lock().await;
        check(current.as_ref())?;
        self.swap(config).await?;
        if current.as_ref().is_none_or(|s| s.text != text) {
            let next = match current.as_ref() {
                Some(c) => c.next(text, &self.server, change, promoted),
                None => crate::store::PolicySetRecord::first(text, &self.server, change),
            };
            self.store.put_policy_set(&next).await?;
            *current = Some(next);
        }
        Ok(crate::api::SetInService {
            set: current.clone(),
            stats: self.policies.stats(),
        })
    }

    async fn swap(&self, config: Config) -> Result<(), ReloadError> {
        let policies = self.policies.clone();
        tokio::task::spawn_blocking(move || put_modules(&policies, &config))
            .await
            .map_err(ReloadError::Stopped)??;
        if !self.trusted.send_replace(true) {
            metrics::readiness().set_ok("policy", "a policy set that verifies is in service".into());
            tracing::info!("a policy set that verifies is in service: volumes are acted on again");
        }
        Ok(())
    }

    /// This server's settings with `[policy_trust]` as last read.
    pub(super) fn settings(&self) -> Config {
        let mut config = self.config.clone();
        config.policy_trust = self.trust.read().unwrap_or_else(|p| p.into_inner()).clone();
        config
    }

    /// Reloads on every SIGHUP, for as long as the server runs.
    pub(super) fn on_sighup(self: Arc<Self>) -> Result<tokio::task::JoinHandle<()>, ServeError> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hup = signal(SignalKind::hangup()).map_err(ServeError::io("listening for SIGHUP"))?;
        Ok(tokio::spawn(async move {
            while hup.recv().await.is_some() {
                let _ = self.reload().await;
            }
        }))
    }
}

/// Where a server keeps its state.
enum Backing {
    Etcd(crate::store::EtcdSettings),
    Embedded(Arc<RedbStore>),
}

/// Runs Berth until `shutdown` completes. `config_path` is where reloads
/// read the policy modules from.
pub async fn run(
    config: Config,
    config_path: Option<PathBuf>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    crate::metrics::listener::raise_descriptor_limit();
    // Not ready until the API serves: registered before any other check,
    // so that no moment of the start (the store's check passing before a
    // term has said it is starting) reads as ready.
    metrics::readiness().set_failing("api", "starting".into());
    // The store's lock first: a second server on the same config stops
    // here, before it binds (or could take over) any socket of the first.
    let backing = match config.etcd.clone() {
        Some(settings) => Backing::Etcd(settings),
        None => Backing::Embedded(Arc::new(RedbStore::open(&config.state)?)),
    };
    let http = match config.metrics {
        Some(address) => Some(metrics::http::serve(address, metrics::readiness().clone()).await?),
        None => None,
    };
    let docker = config
        .docker
        .as_ref()
        .map(|d| docker_plugin(&config, d))
        .transpose()?;
    let notify = metrics::notify::when_ready(metrics::readiness().clone());
    let result = match backing {
        Backing::Etcd(settings) => replicated::run(config, config_path, settings, shutdown).await,
        Backing::Embedded(store) => embedded(config, config_path, store, shutdown).await,
    };
    metrics::notify::stopping();
    if let Some(notify) = notify {
        notify.abort();
    }
    if let Some(http) = http {
        http.abort();
    }
    if let Some((task, socket)) = docker {
        task.abort();
        let _ = std::fs::remove_file(socket);
    }
    result
}

/// Serves Docker's volume plugin protocol for `[docker]`'s node, a client of
/// this server's own API socket (so, on etcd, of whichever server leads).
fn docker_plugin(
    config: &Config,
    d: &crate::config::docker::DockerConfig,
) -> Result<(tokio::task::JoinHandle<()>, PathBuf), ServeError> {
    use crate::agent::docker::{ApiVolumes, DockerPlugin, DockerSettings, bind, serve};
    let listener = bind(&d.socket, d.socket_mode)?;
    let settings = DockerSettings {
        node: d.node.clone(),
        create_volumes: d.create_volumes,
        plugin: d.plugin.clone(),
        wait: d.wait,
        holders: config.state.with_file_name("docker-holders.json"),
    };
    let api = ApiVolumes::new(crate::csi::unix_channel(config.api.path()), &d.node);
    let plugin = DockerPlugin::new(Box::new(api), settings).map_err(ServeError::io(
        "reading which containers hold which volume (docker-holders.json)",
    ))?;
    tracing::info!(socket = %d.socket.display(), node = %d.node, create_volumes = d.create_volumes, "serving Docker's volume plugin protocol");
    Ok((serve(listener, Arc::new(plugin)), d.socket.clone()))
}

/// One server on the embedded store: it leads for as long as it runs.
async fn embedded(
    config: Config,
    config_path: Option<PathBuf>,
    store: Arc<RedbStore>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let node_records = store.committer();
    let (weak, path) = (Arc::downgrade(&store), config.state.display().to_string());
    metrics::readiness().set(
        "store",
        Box::new(move || match weak.upgrade().map(|s| s.health()) {
            Some(Ok(())) => Ok(format!("embedded, {path}")),
            Some(Err(e)) => Err(format!("embedded, {path}: cannot write: {e}").into()),
            None => Err("closed".into()),
        }),
    );
    let api_path = config.api.path().to_path_buf();
    let listener = api::bind(&api_path, config.socket_mode)?;
    let ca = match config.cluster_address {
        Some(_) => Some(ClusterCa::load_or_create(&ca_dir(&config.state))?),
        None => None,
    };
    let cluster_path = config.cluster.as_ref().map(|c| c.path().to_path_buf());
    let result = term::lead(
        term::Term {
            config,
            config_path,
            store,
            api: term::TermSocket::Own(listener),
            ca,
            election: None,
            node_records: Some(node_records),
        },
        shutdown,
    )
    .await;
    let _ = std::fs::remove_file(&api_path);
    if let Some(path) = &cluster_path {
        let _ = std::fs::remove_file(path);
    }
    result
}
