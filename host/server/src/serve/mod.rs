//! `berth serve`: wires the pieces together and runs until told to stop.
//!
//! With the embedded store the server leads for as long as it runs. With
//! etcd, several servers share the store and only the elected one leads
//! ([`replicated`]); what a leader runs is a [`term`] either way.

pub(crate) mod endpoints;
mod error;
pub mod modules;
mod replicated;
pub(crate) mod term;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use crate::api::{self, ReloadError};
use crate::cluster::pki::{ClusterCa, ca_dir};
use crate::config::Config;
use crate::metrics;
use crate::policy::{Decision, ModuleConfig, Policies, PolicyStats};
use crate::store::RedbStore;
pub use error::ServeError;

/// The modules a config names, with the decisions each is to serve.
pub(super) fn modules(config: &Config) -> Vec<(ModuleConfig, Vec<Decision>)> {
    config
        .policies
        .iter()
        .map(|p| (p.module.clone(), p.decisions.clone()))
        .collect()
}

/// Reloads the policy modules from the config file: on SIGHUP, and when
/// `berth policy reload` asks.
pub struct Reloader {
    pub(super) path: Option<PathBuf>,
    pub(super) policies: Arc<Policies>,
}

#[tonic::async_trait]
impl crate::api::PolicyReload for Arc<Reloader> {
    async fn reload(&self) -> Result<Vec<PolicyStats>, ReloadError> {
        Reloader::reload(self).await
    }
}

impl Reloader {
    /// Reads the file again and swaps its modules in, all or none. A module
    /// needing more memory than the engine was started with needs a restart.
    pub async fn reload(self: &Arc<Self>) -> Result<Vec<PolicyStats>, ReloadError> {
        let Some(path) = self.path.clone() else {
            return Err(ReloadError::NoConfig);
        };
        let me = self.clone();
        let outcome = async move {
            let config = tokio::task::spawn_blocking(move || Config::load(&path))
                .await
                .map_err(ReloadError::Stopped)??;
            let config = modules::fetch_modules(config).await?;
            tokio::task::spawn_blocking(move || {
                me.policies.replace_all(&modules(&config))?;
                Ok(me.policies.stats())
            })
            .await
            .map_err(ReloadError::Stopped)?
        }
        .await;
        match &outcome {
            Ok(stats) => tracing::info!(modules = stats.len(), "policy modules reloaded"),
            Err(e) => tracing::error!(error = %e, "policy reload failed; the modules in service stay"),
        }
        outcome
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

/// Runs Berth until `shutdown` completes. `config_path` is where reloads
/// read the policy modules from.
pub async fn run(
    config: Config,
    config_path: Option<PathBuf>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    crate::metrics::listener::raise_descriptor_limit();
    let config = modules::fetch_modules(config).await?;
    let http = match config.metrics {
        Some(address) => Some(metrics::http::serve(address, metrics::readiness().clone()).await?),
        None => None,
    };
    let result = match config.etcd.clone() {
        Some(settings) => replicated::run(config, config_path, settings, shutdown).await,
        None => embedded(config, config_path, shutdown).await,
    };
    if let Some(http) = http {
        http.abort();
    }
    result
}

/// One server on the embedded store: it leads for as long as it runs.
async fn embedded(
    config: Config,
    config_path: Option<PathBuf>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let store = Arc::new(RedbStore::open(&config.state)?);
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
            api: listener,
            ca,
            election: None,
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
