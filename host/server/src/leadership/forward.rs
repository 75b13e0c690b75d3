//! A follower's API: every call passed on, as it came, to the leader's TLS
//! cluster endpoint, the follower presenting its own server certificate
//! (mutual TLS, both from the cluster CA); the leader's answer
//! goes back unchanged. Forwarding raw gRPC keeps followers ignorant of
//! the API's methods: nothing to keep in step when one is added.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::watch;
use tonic::body::Body;
use tonic::codegen::http;
use tonic::server::NamedService;
use tonic::transport::Channel;

use super::{Role, ServerInfo};

/// Tries of a call on this server's own socket while it takes the lead.
const HANDOVER_ATTEMPTS: u32 = 20;

/// What a follower presents to the leader's TLS endpoint.
pub struct ForwardTls {
    /// The cluster CA's certificate (PEM), the only root trusted.
    pub ca: String,
    /// This server's certificate chain and key (PEM), from the cluster CA.
    pub chain: String,
    pub key: String,
}

#[derive(Clone)]
pub struct Forward {
    role: watch::Receiver<Role>,
    me: ServerInfo,
    /// With a TLS cluster endpoint: the CA, and this server's own
    /// certificate chain and key, presented to the leader.
    tls: Option<Arc<ForwardTls>>,
    /// How long a call waits for a leader while none is known.
    wait: Duration,
    /// The channel last forwarded on, by where it goes.
    channel: Arc<Mutex<Option<(String, Channel)>>>,
}

/// Where a call goes.
enum Target {
    /// Another server leads.
    Leader(ServerInfo),
    /// This server leads now (the call came in while it followed): its
    /// own API socket, where the term's server answers.
    Me,
}

impl Forward {
    pub fn new(
        role: watch::Receiver<Role>,
        me: ServerInfo,
        tls: Option<ForwardTls>,
        wait: Duration,
    ) -> Forward {
        Forward {
            role,
            me,
            tls: tls.map(Arc::new),
            wait,
            channel: Arc::default(),
        }
    }

    /// Who leads, waiting up to `wait` while an election is under way: a
    /// call held a moment beats one refused.
    async fn leader(&self) -> Result<Target, tonic::Status> {
        let mut role = self.role.clone();
        let deadline = tokio::time::Instant::now() + self.wait;
        loop {
            match &*role.borrow_and_update() {
                Role::Follower { leader: Some(l) } if l.name != self.me.name => {
                    return Ok(Target::Leader(l.clone()));
                }
                Role::Leader { .. } => return Ok(Target::Me),
                Role::Follower { .. } => {}
            }
            match tokio::time::timeout_at(deadline, role.changed()).await {
                Ok(Ok(())) => {}
                _ => {
                    return Err(tonic::Status::unavailable(format!(
                        "no leader was elected within {}: the servers could not reach etcd, or none could start; retry shortly",
                        humantime::format_duration(self.wait)
                    )));
                }
            }
        }
    }

    /// The channel to send a call on now (and whether it is this server's
    /// own socket), or the answer to give instead.
    async fn target(&self) -> Result<(Channel, bool), tonic::Status> {
        let target = self.leader().await?;
        let mine = matches!(target, Target::Me);
        let at = match &target {
            Target::Me => self.me.api.clone(),
            Target::Leader(leader) => leader.forward.clone().ok_or_else(|| not_forwarded(leader))?,
        };
        let mut cached = self.channel.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((was, channel)) = &*cached
            && *was == at
        {
            return Ok((channel.clone(), mine));
        }
        let channel = match target {
            Target::Me => {
                let api =
                    crate::csi::Endpoint::parse(&at).map_err(|e| tonic::Status::internal(e.to_string()))?;
                crate::csi::unix_channel(api.path())
            }
            Target::Leader(leader) => {
                let tls = self.tls.as_ref().ok_or_else(|| not_forwarded(&leader))?;
                crate::agent::tls::server_channel(&at, &tls.ca, (&tls.chain, &tls.key)).map_err(|e| {
                    tonic::Status::unavailable(format!("forwarding to the leader {}: {e}", leader.name))
                })?
            }
        };
        *cached = Some((at, channel.clone()));
        Ok((channel, mine))
    }
}

