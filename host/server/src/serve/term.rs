//! A leader's term: everything a leading server runs, from the first
//! fingerprint of its plugins to the API, on a store it was handed.

use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::endpoints::{AGENTS_GRACE, bind_tls, serve_cluster, serve_cluster_tls, start_node_agents};
use super::{Reloader, ServeError};
use crate::api::{self, BerthApi, ReloadError};
use crate::cluster::Directory;
use crate::cluster::pki::ClusterCa;
use crate::cluster::tokens::JoinTokens;
use crate::config::Config;
use crate::csi::ClientOptions;
use crate::csi::fingerprint::Role;
use crate::csi::registry::{Health, PluginSpec, RefreshTasks, Registry};
use crate::leadership::Election;
use crate::leadership::forward::TermApi;
use crate::manager::{VolumeManager, as_sync};
use crate::metrics::readiness::NotReady;
use crate::metrics::{self, live::Observed};
use crate::model::Paths;
use crate::policy::builtin::Builtins;
use crate::policy::{Policies, PolicyEngine};
use crate::store::{Committer, NodeRecord, Store};

/// What a term is handed.
pub(super) struct Term {
    pub config: Config,
    pub config_path: Option<PathBuf>,
    pub store: Arc<dyn Store>,
    pub api: TermSocket,
    /// The cluster CA, with a TLS cluster endpoint.
    pub ca: Option<ClusterCa>,
    /// With etcd: the election this term was won in.
    pub election: Option<Arc<Election>>,
    /// With the embedded store: its committer, which the in-process nodes'
    /// records share (with etcd each keeps a file beside its paths).
    pub node_records: Option<Arc<Committer>>,
}

/// How a term's API is reached.
pub(super) enum TermSocket {
    /// The API socket, bound already: the term serves it until it ends.
    Own(tokio::net::UnixListener),
    /// The process's API server, beside other servers on etcd: it hands
    /// calls to the term once the term gives it its API here.
    Routed(tokio::sync::watch::Sender<Option<TermApi>>),
}

/// The engine for `config`'s modules, sized for the largest; a follower
/// preparing the set compiles with the same settings, so a takeover maps
/// what it compiled.
/// The policy modules of `config`, on an engine sized for the largest.
fn policies(config: &Config) -> Result<Arc<Policies>, ServeError> {
    let engine = PolicyEngine::new(super::engine_options(config)).map_err(ServeError::Engine)?;
    let policies = Arc::new(Policies::new(Arc::new(engine), Builtins::default()));
    super::put_modules(&policies, config)?;
    for s in policies.stats() {
        tracing::info!(module = %s.module, decisions = ?s.decisions, "policy module loaded");
    }
    Ok(policies)
}

/// Every controller plugin, each fingerprinted once before work starts
/// (never a view cached from another term); unreachable ones are retried
/// by the periodic refresh.
async fn controllers(config: &Config) -> Arc<Registry> {
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
    let mut first = tokio::task::JoinSet::new();
    for p in controllers.list() {
        first.spawn(async move {
            p.refresh().await;
        });
    }
    while first.join_next().await.is_some() {}
    controllers
}

/// Ready while every controller plugin's last fingerprints succeeded.
fn plugins_ready(registry: &Weak<Registry>) -> Result<String, NotReady> {
    let Some(registry) = registry.upgrade() else {
        return Ok("this server does not lead now; the leader fingerprints them".into());
    };
    let plugins = registry.list();
    if plugins.is_empty() {
        return Ok("no controller plugins".into());
    }
    let mut problems = Vec::new();
    for p in &plugins {
        match p.status().health {
            Health::Healthy => {}
            Health::Unknown => problems.push(format!("{}: not fingerprinted yet", p.id())),
            Health::Unhealthy { reason } => problems.push(format!("{}: {reason}", p.id())),
        }
    }
    match problems.is_empty() {
        true => Ok(format!("{} fingerprinted and healthy", plugins.len())),
        false => Err(problems.join("; ").into()),
    }
}

