//! The endpoints a leader serves besides its API: the cluster socket and
//! TLS endpoint agents dial, and the in-process agents of `[[node]]`s.

use std::sync::Arc;
use std::time::Duration;

use berth_proto::berth::v1::berth_server::BerthServer;
use berth_proto::berth::v1::cluster_server::ClusterServer;
use tokio_stream::wrappers::UnixListenerStream;

use crate::agent::calls::Paths;
use crate::agent::{Agent, AgentSpec};
use crate::api::BerthApi;
use crate::cluster::Directory;
use crate::cluster::pki::{ClusterCa, ClusterTls};
use crate::cluster::service::{ClusterService, link_in_process};
use crate::leadership::forward::only_servers;
use crate::manager::VolumeManager;

/// The in-process agents of the `[[node]]`s: each keeps its record beside
/// its node's paths and has a session like any agent. Returns once every
/// one has had its first session (or 30 s have passed); the sessions go on.
pub(super) async fn start_node_agents(
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
pub(super) fn serve_cluster(
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

/// The TLS endpoint's listener, with the CA behind it.
pub(super) async fn bind_tls(
    ca: ClusterCa,
    address: std::net::SocketAddr,
) -> Result<(Arc<ClusterTls>, tokio::net::TcpListener), String> {
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

/// The Berth API as the leader offers it to followers on its TLS endpoint.
pub(super) struct Forwarded {
    pub api: Arc<BerthApi>,
    /// What a forwarding server must present.
    pub secret: String,
}

/// Serves the TLS endpoint: agents join with a token, then attach with the
/// certificate they got; a client certificate is checked against the
/// cluster CA during the handshake. With `forwarded`, followers' API calls
/// are answered here too.
pub(super) fn serve_cluster_tls(
    directory: Arc<Directory>,
    tls: Arc<ClusterTls>,
    listener: tokio::net::TcpListener,
    names: Vec<String>,
    forwarded: Option<Forwarded>,
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
        let forwarded = forwarded.map(|f| {
            tonic::service::interceptor::InterceptedService::new(
                BerthServer::from_arc(f.api),
                only_servers(f.secret),
            )
        });
        let served = server
            .http2_keepalive_interval(Some(Duration::from_secs(10)))
            .add_service(ClusterServer::new(ClusterService::new(directory, Some(tls))))
            .add_optional_service(forwarded)
            .serve_with_incoming(nodelay(listener))
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "the TLS cluster endpoint stopped");
        }
    })
}
