//! The endpoints a leader serves besides its API: the cluster socket and
//! TLS endpoint agents dial, and the in-process agents of `[[node]]`s.

use std::sync::Arc;
use std::time::Duration;

use berth_proto::berth::v1::cluster_server::ClusterServer;
use berth_proto::berth::v1::node_volumes_server::NodeVolumesServer;
use tokio_stream::wrappers::UnixListenerStream;

use super::ServeError;
use crate::agent::record::RecordPlace;
use crate::agent::{Agent, AgentSpec, Seed};
use crate::api::{BerthApi, NodeVolumesApi};
use crate::cluster::Directory;
use crate::cluster::pki::ClusterCa;
use crate::cluster::service::ClusterTls;
use crate::cluster::service::{ClusterService, link_in_process};
use crate::cluster::tokens::JoinTokens;
use crate::leadership::forward::only_servers;
use crate::manager::VolumeManager;
use crate::model::Paths;
use crate::store::Committer;

/// How long the API waits for the in-process agents before it answers,
/// less however long the volumes took to load: long enough that a first
/// `node list` shows them ready at an ordinary site; an agent holding a great many volumes (its start is a check of
/// two paths each) connects later, shown as `unknown` until it does, and
/// placement waits for it meanwhile.
pub(super) const AGENTS_GRACE: Duration = Duration::from_secs(2);

/// The in-process agents of the `[[node]]`s, opening and then in session:
/// each keeps its record in the embedded store's file (`records`, the
/// store's committer), or with etcd beside its node's paths, and has a
/// session like any agent.
pub(crate) struct NodeAgents {
    names: Vec<String>,
    directory: Arc<Directory>,
    /// Each agent's opening, polled by whoever waits on these (the term's
    /// own task, not the runtime's workers, which the reconciler keeps
    /// busy at a start); its session goes on, detached, once open.
    opening: Vec<Opening>,
}

type Opening = std::pin::Pin<Box<dyn Future<Output = Result<(), ServeError>> + Send>>;

/// Starts opening every `[[node]]`'s agent; none is waited for here.
pub(crate) fn start_node_agents(
    manager: &Arc<VolumeManager>,
    directory: Arc<Directory>,
    deadline: Duration,
    records: Option<Arc<Committer>>,
) -> NodeAgents {
    let config = manager.config();
    let mut opening: Vec<Opening> = Vec::new();
    for n in &config.nodes {
        // Where releases before kept it, and still do beside etcd.
        let file = n.dir.join("agent.redb");
        let record = match &records {
            Some(committer) => RecordPlace::Store {
                committer: committer.clone(),
                store: config.state.clone(),
                node: n.name.clone(),
                file,
            },
            None => RecordPlace::File(file),
        };
        // Used only if the record turns out new: started from the store's
        // publications. A record file that is there is not new.
        let seed = match &record {
            RecordPlace::File(f) | RecordPlace::Store { file: f, .. } if f.exists() => Seed::default(),
            _ => {
                let (manager, node) = (Arc::downgrade(manager), n.name.clone());
                Seed::from_fn(move || {
                    manager
                        .upgrade()
                        .map(|m| m.fleet().recorded_on(&node))
                        .unwrap_or_default()
                })
            }
        };
        let spec = AgentSpec {
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
        };
        let directory = directory.clone();
        opening.push(Box::pin(async move {
            let node = spec.node.clone();
            let agent = Agent::open(spec)
                .await
                .map_err(|error| ServeError::Agent { node, error })?;
            // Detached: the link serves until the process ends.
            drop(link_in_process(directory, agent));
            Ok(())
        }));
    }
    NodeAgents {
        names: config.nodes.iter().map(|n| n.name.clone()).collect(),
        directory,
        opening,
    }
}

impl NodeAgents {
    /// Until every agent has had its first session, or `grace` (if any) has
    /// passed; an agent that could not open meanwhile is the error.
    pub(crate) async fn connected_within(&mut self, grace: Option<Duration>) -> Result<(), ServeError> {
        use crate::manager::nodes::NodeAgent;
        let directory = self.directory.clone();
        let names = self.names.clone();
        let all_connected = async move {
            while !names.iter().all(|n| directory.connected(n)) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::select! {
            e = self.failed() => Err(e),
            connected = async move {
                match grace {
                    Some(grace) => tokio::time::timeout(grace, all_connected).await.is_ok(),
                    None => { all_connected.await; true }
                }
            } => {
                if !connected {
                    tracing::info!(nodes = ?self.names, "serving the API before every in-process agent has connected; a node is shown as unknown until its agent has checked what it holds");
                }
                Ok(())
            }
        }
    }

    /// The first agent that could not open: pending for ever if every one opens.
    pub(crate) async fn failed(&mut self) -> ServeError {
        let opening = &mut self.opening;
        let failed = std::future::poll_fn(|cx| {
            let mut i = 0;
            while i < opening.len() {
                match opening[i].as_mut().poll(cx) {
                    std::task::Poll::Pending => i += 1,
                    std::task::Poll::Ready(opened) => {
                        drop(opening.swap_remove(i));
                        if let Err(e) = opened {
                            return std::task::Poll::Ready(Some(e));
                        }
                    }
                }
            }
            if opening.is_empty() {
                std::task::Poll::Ready(None)
            } else {
                std::task::Poll::Pending
            }
        })
        .await;
        match failed {
            Some(e) => e,
            None => std::future::pending().await,
        }
    }
}

/// Serves the cluster endpoint agents dial, until the process ends: their
/// sessions, and the volume calls their nodes' Docker plugins make.
pub(super) fn serve_cluster(
    directory: Arc<Directory>,
    api: Arc<BerthApi>,
    listener: tokio::net::UnixListener,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let volumes = NodeVolumesApi::new(api, directory.clone(), false);
        let served = tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(Duration::from_secs(10)))
            .add_service(ClusterServer::new(ClusterService::new(directory, None)))
            .add_service(NodeVolumesServer::new(volumes))
            .serve_with_incoming(UnixListenerStream::new(listener))
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "the cluster endpoint stopped");
        }
    })
}

