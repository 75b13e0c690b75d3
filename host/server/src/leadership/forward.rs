//! The API of a server in an etcd cluster, one server for the process's
//! whole life: while this server leads, each call goes to its term's API;
//! while it follows, the call is passed on, as it came, to the leader's TLS
//! cluster endpoint, this server presenting its own server certificate
//! (mutual TLS, both from the cluster CA), and the leader's answer goes back
//! unchanged. Forwarding raw gRPC keeps followers ignorant of the API's
//! methods: nothing to keep in step when one is added. Connections are
//! never closed when the role changes: a caller sees a failover as a slow
//! call, not a broken one.
//!
//! A call cut off by a failover is sent again to whoever leads next. Every
//! Berth call leaves the same state when repeated, but not every one gives
//! the same answer: a repeated DeleteVolume whose first try deleted the
//! volume finds none. So once a try may have been carried out, a repeat
//! refused as a carried-out try would make it refused (NOT_FOUND,
//! ALREADY_EXISTS, FAILED_PRECONDITION, ABORTED) is answered UNAVAILABLE,
//! saying so: the caller cannot be told for certain, and must not be told
//! the call did nothing.

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
            // Whether an earlier try may have been carried out.
            let mut cut_off = false;
            loop {
                match this.target().await {
                    Err(status) => return Ok(status.into_http()),
                    Ok(Target::Me(term)) => match term.answer(again()).await {
                        Some(answer) => return Ok(repeated(answer, cut_off)),
                        // Deposed mid-call: repeating any Berth call leaves
                        // the same state, and the next leader takes this one.
                        None if ended + 1 < TERM_ENDED_ATTEMPTS => {
                            ended += 1;
                            cut_off = true;
                        }
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
                            Ok(answer) => return Ok(repeated(whole(answer).await, cut_off)),
                            Err(e) => e,
                        };
                        // Unless no connection was made, it may have
                        // reached the leader before the connection broke.
                        cut_off |= !never_connected(&e);
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

/// Whether a forwarding error is one of connecting: the call was not sent.
fn never_connected(e: &(dyn std::error::Error + 'static)) -> bool {
    use std::io::ErrorKind;
    let mut source = Some(e);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                ErrorKind::ConnectionRefused | ErrorKind::AddrNotAvailable | ErrorKind::HostUnreachable
            )
        {
            return true;
        }
        source = e.source();
    }
    false
}

/// The answer to a call, `cut_off` when an earlier try of it may have been
/// carried out: a refusal that try could have caused is then no answer.
fn repeated(answer: http::Response<Body>, cut_off: bool) -> http::Response<Body> {
    use tonic::Code;
    if !cut_off {
        return answer;
    }
    let refusal = tonic::Status::from_header_map(answer.headers()).or_else(|| {
        let trailers = answer.extensions().get::<Trailers>()?;
        tonic::Status::from_header_map(&trailers.0)
    });
    match refusal {
        Some(s)
            if matches!(
                s.code(),
                Code::NotFound | Code::AlreadyExists | Code::FailedPrecondition | Code::Aborted
            ) =>
        {
            tonic::Status::unavailable(format!(
                "an earlier try of this call was cut off by a change of leader and may have been \
                 carried out; its repeat was refused ({:?}: {}): read what it changed before trying again",
                s.code(),
                s.message()
            ))
            .into_http()
        }
        _ => answer,
    }
}

/// The trailers of a whole answer, kept beside it for [`repeated`].
#[derive(Clone)]
struct Trailers(http::HeaderMap);

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
            let mut parts = parts;
            if let Some(t) = &trailers {
                parts.extensions.insert(Trailers(t.clone()));
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;
    use crate::store::Fence;

    /// A leader's API holding one volume, whose first DeleteVolume deletes
    /// it and is then cut off (the term's task ends without an answer).
    fn leader_deleting(volumes: Arc<AtomicU32>, tries: Arc<AtomicU32>, cut_first: bool) -> Forward {
        let service = tower::service_fn(move |_: http::Request<Body>| {
            let (volumes, tries) = (volumes.clone(), tries.clone());
            async move {
                let first = tries.fetch_add(1, Ordering::SeqCst) == 0;
                if volumes.swap(0, Ordering::SeqCst) == 0 {
                    return Ok(tonic::Status::not_found("no volume named v1").into_http());
                }
                if first && cut_first {
                    panic!("the term ended mid-call");
                }
                Ok::<_, Infallible>(http::Response::new(Body::default()))
            }
        });
        let term = TermApi {
            server: tower::util::BoxCloneSyncService::new(service),
            runtime: tokio::runtime::Handle::current(),
        };
        let fence = Fence {
            key: b"leader".to_vec(),
            create_revision: 1,
        };
        let (_, role) = watch::channel(Role::Leader { fence });
        let (_, term) = watch::channel(Some(term));
        let me = ServerInfo {
            name: "s0".into(),
            api: "/run/berth/api.sock".into(),
            forward: None,
            policy_set: None,
            policy_error: None,
        };
        Forward::new(role, term, me, None, Duration::from_secs(1))
    }

    async fn delete(forward: &mut Forward) -> Option<tonic::Status> {
        use tower::Service;
        let request = http::Request::post("/berth.v1.Berth/DeleteVolume")
            .body(Body::default())
            .unwrap();
        let answer = forward.call(request).await.unwrap();
        tonic::Status::from_header_map(answer.headers()).filter(|s| s.code() != tonic::Code::Ok)
    }

    #[tokio::test]
    async fn a_repeat_refused_after_a_try_that_may_have_been_carried_out_is_no_answer() {
        let (volumes, tries) = (Arc::new(AtomicU32::new(1)), Arc::new(AtomicU32::new(0)));
        let mut forward = leader_deleting(volumes.clone(), tries.clone(), true);
        let refused = delete(&mut forward).await.expect("not answered OK");
        assert_eq!(tries.load(Ordering::SeqCst), 2, "the cut-off call is repeated");
        assert_eq!(volumes.load(Ordering::SeqCst), 0, "the first try deleted it");
        assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
        assert!(
            refused.message().contains("may have been carried out"),
            "{refused:?}"
        );
        assert!(refused.message().contains("no volume named v1"), "{refused:?}");
    }

    /// A transport's error, its cause below it.
    #[derive(Debug)]
    struct Transport(std::io::Error);

    impl std::fmt::Display for Transport {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("transport error")
        }
    }

    impl std::error::Error for Transport {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn only_a_connection_never_made_sent_nothing() {
        use std::io::ErrorKind;
        let refused = Transport(ErrorKind::ConnectionRefused.into());
        assert!(never_connected(&refused));
        let reset = Transport(ErrorKind::ConnectionReset.into());
        assert!(
            !never_connected(&reset),
            "a reset may come after the call was sent"
        );
    }

    #[tokio::test]
    async fn a_refusal_with_no_try_before_it_is_passed_on_unchanged() {
        let (volumes, tries) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
        let mut forward = leader_deleting(volumes, tries, true);
        let refused = delete(&mut forward).await.expect("not answered OK");
        assert_eq!(refused.code(), tonic::Code::NotFound, "{refused:?}");

        let (volumes, tries) = (Arc::new(AtomicU32::new(1)), Arc::new(AtomicU32::new(0)));
        let mut forward = leader_deleting(volumes.clone(), tries, false);
        assert!(delete(&mut forward).await.is_none(), "answered OK");
        assert_eq!(volumes.load(Ordering::SeqCst), 0);
    }
}
