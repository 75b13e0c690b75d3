//! `berth serve`: wires the pieces together and runs until told to stop.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use berth_proto::berth::v1::berth_server::BerthServer;
use tokio_stream::wrappers::UnixListenerStream;

use crate::api::{self, BerthApi};
use crate::config::Config;
use crate::csi::ClientOptions;
use crate::csi::registry::{PluginSpec, Registry};
use crate::manager::VolumeManager;
use crate::manager::nodes::LocalNodes;
use crate::policy::builtin::Builtins;
use crate::policy::{EngineOptions, Policies, PolicyEngine};
use crate::store::RedbStore;

/// Runs Berth until `shutdown` completes.
pub async fn run(config: Config, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), String> {
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
    for (i, p) in config.policies.iter().enumerate() {
        let module = policies
            .load(p.module.clone(), &p.decisions)
            .map_err(|e| format!("policy[{i}]: {e}"))?;
        tracing::info!(module = module.name(), decisions = ?module.decisions(), "policy module loaded");
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
    tracing::info!(api = %api_path.display(), "serving");

    let result = tonic::transport::Server::builder()
        .add_service(BerthServer::new(BerthApi::new(manager)))
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown)
        .await;
    let _ = std::fs::remove_file(&api_path);
    result.map_err(|e| format!("serving the API: {e}"))
}
