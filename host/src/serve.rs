//! `berth serve`: wires the pieces together and runs until told to stop.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use berth_proto::berth::v1::berth_server::BerthServer;
use tokio_stream::wrappers::UnixListenerStream;

use crate::agent::calls::Paths;
use crate::agent::{Agent, AgentSpec};
use crate::api::{self, BerthApi};
use crate::cluster::Directory;
use crate::cluster::pki::{ClusterCa, ClusterTls, ca_dir};
use crate::cluster::service::{ClusterService, link_in_process};
use crate::config::Config;
use crate::csi::ClientOptions;
use crate::csi::fingerprint::Role;
use crate::csi::registry::{PluginSpec, Registry};
use crate::manager::{VolumeManager, as_sync};
use crate::policy::builtin::Builtins;
use crate::policy::{Decision, EngineOptions, ModuleConfig, Policies, PolicyEngine, PolicyStats};
use crate::store::{EtcdStore, NodeRecord, RedbStore, Store};
use berth_proto::berth::v1::cluster_server::ClusterServer;

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
    // A first fingerprint of every controller before work starts;
    // unreachable ones are retried by the periodic refresh.
    let mut first = tokio::task::JoinSet::new();
    for p in controllers.list() {
        first.spawn(async move {
            p.refresh().await;
        });
    }
    while first.join_next().await.is_some() {}
    let _refresh = controllers.start();

    let deadline = config
        .plugins
        .iter()
        .map(|p| p.deadline)
        .max()
        .unwrap_or(Duration::from_secs(15));
    let directory = Directory::new(
        config.heartbeat_timeout,
        // The agent's own call, and the trip there and back.
        deadline + Duration::from_secs(5),
        config
            .plugins
            .iter()
            .map(|p| (p.name.clone(), p.driver.clone()))
            .collect(),
    );
    for n in &config.nodes {
        directory.expect(NodeRecord {
            name: n.name.clone(),
            labels: n.labels.clone(),
            plugins: n.plugins.keys().map(|p| (p.clone(), None)).collect(),
            draining: false,
            forgotten: false,
            cert: None,
            paths: Some(Paths::under(&n.dir)),
        });
    }
    let store: Arc<dyn Store> = match &config.etcd {
        Some(settings) => {
            let store = EtcdStore::connect(settings.clone())
                .await
                .map_err(|e| e.to_string())?;
            tracing::info!(endpoints = ?settings.endpoints, prefix = %settings.prefix, "store in etcd");
            Arc::new(store)
        }
        None => Arc::new(RedbStore::open(&config.state).map_err(|e| e.to_string())?),
    };
    let api_path = config.api.path().to_path_buf();
    let listener = api::bind(&api_path, config.socket_mode)?;
    let cluster = match &config.cluster {
        Some(endpoint) => Some((
            endpoint.path().to_path_buf(),
            api::bind(endpoint.path(), config.socket_mode)?,
        )),
        None => None,
    };
    let cluster_path = cluster.as_ref().map(|(path, _)| path.clone());
    let tls = match config.cluster_address {
        Some(address) => Some(bind_tls(&config, address).await?),
        None => None,
    };
    let manager = VolumeManager::new(config, store, controllers, policies, directory.clone())
        .map_err(|e| e.to_string())?;
    directory.set_sync(as_sync(&manager));
    for n in manager.remembered_nodes().map_err(|e| e.to_string())? {
        directory.expect(n);
    }
    let _workers = manager.start();
    // The API answers while the in-process agents check their records
    // against the mount table: their nodes' steps wait until they connect.
    let agents = tokio::spawn(start_node_agents(manager.clone(), directory.clone(), deadline));
    let tls = tls.map(|(tls, listener)| {
        tracing::info!(cluster_address = %tls.address, ca = %tls.ca.fingerprint(), "listening for agents over TLS");
        let names = manager.config().cluster_names.clone();
        // Detached: it serves until the process ends.
        drop(serve_cluster_tls(directory.clone(), tls.clone(), listener, names));
        tls
    });
    let _cluster = cluster.map(|(path, listener)| {
        tracing::info!(cluster = %path.display(), "listening for agents");
        serve_cluster(directory.clone(), listener)
    });
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

    let serving = tonic::transport::Server::builder()
        .add_service(BerthServer::new(BerthApi::new(manager, reloader, tls)))
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown);
    let agents_failed = async {
        match agents.await {
            Ok(Ok(())) => std::future::pending().await,
            Ok(Err(e)) => e,
            Err(e) => format!("starting the in-process agents: {e}"),
        }
    };
    let result = tokio::select! {
        served = serving => served.map_err(|e| format!("serving the API: {e}")),
        why = agents_failed => Err(why),
    };
    sighup.abort();
    let _ = std::fs::remove_file(&api_path);
    if let Some(path) = &cluster_path {
        let _ = std::fs::remove_file(path);
    }
    result
}

