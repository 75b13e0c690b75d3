//! The API socket's HTTP/2, spoken with `h2` directly, as the CSI client
//! speaks it: one task per connection drives the socket, one per call
//! answers it, and the generated services answer as they would under
//! tonic's server (`berth.v1.Berth` called at once, health and reflection
//! behind tonic's router). hyper's server, axum's router and tower's layers
//! in front of every call were about a tenth of Berth's CPU per volume;
//! without them Berth spends 3–7 % less (README, "The API on `h2` directly").

use std::future::{Future, poll_fn};
use std::time::Duration;

use bytes::Bytes;
use http_body::Body;
use http_body_util::BodyExt;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tower::ServiceExt;

use crate::api::access::{Entrance, Guard, PeerSubject};
use crate::csi::StreamBody;

/// Connections open at once: the socket is its owner's alone, so this bounds
/// a client gone wrong (descriptors), not strangers.
pub(super) const MAX_CONNECTIONS: usize = 1024;
/// What one connection may ask of the API: streams open at once, a request's
/// headers, and how much of a request it may send ahead (the windows).
const MAX_STREAMS: u32 = 256;
const MAX_HEADER_LIST: u32 = 16 * 1024;
const STREAM_WINDOW: u32 = 1 << 20;
const CONNECTION_WINDOW: u32 = 1 << 20;
/// How much of an answer waits in memory for the peer's window.
const SEND_BUFFER: usize = 400 * 1024;
/// A connection that has not finished HTTP/2's preface by then is closed.
const HANDSHAKE: Duration = Duration::from_secs(10);
/// After `shutdown`, how long calls under way have to finish.
const DRAIN: Duration = Duration::from_secs(10);