fn not_forwarded(leader: &ServerInfo) -> tonic::Status {
    tonic::Status::unavailable(format!(
        "this server follows {}, whose API is {} on its machine; followers pass calls on only when both have a TLS cluster endpoint (cluster_address)",
        leader.name, leader.api
    ))
}

impl NamedService for Forward {
    const NAME: &'static str = berth_proto::berth::v1::berth_server::SERVICE_NAME;
}

impl tower::Service<http::Request<Body>> for Forward {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        use http_body_util::BodyExt;
        use tower::ServiceExt;
        let this = self.clone();
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            // Unary calls are small: held whole, a call can be sent again.
            let body = match body.collect().await {
                Ok(b) => b.to_bytes(),
                Err(e) => return Ok(tonic::Status::cancelled(format!("reading the call: {e}")).into_http()),
            };
            let mut attempts = 0;
            loop {
                let (channel, mine) = match this.target().await {
                    Ok(c) => c,
                    Err(status) => return Ok(status.into_http()),
                };
                let mut request = http::Request::new(Body::new(http_body_util::Full::new(body.clone())));
                *request.method_mut() = parts.method.clone();
                *request.uri_mut() = parts.uri.clone();
                *request.version_mut() = parts.version;
                *request.headers_mut() = parts.headers.clone();
                match channel.oneshot(request).await {
                    Ok(answer) => return Ok(whole(answer).await),
                    // Just elected, this server hands its socket from the
                    // follower's listener to the term's: a connection caught
                    // in between is closed, and the call (safe to repeat,
                    // as every Berth call is) goes again.
                    Err(_) if mine && attempts < HANDOVER_ATTEMPTS => {
                        attempts += 1;
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    Err(e) => {
                        return Ok(tonic::Status::unavailable(format!(
                            "the leader did not answer: {}",
                            crate::csi::error_chain(&e)
                        ))
                        .into_http());
                    }
                }
            }
        })
    }
}

/// The leader's answer, read to its end before any of it is passed on: a
/// leader gone mid-answer is then an UNAVAILABLE the caller repeats, not a
/// broken stream it cannot tell from a failure. (Every call is unary, and
/// every answer small enough to hold.)
async fn whole(answer: http::Response<Body>) -> http::Response<Body> {
    use http_body_util::BodyExt;
    let (parts, body) = answer.into_parts();
    match body.collect().await {
        Ok(collected) => {
            let trailers = collected.trailers().cloned();
            let data = collected.to_bytes();
            let mut frames = Vec::new();
            if !data.is_empty() {
                frames.push(Ok::<_, tonic::Status>(http_body::Frame::data(data)));
            }
            frames.extend(trailers.map(|t| Ok(http_body::Frame::trailers(t))));
            let body = http_body_util::StreamBody::new(tokio_stream::iter(frames));
            http::Response::from_parts(parts, Body::new(body))
        }
        Err(e) => {
            tonic::Status::unavailable(format!("the leader went away while answering: {e}")).into_http()
        }
    }
}

/// The leader's check on its TLS endpoint: only calls from a peer whose
/// certificate (checked against the cluster CA in the handshake) is a
/// server's pass; an agent's certificate, or none, is refused.
pub fn only_servers() -> impl FnMut(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> + Clone {
    |request| {
        let server = request
            .peer_certs()
            .and_then(|certs| {
                certs
                    .first()
                    .map(|c| crate::cluster::pki::is_server_certificate(c))
            })
            .unwrap_or(false);
        if server {
            Ok(request)
        } else {
            Err(tonic::Status::permission_denied(
                "the Berth API on the cluster endpoint is for the cluster's servers (their own certificates)",
            ))
        }
    }
}