/// The in-process agents of the `[[node]]`s: each keeps its record beside
/// its node's paths and has a session like any agent. Returns once every
/// one has had its first session (or 30 s have passed); the sessions go on.
async fn start_node_agents(
    manager: Arc<VolumeManager>,
    directory: Arc<Directory>,
    deadline: Duration,
) -> Result<(), String> {
    let config = manager.config();
    for n in &config.nodes {
        let record = n.dir.join("agent.redb");
        // Only a new record is started from the store's publications.
        let seed = match record.exists() {
            true => Vec::new(),
            false => manager.recorded_on(&n.name),
        };
        let agent = Agent::open(AgentSpec {
            node: n.name.clone(),
            labels: n.labels.clone(),
            record,
            paths: Paths::under(&n.dir),
            plugins: n.plugins.clone(),
            plugin_dir: None,
            fingerprint_interval: config.fingerprint_interval,
            heartbeat_interval: config.heartbeat_timeout / 3,
            deadline,
            seed,
        })
        .await
        .map_err(|e| format!("node {}: {e}", n.name))?;
        // Detached: the link serves until the process ends.
        drop(link_in_process(directory.clone(), agent));
    }
    let all_connected = async {
        use crate::manager::nodes::NodeAgent;
        while !config.nodes.iter().all(|n| directory.connected(&n.name)) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    if tokio::time::timeout(Duration::from_secs(30), all_connected)
        .await
        .is_err()
    {
        tracing::warn!("not every in-process agent has connected after 30s");
    }
    Ok(())
}

/// Serves the cluster endpoint agents dial, until the process ends.
fn serve_cluster(
    directory: Arc<Directory>,
    listener: tokio::net::UnixListener,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let served = tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(Duration::from_secs(10)))
            .add_service(ClusterServer::new(ClusterService::new(directory, None)))
            .serve_with_incoming(UnixListenerStream::new(listener))
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "the cluster endpoint stopped");
        }
    })
}

/// The cluster CA (made on first use), and the TLS endpoint's listener.
async fn bind_tls(
    config: &Config,
    address: std::net::SocketAddr,
) -> Result<(Arc<ClusterTls>, tokio::net::TcpListener), String> {
    let ca = ClusterCa::load_or_create(&ca_dir(&config.state))?;
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|e| format!("cluster_address: binding {address}: {e}"))?;
    Ok((
        Arc::new(ClusterTls {
            ca,
            address: address.to_string(),
        }),
        listener,
    ))
}

/// Accepted connections with Nagle's algorithm off: a session is small
/// messages each way, and waiting to coalesce them stalls every node step.
fn nodelay(
    listener: tokio::net::TcpListener,
) -> impl tokio_stream::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    use tokio_stream::StreamExt;
    tokio_stream::wrappers::TcpListenerStream::new(listener)
        .map(|accepted| accepted.and_then(|tcp| tcp.set_nodelay(true).map(|()| tcp)))
}

/// Serves the TLS endpoint: agents join with a token, then attach with the
/// certificate they got; a client certificate is checked against the
/// cluster CA during the handshake.
fn serve_cluster_tls(
    directory: Arc<Directory>,
    tls: Arc<ClusterTls>,
    listener: tokio::net::TcpListener,
    names: Vec<String>,
) -> tokio::task::JoinHandle<()> {
    use tonic::transport::{Certificate, Identity, ServerTlsConfig};
    tokio::spawn(async move {
        let identity = match tls.ca.server_identity(&names) {
            Ok((chain, key)) => Identity::from_pem(chain, key),
            Err(e) => return tracing::error!(error = %e, "the TLS cluster endpoint cannot start"),
        };
        let config = ServerTlsConfig::new()
            .identity(identity)
            .client_ca_root(Certificate::from_pem(tls.ca.cert_pem()))
            .client_auth_optional(true);
        let server = match tonic::transport::Server::builder().tls_config(config) {
            Ok(s) => s,
            Err(e) => return tracing::error!(error = %e, "the TLS cluster endpoint cannot start"),
        };
        let served = server
            .http2_keepalive_interval(Some(Duration::from_secs(10)))
            .add_service(ClusterServer::new(ClusterService::new(directory, Some(tls))))
            .serve_with_incoming(nodelay(listener))
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "the TLS cluster endpoint stopped");
        }
    })
}