/// Ready while every in-process node's agent is connected.
fn nodes_ready(directory: &Weak<Directory>, nodes: &[String]) -> Result<String, NotReady> {
    use crate::manager::nodes::NodeAgent;
    let Some(directory) = directory.upgrade() else {
        return Ok("this server does not lead now".into());
    };
    let away: Vec<&str> = nodes
        .iter()
        .filter(|n| !directory.connected(n))
        .map(String::as_str)
        .collect();
    match away.is_empty() {
        true => Ok(format!("{} in-process node(s) connected", nodes.len())),
        false => Err(format!("not connected: {}", away.join(", ")).into()),
    }
}

/// What a term runs on, short of its endpoints: the controller plugins
/// fingerprinted and refreshed, the directory of configured and remembered
/// nodes, and the manager it answers to (not started). The paused-time
/// tests of the core build the same.
pub(crate) struct Core {
    pub manager: Arc<VolumeManager>,
    pub directory: Arc<Directory>,
    /// The longest plugin deadline: what a node operation may take on its node.
    pub deadline: Duration,
    pub refresh: RefreshTasks,
    /// How long the volumes took to load.
    pub loaded_in: Duration,
}

pub(crate) async fn core(
    config: Config,
    store: Arc<dyn Store>,
    policies: Arc<Policies>,
) -> Result<Core, ServeError> {
    let controllers = controllers(&config).await;
    let refresh = controllers.start();
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
    // Agents beat every third of the timeout by default; past that many a second, slower.
    directory
        .pace
        .set(config.heartbeats_per_second, config.heartbeat_timeout / 3);
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
    let loading = std::time::Instant::now();
    let manager = VolumeManager::new(config, store, controllers, policies, directory.clone())?;
    let loaded_in = loading.elapsed();
    let counts = manager.volume_counts();
    tracing::info!(
        volumes = counts.volumes,
        held_as_stored = counts.held_as_stored,
        ms = loaded_in.as_millis() as u64,
        "volumes loaded"
    );
    directory.set_sync(as_sync(&manager));
    for n in manager.fleet().remembered_nodes()? {
        directory.expect(n);
    }
    Ok(Core {
        manager,
        directory,
        deadline,
        refresh,
        loaded_in,
    })
}