/// Serves the API on `listener` until `shutdown`, then lets the calls under
/// way finish (for at most `DRAIN`) and closes every connection. A
/// connection past `max_connections` is closed at once.
pub(super) async fn serve<A: Answers, L: Accept>(
    mut listener: L,
    service: A,
    max_connections: usize,
    shutdown: impl Future<Output = ()>,
) {
    let (closing, closed) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut refused = 0u64;
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.next_connection() => match accepted {
                Ok(io) if connections.len() >= max_connections => {
                    drop(io);
                    refused += 1;
                    if refused.is_power_of_two() {
                        tracing::warn!(open = connections.len(), refused, "API connections past the limit are closed");
                    }
                }
                Ok(io) => {
                    let subject = L::subject(&io);
                    connections.spawn(connection(io, subject, service.clone(), closed.clone()));
                }
                Err(error) => {
                    // Out of descriptors, most likely: wait, not spin.
                    tracing::warn!(%error, "accepting an API connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    let _ = closing.send(true);
    let drained = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(DRAIN, drained).await.is_err() {
        tracing::warn!("API calls still under way after {DRAIN:?} of shutdown are dropped");
    }
}

/// One connection: this task drives its socket and accepts its calls, each
/// answered in a task of its own (a call may wait on the store).
async fn connection<A: Answers, Io>(
    io: Io,
    subject: Option<PeerSubject>,
    service: A,
    mut closed: watch::Receiver<bool>,
) where
    Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let handshake = h2::server::Builder::new()
        .max_concurrent_streams(MAX_STREAMS)
        .max_header_list_size(MAX_HEADER_LIST)
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_send_buffer_size(SEND_BUFFER)
        .handshake::<_, Bytes>(io);
    let mut conn = match tokio::time::timeout(HANDSHAKE, handshake).await {
        Ok(Ok(conn)) => conn,
        Ok(Err(error)) => {
            tracing::debug!(%error, "an API connection's handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!("an API connection did not finish its handshake");
            return;
        }
    };
    let mut closing = *closed.borrow();
    if closing {
        conn.graceful_shutdown();
    }
    loop {
        tokio::select! {
            next = conn.accept() => match next {
                Some(Ok((request, respond))) => {
                    let service = service.clone();
                    let subject = subject.clone();
                    tokio::spawn(async move {
                        let (parts, recv) = request.into_parts();
                        let mut request = http::Request::from_parts(parts, StreamBody::new(recv));
                        if let Some(subject) = subject {
                            request.extensions_mut().insert(subject);
                        }
                        answer(service.answer(request).await, respond).await;
                    });
                }
                Some(Err(error)) => {
                    tracing::debug!(%error, "an API connection failed");
                    return;
                }
                // Closed by the peer, or drained after a graceful shutdown.
                None => return,
            },
            changed = closed.changed(), if !closing => {
                // A sender gone is a shutdown too.
                if changed.is_err() || *closed.borrow() {
                    closing = true;
                    conn.graceful_shutdown();
                }
            }
        }
    }
}

/// Where connections come from: the API socket, or the TLS API's
/// handshakes done.
pub(super) trait Accept: Send + 'static {
    type Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static;
    fn next_connection(&mut self) -> impl Future<Output = std::io::Result<Self::Io>> + Send;
    /// Who a connection's client certificate says it is, if it sent one.
    fn subject(_: &Self::Io) -> Option<PeerSubject> {
        None
    }
}

impl Accept for UnixListener {
    type Io = UnixStream;
    async fn next_connection(&mut self) -> std::io::Result<UnixStream> {
        self.accept().await.map(|(io, _)| io)
    }
}

type TlsConnection = tokio_rustls::server::TlsStream<crate::metrics::listener::Held>;

impl Accept for tokio_stream::wrappers::ReceiverStream<std::io::Result<TlsConnection>> {
    type Io = TlsConnection;
    fn subject(io: &TlsConnection) -> Option<PeerSubject> {
        PeerSubject::of(io.get_ref().1.peer_certificates()?)
    }
    async fn next_connection(&mut self) -> std::io::Result<TlsConnection> {
        use tokio_stream::StreamExt;
        match self.next().await {
            Some(connection) => connection,
            // The acceptor is gone: nothing more comes (the term is ending).
            None => std::future::pending().await,
        }
    }
}

/// What answers the calls on the socket.
pub(super) trait Answers: Clone + Send + 'static {
    fn answer(
        self,
        request: http::Request<StreamBody>,
    ) -> impl Future<Output = http::Response<tonic::body::Body>> + Send;
}

impl Answers for tonic::service::Routes {
    async fn answer(self, request: http::Request<StreamBody>) -> http::Response<tonic::body::Body> {
        let Ok(response) = self.oneshot(request).await;
        response
    }
}

/// The services on the API socket: the API itself without a router in
/// front, the rest (health, reflection) behind tonic's.
#[derive(Clone)]
pub(super) struct Dispatch {
    pub api: Guard,
    pub others: tonic::service::Routes,
    /// How the calls that come in here are marked for the guard.
    pub entrance: Entrance,
}

impl Answers for Dispatch {
    async fn answer(self, mut request: http::Request<StreamBody>) -> http::Response<tonic::body::Body> {
        if !request.uri().path().starts_with(API_PATH) {
            return self.others.answer(request).await;
        }
        self.entrance.mark(&mut request);
        let Ok(response) = self.api.oneshot(request).await;
        response
    }
}

/// The API's calls: `/berth.v1.Berth/CreateVolume`, ...
const API_PATH: &str = "/berth.v1.Berth/";

/// Sends a service's answer: headers, data as the peer's window allows, then
/// trailers (where gRPC puts the status). A peer that resets the stream
/// drops the answer (a health watch's stream with it).
async fn answer(response: http::Response<tonic::body::Body>, mut respond: h2::server::SendResponse<Bytes>) {
    let (parts, mut body) = response.into_parts();
    let end = body.is_end_stream();
    let Ok(mut send) = respond.send_response(http::Response::from_parts(parts, ()), end) else {
        return;
    };
    if end {
        return;
    }
    loop {
        let frame = tokio::select! {
            frame = body.frame() => frame,
            _ = poll_fn(|cx| send.poll_reset(cx)) => return,
        };
        let frame = match frame {
            None => {
                let _ = send.send_data(Bytes::new(), true);
                return;
            }
            Some(Ok(frame)) => frame,
            Some(Err(error)) => {
                tracing::debug!(%error, "an API answer's body failed");
                send.send_reset(h2::Reason::INTERNAL_ERROR);
                return;
            }
        };
        match frame.into_data() {
            Ok(data) => {
                if !send_within_window(&mut send, data).await {
                    return;
                }
            }
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    let _ = send.send_trailers(trailers);
                }
                return;
            }
        }
    }
}

