//! `berth serve`: wires the pieces together and runs until told to stop.

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use berth_proto::berth::v1::berth_server::BerthServer;
use tokio_stream::wrappers::UnixListenerStream;

use crate::api::{self, BerthApi};
use crate::config::Config;
use crate::csi::ClientOptions;
use crate::csi::fingerprint::Role;
use crate::csi::registry::{PluginSpec, Registry};
use crate::manager::VolumeManager;
use crate::manager::nodes::LocalNodes;
use crate::policy::builtin::Builtins;
use crate::policy::{Decision, EngineOptions, ModuleConfig, Policies, PolicyEngine, PolicyStats};
use crate::store::RedbStore;

/// The modules a config names, with the decisions each is to serve.
fn modules(config: &Config) -> Vec<(ModuleConfig, Vec<Decision>)> {
    config
        .policies
        .iter()
        .map(|p| (p.module.clone(), p.decisions.clone()))
        .collect()
}

/// Reloads the policy modules from the config file: on SIGHUP, and when
/// `berth policy reload` asks.
pub struct Reloader {
    path: Option<PathBuf>,
    policies: Arc<Policies>,
}

impl Reloader {
    /// Reads the file again and swaps its modules in, all or none. A module
    /// needing more memory than the engine was started with needs a restart.
    pub async fn reload(self: &Arc<Self>) -> Result<Vec<PolicyStats>, String> {
        let Some(path) = self.path.clone() else {
            return Err("berth serve was started without a config file to reload from".into());
        };
        let me = self.clone();
        let outcome = tokio::task::spawn_blocking(move || {
            let config = Config::load(&path).map_err(|e| e.to_string())?;
            me.policies.replace_all(&modules(&config))?;
            Ok(me.policies.stats())
        })
        .await
        .map_err(|e| format!("the reload stopped: {e}"))?;
        match &outcome {
            Ok(stats) => tracing::info!(modules = stats.len(), "policy modules reloaded"),
            Err(e) => tracing::error!(error = %e, "policy reload failed; the modules in service stay"),
        }
        outcome
    }

    /// Reloads on every SIGHUP, for as long as the server runs.
    fn on_sighup(self: Arc<Self>) -> Result<tokio::task::JoinHandle<()>, String> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hup = signal(SignalKind::hangup()).map_err(|e| format!("listening for SIGHUP: {e}"))?;
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
) -> Result<(), String> {
    let max_memory = config
        .policies
        .iter()
        .map(|p| p.module.limits.memory_bytes)
        .max()
        .unwrap_or(0);
    let engine = PolicyEngine::new(EngineOptions {
        max_module_memory: max_memory.max(EngineOptions::default().max_module_memory),
        ..EngineOptions::default()
    })
    .map_err(|e| format!("starting the WebAssembly engine: {e:#}"))?;
    let policies = Arc::new(Policies::new(Arc::new(engine), Builtins::default()));
    policies.replace_all(&modules(&config))?;
    for s in policies.stats() {
        tracing::info!(module = %s.module, decisions = ?s.decisions, "policy module loaded");
    }

    let controllers = Registry::new(config.fingerprint_interval);
    for p in &config.plugins {
        if let Some(endpoint) = &p.controller {
            controllers.add(PluginSpec {
                id: p.name.clone(),
                endpoint: endpoint.clone(),
                expected_name: p.driver.clone(),
                client: ClientOptions {
                    deadline: p.deadline,
                    wait: Duration::ZERO,
                },
                role: Role::Controller,
            });
        }
    }
    let node_plugins = Registry::new(config.fingerprint_interval);
    let mut by_node = HashMap::new();
    for n in &config.nodes {
        for (plugin, endpoint) in &n.plugins {
            let p = config
                .plugin(plugin)
                .expect("validated: node plugins name configured plugins");
            let entry = node_plugins.add(PluginSpec {
                id: format!("{plugin}@{}", n.name),
                endpoint: endpoint.clone(),
                expected_name: p.driver.clone(),
                client: ClientOptions {
                    deadline: p.deadline,
                    wait: Duration::ZERO,
                },
                role: Role::Node,
            });
            by_node.insert((n.name.clone(), plugin.clone()), entry);
        }
    }
    // A first fingerprint of everything before work starts; unreachable
    // plugins are retried by the periodic refresh.
    let mut first = tokio::task::JoinSet::new();
    for p in controllers.list().into_iter().chain(node_plugins.list()) {
        first.spawn(async move {
            p.refresh().await;
        });
    }
    while first.join_next().await.is_some() {}
    let _refresh = (controllers.start(), node_plugins.start());

    let store = Arc::new(RedbStore::open(&config.state).map_err(|e| e.to_string())?);
    let nodes = Arc::new(LocalNodes::new(&config.nodes, by_node));
    let api_path = config.api.path().to_path_buf();
    let listener = api::bind(&api_path, config.socket_mode)?;
    let manager =
        VolumeManager::new(config, store, controllers, policies, nodes).map_err(|e| e.to_string())?;
    let _workers = manager.start();
    // Publications whose node lost their mounts are done again.
    let recovery = manager.clone();
    tokio::spawn(async move { recovery.recover_node_paths().await });
    let reloader = Arc::new(Reloader {
        path: config_path,
        policies: manager.policies().clone(),
    });
    let sighup = reloader.clone().on_sighup()?;
    tracing::info!(
        api = %api_path.display(),
        store = %manager.config().state.display(),
        plugins = ?manager.config().plugins.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        nodes = ?manager.config().nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(),
        modules = manager.config().policies.len(),
        "serving"
    );

    let result = tonic::transport::Server::builder()
        .add_service(BerthServer::new(BerthApi::new(manager, reloader)))
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown)
        .await;
    sighup.abort();
    let _ = std::fs::remove_file(&api_path);
    result.map_err(|e| format!("serving the API: {e}"))
}