/// The manager's workers, started once the API answers and a policy set
/// that verifies is in service (at once, unless the stored set did not
/// verify at start). Dropped with the term, they stop.
fn start_when_trusted(
    manager: &Arc<VolumeManager>,
    mut trusted: tokio::sync::watch::Receiver<bool>,
    mut answering: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinSet<()> {
    let manager = manager.clone();
    let mut workers = tokio::task::JoinSet::new();
    workers.spawn(async move {
        if answering.wait_for(|a| *a).await.is_err() || trusted.wait_for(|t| *t).await.is_err() {
            return;
        }
        let mut workers = manager.start();
        while workers.join_next().await.is_some() {}
    });
    workers
}

/// Runs the term until `shutdown` completes (or an in-process agent cannot start).
pub(super) async fn lead(
    term: Term,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let Term {
        config,
        config_path,
        store,
        api: socket,
        ca,
        election,
        node_records,
    } = term;
    metrics::set_leader(true);
    // Not ready until the API answers (after the in-process nodes connect).
    metrics::readiness().set_failing("api", "a term is starting".into());
    let own = config.clone();
    let server = config
        .etcd
        .as_ref()
        .map_or_else(|| "berth".to_string(), |e| e.name.clone());
    let (trusted, _) = tokio::sync::watch::channel(true);
    let (config, set) = match super::policy_set::in_service(config.clone(), &store, &server).await {
        Ok(in_service) => in_service,
        // A stored set this server cannot verify (one server on its own
        // store, or the last resort on etcd, when no server can): it
        // starts (so an operator can roll back or re-sign through the API),
        // is not ready, and acts on no volume meanwhile. berth.toml's own
        // tables that do not verify are refused at start instead.
        Err(e) => match (e.as_trust_failure(), store.load_policy_set()?) {
            (ReloadError::Untrusted(e), Some(stored)) => {
                let e = ReloadError::Untrusted(e);
                tracing::error!(error = %e, version = stored.version, "the stored policy set does not verify with [policy_trust]: serving the API, acting on no volume until a set that verifies is in service");
                metrics::readiness().set_failing("policy", e.to_string());
                trusted.send_replace(false);
                let mut config = config;
                config.policies.clear();
                (config, Some(stored))
            }
            (other, _) => return Err(other.into()),
        },
    };
    let set_store = store.clone();
    let access = api::Access {
        acl: Arc::new(crate::acl::Acl::load(store.clone())?),
        audit: Arc::new(
            api::audit::Audit::open(&config.audit_log)
                .map_err(ServeError::io("opening the audit log (audit_log in berth.toml)"))?,
        ),
    };
    let policies = policies(&config)?;
    let api_path = config.api.path().to_path_buf();
    let cluster = match &config.cluster {
        Some(endpoint) => Some((
            endpoint.path().to_path_buf(),
            api::bind(endpoint.path(), config.socket_mode)?,
        )),
        None => None,
    };
    let api_tls = match &socket {
        // One server on its own store serves its TLS API itself.
        TermSocket::Own(_) => super::api_tls::bind(&config, ca.as_ref()).await?,
        TermSocket::Routed(_) => None,
    };
    // A replicated server serves its console beside the election, as its TLS API.
    let console = match &socket {
        TermSocket::Own(_) => super::console::prepare(&config, ca.as_ref())?,
        TermSocket::Routed(_) => None,
    };
    let tls = match (config.cluster_address, ca) {
        (Some(address), Some(ca)) => {
            let tokens = JoinTokens::load(store.clone(), ca.fingerprint(), config.join_token_max_ttl)
                .map_err(ServeError::Tokens)?
                .with_joins_per_minute(config.joins_per_minute);
            Some(bind_tls(ca, tokens, address, config.cluster_connections_per_address).await?)
        }
        _ => None,
    };
    let Core {
        manager,
        directory,
        deadline,
        refresh: _refresh,
        loaded_in,
    } = core(config, store, policies).await?;
    let registry = Arc::downgrade(manager.registry());
    metrics::readiness().set("plugins", Box::new(move || plugins_ready(&registry)));
    if let Some(election) = &election {
        let election = election.clone();
        manager.act_only_while(Box::new(move || election.vouches()));
    }
    if let Some(m) = metrics::get() {
        let observed: Weak<dyn Observed> = Arc::downgrade(&manager) as Weak<VolumeManager>;
        m.live().set("manager", observed);
    }
    // Every volume is queued now, and the workers take them once the API
    // answers: at a restart with many volumes the first pass decodes every
    // record, and before the API that was the cores' work, not its own.
    manager.queue_every_volume();
    let (answering, answers) = tokio::sync::watch::channel(false);
    let _workers = start_when_trusted(&manager, trusted.subscribe(), answers);
    let reloader = Arc::new(Reloader {
        path: config_path,
        policies: manager.policies().clone(),
        trust: std::sync::RwLock::new(own.policy_trust.clone()),
        config: own,
        store: set_store,
        set: tokio::sync::Mutex::new(set),
        server,
        trusted,
    });
    let sighup = reloader.clone().on_sighup()?;
    let guard = reloader.clone().guard();
    let api = Arc::new(BerthApi::new(
        manager.clone(),
        Arc::new(reloader),
        tls.as_ref().map(|(tls, _)| tls.clone()),
        election.clone(),
        access,
    ));
    let _tls = tls.map(|(tls, listener)| {
        tracing::info!(cluster_address = %tls.address, ca = %tls.ca.fingerprint(), "listening for agents over TLS");
        let names = manager.config().cluster_names.clone();
        // Followers pass API calls on here, with their own server certificates.
        let forward = election.is_some();
        serve_cluster_tls(directory.clone(), tls.clone(), listener, names, api.clone(), forward)
    });
    let _cluster = cluster.map(|(path, listener)| {
        tracing::info!(cluster = %path.display(), "listening for agents");
        serve_cluster(directory.clone(), api.clone(), listener)
    });
    tracing::info!(
        api = %api_path.display(),
        store = %match &manager.config().etcd {
            Some(etcd) => format!("etcd {} {}", etcd.endpoints.join(","), etcd.prefix),
            None => manager.config().state.display().to_string(),
        },
        plugins = ?manager.config().plugins.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        nodes = ?manager.config().nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(),
        modules = manager.config().policies.len(),
        "serving"
    );
    for s in manager.fleet().stranded() {
        let volumes = s.volumes.join(", ");
        if s.agents_may_attach {
            tracing::warn!(node = %s.node, %volumes, "publications on a node berth.toml does not name: they wait for its agent to attach. If it was a [[node]] removed from berth.toml, put it back; if it is gone, `berth node forget NODE --force`");
        } else {
            tracing::warn!(node = %s.node, %volumes, "publications on a node berth.toml does not name, and no agent can attach (no cluster endpoint): they wait for ever. Put its [[node]] back, or `berth node forget NODE --force` if it is gone");
        }
    }

    // The API socket answers once the in-process nodes are connected (or
    // the grace has passed): a first `node list` shows them ready, their
    // plugins known. The cluster endpoints (and a follower's calls passed
    // on over TLS) are served already: a failover must not wait on this.
    let in_process: Vec<String> = manager.config().nodes.iter().map(|n| n.name.clone()).collect();
    if !in_process.is_empty() {
        let weak = Arc::downgrade(&directory);
        metrics::readiness().set("nodes", Box::new(move || nodes_ready(&weak, &in_process)));
    }
    let mut agents = start_node_agents(&manager, directory.clone(), deadline, node_records);
    // Less the time the volumes took to load: a site whose volumes take
    // seconds to load has agents whose start takes as long, and the API
    // does not wait for them on top.
    agents
        .connected_within(Some(AGENTS_GRACE.saturating_sub(loaded_in)))
        .await?;
    answering.send_replace(true);
    metrics::readiness().set_ok("api", format!("serving on {}", api_path.display()));
    // An in-process agent that cannot open (a volume path in use that its
    // record does not name) ends the term, as before the API answered.
    let result = match socket {
        TermSocket::Own(listener) => {
            let others = tonic::service::Routes::new(api::introspection::health().await)
                .add_service(api::introspection::reflection()?);
            // The TLS API ends with the term (when this sender is dropped).
            let (_tls_running, tls_stop) = tokio::sync::oneshot::channel::<()>();
            if let Some(tls) = api_tls {
                tracing::info!(api_address = %tls.address, ca = %tls.ca_file.display(), "serving the API over TLS to callers with ACL tokens");
                let remote = super::api_h2::Dispatch {
                    api: api.guarded(),
                    others: others.clone(),
                    entrance: api::access::Entrance::Remote,
                };
                let stopped = async {
                    let _ = tls_stop.await;
                };
                tokio::spawn(super::api_h2::serve(
                    tls.incoming(),
                    remote,
                    super::api_h2::MAX_CONNECTIONS,
                    stopped,
                ));
            }
            // The console ends with the term, as the TLS API.
            let _console = match console {
                Some(prepared) => Some(AbortOnDrop(super::console::serve(prepared, api.guarded()).await?)),
                None => None,
            };
            let dispatch = super::api_h2::Dispatch {
                api: api.guarded(),
                others,
                entrance: api::access::Entrance::Local,
            };
            let serving = super::api_h2::serve(listener, dispatch, super::api_h2::MAX_CONNECTIONS, shutdown);
            tokio::select! {
                () = serving => Ok(()),
                e = agents.failed() => Err(e),
            }
        }
        TermSocket::Routed(routed) => {
            routed.send_replace(Some(TermApi {
                server: tower::util::BoxCloneSyncService::new(api.guarded()),
                runtime: tokio::runtime::Handle::current(),
            }));
            let ended = tokio::select! {
                () = shutdown => Ok(()),
                e = agents.failed() => Err(e),
            };
            routed.send_replace(None);
            ended
        }
    };
    sighup.abort();
    guard.abort();
    // Outcomes parked for the next write go now, within a bound: a term
    // that lost its lease cannot write them, and the next makes the calls
    // again.
    if let Ok(n) = tokio::time::timeout(Duration::from_secs(2), manager.write_parked()).await
        && n > 0
    {
        tracing::info!(
            volumes = n,
            "outcomes parked for the next write written as the term ends"
        );
    }
    result
}

/// A task that ends when this is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