/// The TLS endpoint's listener, with the CA behind it.
pub(super) async fn bind_tls(
    ca: ClusterCa,
    tokens: JoinTokens,
    address: std::net::SocketAddr,
    per_address: Option<usize>,
) -> Result<(Arc<ClusterTls>, tokio::net::TcpListener), ServeError> {
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|source| ServeError::Bind { address, source })?;
    Ok((
        Arc::new(ClusterTls {
            ca,
            tokens,
            address: address.to_string(),
            per_address,
        }),
        listener,
    ))
}

/// How long a peer of the TLS endpoint has to finish its handshake.
const TLS_HANDSHAKE: Duration = Duration::from_secs(10);

/// Connections the TLS endpoint holds at once: half the descriptors this
/// process may open (the rest are the store's, the plugins', the API's),
/// and half of that from one address unless `per_address` says otherwise
/// (at most all of it): a fleet behind one NAT shares one address (8,192
/// agents with `LimitNOFILE=65536`, the other half left to the rest).
fn tls_caps(per_address: Option<usize>) -> crate::metrics::listener::Caps {
    let descriptors = crate::metrics::listener::raise_descriptor_limit();
    let total = (descriptors / 2).clamp(16, 16_384) as usize;
    crate::metrics::listener::Caps {
        total,
        per_address: per_address.unwrap_or(total / 2).clamp(4, total),
    }
}

/// The TLS endpoint's server configuration: the server's chain for
/// `names`, and client certificates checked against the cluster CA when a
/// peer presents one (a joining agent has none yet).
fn tls_config(ca: &ClusterCa, names: &[String]) -> Result<rustls::ServerConfig, ServeError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let (chain, key) = ca.server_identity(names)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca.cert_pem().as_bytes()) {
        roots
            .add(cert.map_err(ServeError::tls)?)
            .map_err(ServeError::tls)?;
    }
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .allow_unauthenticated()
            .build()
            .map_err(ServeError::tls)?;
    let (certs, key) = super::api_tls::identity(&chain, &key)?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(ServeError::tls)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .map_err(ServeError::tls)?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

/// Serves the TLS endpoint: agents join with a token, then attach with the
/// certificate they got, and their nodes' Docker plugins make volume calls
/// bounded to their node; a client certificate is checked against the
/// cluster CA during the handshake. With `forward` (several servers),
/// followers' API calls are answered here too.
pub(super) fn serve_cluster_tls(
    directory: Arc<Directory>,
    tls: Arc<ClusterTls>,
    listener: tokio::net::TcpListener,
    names: Vec<String>,
    api: Arc<BerthApi>,
    forward: bool,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let config = match tls_config(&tls.ca, &names) {
            Ok(c) => c,
            Err(e) => return tracing::error!(error = %e, "the TLS cluster endpoint cannot start"),
        };
        let incoming = crate::metrics::listener::tls_incoming(
            listener,
            tokio_rustls::TlsAcceptor::from(Arc::new(config)),
            tls_caps(tls.per_address),
            TLS_HANDSHAKE,
            Some(crate::agent::tls::SERVER_PROTOCOL),
            "cluster",
        );
        let volumes = NodeVolumesApi::new(api.clone(), directory.clone(), true);
        let forwarded = forward
            .then(|| tonic::service::interceptor::InterceptedService::new(api.guarded(), only_servers()));
        // A connection silent for a minute is pinged, and dropped if the peer
        // does not answer within 20 s. Sessions have their own heartbeats,
        // paced for the fleet; pinging each every few seconds would cost more.
        let served = tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(Duration::from_secs(60)))
            .http2_keepalive_timeout(Some(Duration::from_secs(20)))
            .max_concurrent_streams(Some(256))
            .add_service(ClusterServer::new(ClusterService::new(directory, Some(tls))))
            .add_service(NodeVolumesServer::new(volumes))
            .add_optional_service(forwarded)
            .serve_with_incoming(incoming)
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "the TLS cluster endpoint stopped");
        }
    })
}
