//! The API of a server in an etcd cluster, one server for the process's
//! whole life: while this server leads, each call goes to its term's API;
//! while it follows, the call is passed on, as it came, to the leader's TLS
//! cluster endpoint, this server presenting its own server certificate
//! (mutual TLS, both from the cluster CA), and the leader's answer goes back
//! unchanged. Forwarding raw gRPC keeps followers ignorant of the API's
//! methods: nothing to keep in step when one is added. Connections are
//! never closed when the role changes: a caller sees a failover as a slow
//! call, not a broken one.

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

/// Tries of one call whose term ended under it: the next goes to whoever
/// leads then.
const TERM_ENDED_ATTEMPTS: u32 = 3;

/// The longest pause between tries of a leader that did not answer.
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// What a follower presents to the leader's TLS endpoint.
pub struct ForwardTls {
    /// The cluster CA's certificate (PEM), the only root trusted.
    pub ca: String,
    /// This server's certificate chain and key (PEM), from the cluster CA.
    pub chain: String,
    pub key: String,
}

/// A term's API as the process's server hands calls to it: the term's
/// gRPC service, whatever serves it.
#[derive(Clone)]
pub struct TermApi {
    pub server: tower::util::BoxCloneSyncService<http::Request<Body>, http::Response<Body>, Infallible>,
    /// The term's runtime: a call runs there, so it stops when the term does.
    pub runtime: tokio::runtime::Handle,
}

impl TermApi {
    /// The term's whole answer, or None when the term ended before giving it.
    async fn answer(&self, request: http::Request<Body>) -> Option<http::Response<Body>> {
        use tower::ServiceExt;
        let server = self.server.clone();
        let call = self.runtime.spawn(async move {
            match server.oneshot(request).await {
                Ok(answer) => whole(answer).await,
                Err(never) => match never {},
            }
        });
        call.await.ok()
    }
}

#[derive(Clone)]
pub struct Forward {
    role: watch::Receiver<Role>,
    /// This server's term's API, while it has one.
    term: watch::Receiver<Option<TermApi>>,
    me: ServerInfo,
    /// With a TLS cluster endpoint: the CA, and this server's own
    /// certificate chain and key, presented to the leader.
    tls: Option<Arc<ForwardTls>>,
    /// How long a call waits for a leader while none is known, or for this
    /// server's term to start.
    wait: Duration,
    /// The channel last forwarded on, by where it goes.
    channel: Arc<Mutex<Option<(String, Channel)>>>,
}

/// Where a call goes.
enum Target {
    /// Another server leads.
    Leader(ServerInfo),
    /// This server leads: its term answers.
    Me(TermApi),
}

impl Forward {
    pub fn new(
        role: watch::Receiver<Role>,
        term: watch::Receiver<Option<TermApi>>,
        me: ServerInfo,
        tls: Option<ForwardTls>,
        wait: Duration,
    ) -> Forward {
        Forward {
            role,
            term,
            me,
            tls: tls.map(Arc::new),
            wait,
            channel: Arc::default(),
        }
    }

    /// Who answers, waiting up to `wait` while an election is under way or
    /// this server's term starts: a call held a moment beats one refused.
    async fn target(&self) -> Result<Target, tonic::Status> {
        let (mut role, mut term) = (self.role.clone(), self.term.clone());
        let deadline = tokio::time::Instant::now() + self.wait;
        loop {
            let leading = match &*role.borrow_and_update() {
                Role::Follower { leader: Some(l) } if l.name != self.me.name => {
                    return Ok(Target::Leader(l.clone()));
                }
                Role::Leader { .. } => true,
                Role::Follower { .. } => false,
            };
            if leading && let Some(api) = &*term.borrow_and_update() {
                return Ok(Target::Me(api.clone()));
            }
            let changed = async {
                tokio::select! {
                    r = role.changed() => r.is_ok(),
                    r = term.changed() => r.is_ok(),
                }
            };
            match tokio::time::timeout_at(deadline, changed).await {
                Ok(true) => {}
                _ if leading => {
                    return Err(tonic::Status::unavailable(format!(
                        "this server was elected but its term has not started within {}; retry shortly",
                        humantime::format_duration(self.wait)
                    )));
                }
                _ => {
                    return Err(tonic::Status::unavailable(format!(
                        "no leader was elected within {}: the servers could not reach etcd, or none could start; retry shortly",
                        humantime::format_duration(self.wait)
                    )));
                }
            }
        }
    }

    /// The channel to the leader's TLS endpoint.
    fn channel(&self, leader: &ServerInfo) -> Result<Channel, tonic::Status> {
        let at = leader.forward.clone().ok_or_else(|| not_forwarded(leader))?;
        let mut cached = self.channel.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((was, channel)) = &*cached
            && *was == at
        {
            return Ok(channel.clone());
        }
        let tls = self.tls.as_ref().ok_or_else(|| not_forwarded(leader))?;
        let channel =
            crate::agent::tls::server_channel(&at, &tls.ca, (&tls.chain, &tls.key)).map_err(|e| {
                tonic::Status::unavailable(format!("forwarding to the leader {}: {e}", leader.name))
            })?;
        *cached = Some((at, channel.clone()));
        Ok(channel)
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
            let again = || {
                let mut request = http::Request::new(Body::new(http_body_util::Full::new(body.clone())));
                *request.method_mut() = parts.method.clone();
                *request.uri_mut() = parts.uri.clone();
                *request.version_mut() = parts.version;
                *request.headers_mut() = parts.headers.clone();
                request
            };
            let mut ended = 0;
            let (mut unanswered, mut pause) = (None, Duration::from_millis(50));
            loop {
                match this.target().await {
                    Err(status) => return Ok(status.into_http()),
                    Ok(Target::Me(term)) => match term.answer(again()).await {
                        Some(answer) => return Ok(answer),
                        // Deposed mid-call: every Berth call is safe to
                        // repeat, and the next leader takes this one.
                        None if ended + 1 < TERM_ENDED_ATTEMPTS => ended += 1,
                        None => {
                            return Ok(tonic::Status::unavailable(
                                "this server's term ended during the call; retry shortly",
                            )
                            .into_http());
                        }
                    },
                    Ok(Target::Leader(leader)) => {
                        let channel = match this.channel(&leader) {
                            Ok(c) => c,
                            Err(status) => return Ok(status.into_http()),
                        };
                        let e = match channel.oneshot(again()).await {
                            Ok(answer) => return Ok(whole(answer).await),
                            Err(e) => e,
                        };
                        // The leader gone: once its lease runs out another
                        // leads, and the call (safe to repeat) goes there.
                        let now = tokio::time::Instant::now();
                        if now >= *unanswered.get_or_insert(now + this.wait) {
                            return Ok(tonic::Status::unavailable(format!(
                                "the leader did not answer: {}",
                                crate::csi::error_chain(&e)
                            ))
                            .into_http());
                        }
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(MAX_PAUSE);
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
