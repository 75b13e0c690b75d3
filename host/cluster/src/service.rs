//! The `Cluster` service agents dial, and the in-process link that serves a
//! `[[node]]` through the same session code.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use berth_proto::berth::v1 as wire;
use berth_proto::berth::v1::cluster_server::Cluster;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};

use crate::directory::{Directory, NodeRefused};
use crate::pki::{ClusterCa, fingerprint};
use crate::session::serve_session;
use crate::tokens::{JoinTokens, TokenError};
use berth_agent::{Agent, SessionEnd};

/// The TLS cluster endpoint: where it listens and the CA behind it.
pub struct ClusterTls {
    pub ca: ClusterCa,
    /// The tokens agents join with.
    pub tokens: JoinTokens,
    /// host:port, as agents dial it.
    pub address: String,
    /// Connections one address may hold open (`cluster_connections_per_address`);
    /// `None`: half of what the endpoint holds.
    pub per_address: Option<usize>,
}

pub struct ClusterService {
    directory: Arc<Directory>,
    /// On the TLS endpoint: agents join, and attach with their certificate.
    tls: Option<Arc<ClusterTls>>,
}

impl ClusterService {
    /// The service on the unix socket (no `tls`: the socket's mode guards
    /// it) or on the TLS endpoint.
    pub fn new(directory: Arc<Directory>, tls: Option<Arc<ClusterTls>>) -> Self {
        ClusterService { directory, tls }
    }
}

/// The node a peer's client certificate was issued to (on the TLS endpoint).
pub fn certified_node<T>(
    directory: &Directory,
    request: &tonic::Request<T>,
) -> Result<String, tonic::Status> {
    let fp = request
        .peer_certs()
        .and_then(|certs| certs.first().map(|c| fingerprint(c)))
        .ok_or_else(|| {
            tonic::Status::unauthenticated(
                "no client certificate: an agent joins with a token first (`berth cluster token`)",
            )
        })?;
    directory.node_for_cert(&fp).ok_or_else(|| {
        tracing::warn!(certificate = %fp, "agent refused: its certificate is unknown or revoked");
        tonic::Status::unauthenticated(
            "this agent's certificate is unknown or revoked (`berth node remove`): join again with a new token",
        )
    })
}

type Downstream = Pin<Box<dyn Stream<Item = Result<wire::ServerMessage, tonic::Status>> + Send>>;

#[tonic::async_trait]
impl Cluster for ClusterService {
    type AttachStream = Downstream;

    async fn attach(
        &self,
        request: tonic::Request<tonic::Streaming<wire::AgentMessage>>,
    ) -> Result<tonic::Response<Downstream>, tonic::Status> {
        let certified = match self.tls {
            Some(_) => Some(certified_node(&self.directory, &request)?),
            None => None,
        };
        let from_agent = request.into_inner();
        let (to_agent, rx) = crate::directory::to_agent();
        let directory = self.directory.clone();
        tokio::spawn(serve_session(
            directory,
            from_agent,
            to_agent,
            move |node| match &certified {
                Some(name) if name != node => Err(NodeRefused::OtherNode {
                    certified: name.clone(),
                    node: node.to_string(),
                }),
                _ => Ok(()),
            },
        ));
        Ok(tonic::Response::new(Box::pin(ReceiverStream::new(rx).map(Ok))))
    }

    async fn join(
        &self,
        request: tonic::Request<wire::JoinRequest>,
    ) -> Result<tonic::Response<wire::JoinResponse>, tonic::Status> {
        let Some(tls) = &self.tls else {
            return Err(tonic::Status::failed_precondition(
                "agents join on the cluster's TLS endpoint (cluster_address), not here",
            ));
        };
        let peer = request.remote_addr();
        let from = peer.map_or_else(|| "an unknown address".to_string(), |a| a.to_string());
        let r = request.into_inner();
        let node = berth_model::text::echo(&r.node);
        let refuse = |e: TokenError| {
            tracing::warn!(%node, peer = %from, why = %e, "join refused");
            tonic::Status::from(e)
        };
        tls.tokens.admit(peer.map(|a| a.ip())).map_err(refuse)?;
        berth_model::bounds::name(&r.node).map_err(|e| refuse(TokenError::Invalid(format!("node {e}"))))?;
        // Signing first: a request that is not valid spends no token.
        let (certificate, fp) = tls
            .ca
            .sign_agent(&r.node, &r.certificate_request)
            .map_err(|e| refuse(TokenError::Certificate(e)))?;
        let taken = self.directory.holds_identity(&r.node);
        let token = tls
            .tokens
            .redeem(&r.token, &r.node, taken)
            .await
            .map_err(refuse)?;
        let record = self
            .directory
            .joined(&r.node, fp)
            .map_err(|e| refuse(TokenError::Refused(e.to_string())))?;
        if let Some(sync) = self.directory.syncer() {
            sync.remember(record).await;
        }
        tracing::warn!(%node, peer = %from, token = %token.id, replaced = taken, "agent joined");
        Ok(tonic::Response::new(wire::JoinResponse {
            certificate,
            ca: tls.ca.cert_pem().to_string(),
        }))
    }
}

/// Serves an in-process agent for as long as the server runs: the same
/// session as over the network, on two channels.
pub fn link_in_process(directory: Arc<Directory>, agent: Arc<Agent>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let (up, up_rx) = berth_agent::to_server();
            let (down, down_rx) = crate::directory::to_agent();
            let server = tokio::spawn(serve_session(
                directory.clone(),
                ReceiverStream::new(up_rx).map(Ok),
                down,
                |_| Ok(()),
            ));
            let end = agent.session(up, ReceiverStream::new(down_rx).map(Ok)).await;
            server.abort();
            match end {
                SessionEnd::Refused(why) => {
                    tracing::error!(node = %agent.name(), %why, "in-process agent refused");
                    return;
                }
                SessionEnd::Lost(why) => {
                    tracing::warn!(node = %agent.name(), %why, "in-process agent session lost; starting again");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    })
}