/// Sends `data` in pieces the peer's window takes; false once the stream
/// is gone.
async fn send_within_window(send: &mut h2::SendStream<Bytes>, mut data: Bytes) -> bool {
    while !data.is_empty() {
        send.reserve_capacity(data.len());
        match poll_fn(|cx| send.poll_capacity(cx)).await {
            Some(Ok(0)) => continue,
            Some(Ok(n)) => {
                let chunk = data.split_to(n.min(data.len()));
                if send.send_data(chunk, false).is_err() {
                    return false;
                }
            }
            _ => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use http_body_util::Full;
    use tokio::io::AsyncReadExt;
    use tokio::sync::{Notify, oneshot};
    use tonic_health::ServingStatus;
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus as Answered;
    use tonic_health::pb::health_client::HealthClient;

    use super::*;

    fn start<A: Answers>(service: A, socket: &Path) -> oneshot::Sender<()> {
        start_with(service, socket, MAX_CONNECTIONS)
    }

    fn start_with<A: Answers>(service: A, socket: &Path, max_connections: usize) -> oneshot::Sender<()> {
        let listener = UnixListener::bind(socket).unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(serve(listener, service, max_connections, async {
            let _ = stopped.await;
        }));
        stop
    }

    fn request() -> http::Request<tonic::body::Body> {
        http::Request::post("http://unix.socket/test.Test/Call")
            .header("content-type", "application/grpc")
            .body(tonic::body::Body::empty())
            .unwrap()
    }

    async fn call(socket: &Path) -> http::Response<tonic::body::Body> {
        crate::csi::unix_channel(socket).oneshot(request()).await.unwrap()
    }

    /// Answers `size` bytes of data: at once, or once released (saying
    /// when a call has arrived).
    #[derive(Clone)]
    struct Test {
        held: Option<(Arc<Notify>, Arc<Notify>)>,
        size: usize,
    }

    impl Answers for Test {
        async fn answer(self, _: http::Request<StreamBody>) -> http::Response<tonic::body::Body> {
            if let Some((arrived, release)) = self.held {
                arrived.notify_one();
                release.notified().await;
            }
            let data = Full::new(Bytes::from(vec![7u8; self.size]));
            http::Response::new(tonic::body::Body::new(data.map_err(|never| match never {})))
        }
    }

    #[tokio::test]
    async fn a_call_and_a_stream_of_the_health_service_are_answered() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("api.sock");
        let (reporter, health) = tonic_health::server::health_reporter();
        reporter.set_service_status("", ServingStatus::Serving).await;
        let _stop = start(tonic::service::Routes::new(health), &socket);
        let mut client = HealthClient::new(crate::csi::unix_channel(&socket));
        let check = client.check(HealthCheckRequest::default()).await.unwrap();
        assert_eq!(check.into_inner().status, Answered::Serving as i32);
        let mut watch = client
            .watch(HealthCheckRequest::default())
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            watch.message().await.unwrap().unwrap().status,
            Answered::Serving as i32
        );
        reporter.set_service_status("", ServingStatus::NotServing).await;
        assert_eq!(
            watch.message().await.unwrap().unwrap().status,
            Answered::NotServing as i32
        );
    }

    #[tokio::test]
    async fn an_answer_wider_than_the_peers_windows_arrives_whole() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("api.sock");
        let size = 3 << 20;
        let _stop = start(Test { held: None, size }, &socket);
        // Several at once on one connection share its window too.
        let channel = crate::csi::unix_channel(&socket);
        let mut answers = JoinSet::new();
        for _ in 0..4 {
            let channel = channel.clone();
            answers.spawn(async move {
                let answer = channel.oneshot(request()).await.unwrap();
                answer.into_body().collect().await.unwrap().to_bytes()
            });
        }
        while let Some(body) = answers.join_next().await {
            let body = body.unwrap();
            assert_eq!(body.len(), size);
            assert!(body.iter().all(|b| *b == 7));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_peer_that_never_speaks_is_closed_and_holds_up_nobody() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("api.sock");
        let _stop = start(Test { held: None, size: 5 }, &socket);
        let mut stranger = UnixStream::connect(&socket).await.unwrap();
        let answer = call(&socket).await;
        assert_eq!(answer.into_body().collect().await.unwrap().to_bytes().len(), 5);
        let started = tokio::time::Instant::now();
        let mut buf = [0u8; 64];
        // The server's preface (its settings) first, then the end.
        loop {
            match stranger.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => continue,
            }
        }
        assert!(
            started.elapsed() >= HANDSHAKE,
            "closed after {:?}",
            started.elapsed()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_past_the_limit_is_closed_at_once_and_its_slot_comes_back() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("api.sock");
        let _stop = start_with(Test { held: None, size: 5 }, &socket, 2);
        let mut idle = Vec::new();
        for _ in 0..2 {
            let mut stranger = UnixStream::connect(&socket).await.unwrap();
            // Accepted: the server's settings arrive.
            assert!(stranger.read(&mut [0u8; 64]).await.unwrap() > 0);
            idle.push(stranger);
        }
        let started = tokio::time::Instant::now();
        let mut third = UnixStream::connect(&socket).await.unwrap();
        assert_eq!(
            third.read(&mut [0u8; 64]).await.unwrap_or(0),
            0,
            "the third was served"
        );
        assert!(
            started.elapsed() < HANDSHAKE,
            "the third waited {:?}",
            started.elapsed()
        );
        // Their slots come back once the server has seen them go.
        drop(idle);
        let mut refused = 0;
        let answer = loop {
            match crate::csi::unix_channel(&socket).oneshot(request()).await {
                Ok(answer) => break answer,
                Err(_) if refused < 100 => refused += 1,
                Err(error) => panic!("still refused: {error}"),
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert_eq!(answer.into_body().collect().await.unwrap().to_bytes().len(), 5);
    }

    #[tokio::test]
    async fn shutdown_lets_a_call_under_way_finish_then_stops_serving() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("api.sock");
        let (arrived, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let listener = UnixListener::bind(&socket).unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let service = Test {
            held: Some((arrived.clone(), release.clone())),
            size: 5,
        };
        let served = tokio::spawn(serve(listener, service, MAX_CONNECTIONS, async {
            let _ = stopped.await;
        }));
        let under_way = tokio::spawn({
            let socket = socket.clone();
            async move { call(&socket).await }
        });
        arrived.notified().await;
        stop.send(()).unwrap();
        // Shut down: no new connection is taken ...
        while UnixStream::connect(&socket).await.is_ok() {
            tokio::task::yield_now().await;
        }
        // ... and serving waits for the call under way.
        assert!(!served.is_finished(), "serving ended with a call under way");
        release.notify_one();
        let answer = under_way.await.unwrap();
        assert_eq!(answer.into_body().collect().await.unwrap().to_bytes().len(), 5);
        tokio::time::timeout(Duration::from_secs(5), served)
            .await
            .unwrap()
            .unwrap();
    }
}
