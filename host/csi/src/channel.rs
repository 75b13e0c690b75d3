//! The HTTP/2 connection to one plugin socket, spoken with `h2` directly.
//!
//! tonic's own channel puts a buffer task in front of hyper, and hyper spawns
//! a task per request to stream its body: three task hops for a unary call
//! whose request is one small message known in full up front. Here the
//! caller's task sends the headers and the whole message itself, and one
//! task per connection drives the socket.
//!
//! Berth's CSI calls ([`PluginChannel::call`]) are framed and read here too
//! ([`crate::grpc_frame`]): one message each way, with tonic's status
//! parsing and its 4 MiB limit on an answer, without the streaming codec
//! built for many messages. Generated tonic clients (the benchmark's API
//! client, tests') still run on the channel as a tower service.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use h2::client::SendRequest;
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use tokio::net::UnixStream;

use crate::error::{CallError, ChannelError};
use crate::grpc_frame;

/// Headers a plugin may answer with, in all: gRPC's are a few hundred bytes.
const MAX_HEADER_LIST: u32 = 64 << 10;
/// Flow-control windows wide enough that a page of ListVolumes (up to
/// tonic's 4 MiB message limit) is not held up waiting for window updates.
const STREAM_WINDOW: u32 = 2 << 20;
const CONNECTION_WINDOW: u32 = 8 << 20;

/// A cheap-to-clone channel to one unix socket. It dials on first use, and
/// again on the first call after the connection is lost.
#[derive(Clone)]
pub struct PluginChannel {
    shared: Arc<Shared>,
}

struct Shared {
    path: PathBuf,
    /// The live connection's sender and its number; `None` until dialled
    /// and after the connection ends.
    live: Mutex<Option<(u64, SendRequest<Bytes>)>>,
    /// One dial at a time: callers that find no connection wait for it.
    dialling: tokio::sync::Mutex<()>,
    dials: AtomicU64,
}

impl std::fmt::Debug for PluginChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginChannel")
            .field("path", &self.shared.path)
            .finish()
    }
}

impl PluginChannel {
    pub fn new(path: &Path) -> PluginChannel {
        PluginChannel {
            shared: Arc::new(Shared {
                path: path.to_path_buf(),
                live: Mutex::new(None),
                dialling: tokio::sync::Mutex::new(()),
                dials: AtomicU64::new(0),
            }),
        }
    }

    fn live(&self) -> Option<(u64, SendRequest<Bytes>)> {
        self.shared.live.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Forgets connection `number` if it is still the live one.
    fn forget(shared: &Shared, number: u64) {
        let mut live = shared.live.lock().unwrap_or_else(|p| p.into_inner());
        if live.as_ref().is_some_and(|(n, _)| *n == number) {
            *live = None;
        }
    }

    async fn sender(&self) -> Result<(u64, SendRequest<Bytes>), ChannelError> {
        if let Some(live) = self.live() {
            return Ok(live);
        }
        let _dialling = self.shared.dialling.lock().await;
        if let Some(live) = self.live() {
            return Ok(live);
        }
        let path = || self.shared.path.display().to_string();
        let io = UnixStream::connect(&self.shared.path)
            .await
            .map_err(|source| ChannelError::Dial { path: path(), source })?;
        let (send, connection) = h2::client::Builder::new()
            .max_header_list_size(MAX_HEADER_LIST)
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .handshake::<_, Bytes>(io)
            .await
            .map_err(|source| ChannelError::Handshake { path: path(), source })?;
        let number = self.shared.dials.fetch_add(1, Ordering::Relaxed);
        let shared = Arc::downgrade(&self.shared);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "plugin connection ended");
            }
            if let Some(shared) = shared.upgrade() {
                PluginChannel::forget(&shared, number);
            }
        });
        *self.shared.live.lock().unwrap_or_else(|p| p.into_inner()) = Some((number, send.clone()));
        Ok((number, send))
    }

    /// Sends a request whose body is `message` in full, and returns the
    /// answer's head and the stream its body comes on.
    async fn send(
        &self,
        parts: http::request::Parts,
        message: Bytes,
    ) -> Result<http::Response<h2::RecvStream>, ChannelError> {
        let (number, send) = self.sender().await?;
        let sent = async {
            let mut send = send.ready().await?;
            let (response, mut stream) =
                send.send_request(http::Request::from_parts(parts, ()), message.is_empty())?;
            if !message.is_empty()
                && let Err(e) = stream.send_data(message, true)
            {
                // A plugin may answer before it reads the request (a service
                // it does not serve is answered UNIMPLEMENTED at once) and
                // close the stream: its answer, when there is one, wins. A
                // stream still open is reset, so the wait cannot hang.
                stream.send_reset(h2::Reason::CANCEL);
                return response.await.map_err(|_| e);
            }
            response.await
        };
        sent.await.map_err(|e| {
            // A connection that failed is not used again; a stream the
            // plugin reset leaves the connection as it is.
            if !e.is_reset() {
                PluginChannel::forget(&self.shared, number);
            }
            e.into()
        })
    }

    async fn unary(
        self,
        request: http::Request<tonic::body::Body>,
    ) -> Result<http::Response<tonic::body::Body>, ChannelError> {
        let (mut parts, body) = request.into_parts();
        // The request is one message, already encoded when first polled.
        let message = body.collect().await.map_err(ChannelError::Body)?.to_bytes();
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        parts.uri = http::Uri::builder()
            .scheme("http")
            .authority("localhost")
            .path_and_query(path)
            .build()?;
        parts.version = http::Version::HTTP_2;
        let response = self.send(parts, message).await?;
        Ok(response.map(|recv| tonic::body::Body::new(StreamBody::new(recv))))
    }

    /// One unary gRPC call of `method` (its path, `/csi.v1.Node/NodeStageVolume`),
    /// framed and read here rather than through tonic's streaming codec: a
    /// CSI call is one message each way, known in full before it is sent.
    pub async fn call<Req, Resp>(
        &self,
        method: &'static str,
        timeout: &http::HeaderValue,
        request: &Req,
    ) -> Result<Resp, CallError>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        let message = grpc_frame::encode(request);
        let mut uri = http::uri::Parts::default();
        uri.scheme = Some(http::uri::Scheme::HTTP);
        uri.authority = Some(http::uri::Authority::from_static("localhost"));
        uri.path_and_query = Some(http::uri::PathAndQuery::from_static(method));
        let mut head = http::Request::new(());
        *head.method_mut() = http::Method::POST;
        *head.uri_mut() = http::Uri::from_parts(uri).map_err(|e| ChannelError::Uri(e.into()))?;
        *head.version_mut() = http::Version::HTTP_2;
        let headers = head.headers_mut();
        headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/grpc"),
        );
        headers.insert(http::header::TE, http::HeaderValue::from_static("trailers"));
        headers.insert(
            http::header::USER_AGENT,
            http::HeaderValue::from_static(USER_AGENT),
        );
        headers.insert("grpc-timeout", timeout.clone());
        let (parts, ()) = head.into_parts();
        let (answer, mut recv) = self.send(parts, message).await?.into_parts();
        // An error answered at once comes as headers only (gRPC's trailers-only form).
        if let Some(status) = tonic::Status::from_header_map(&answer.headers) {
            return match status.code() {
                tonic::Code::Ok => Err(CallError::Invalid("answered OK without a message".into())),
                _ => Err(CallError::Status(status)),
            };
        }
        let body = grpc_frame::read_body(&mut recv).await?;
        let trailers = recv.trailers().await.map_err(ChannelError::Http2)?;
        match trailers.as_ref().and_then(tonic::Status::from_header_map) {
            Some(status) if status.code() == tonic::Code::Ok => {}
            Some(status) => return Err(CallError::Status(status)),
            None => return Err(CallError::Status(grpc_frame::without_status(answer.status))),
        }
        grpc_frame::decode(body)
    }
}

/// What `User-Agent` a plugin sees Berth's calls come from.
const USER_AGENT: &str = concat!("berth/", env!("CARGO_PKG_VERSION"));

impl tower::Service<http::Request<tonic::body::Body>> for PluginChannel {
    type Response = http::Response<tonic::body::Body>;
    type Error = ChannelError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, ChannelError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ChannelError>> {
        // Waiting for a stream slot happens in the call, on the connection.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        Box::pin(self.clone().unary(request))
    }
}

/// What one HTTP/2 stream carries in: its data frames, then its trailers
/// (where gRPC puts the status), with received data handed back to flow
/// control as it is read. A plugin's answer here; a caller's request in the
/// API server, which speaks `h2` the same way.
pub struct StreamBody {
    recv: h2::RecvStream,
    data_done: bool,
}

impl StreamBody {
    pub fn new(recv: h2::RecvStream) -> StreamBody {
        StreamBody {
            recv,
            data_done: false,
        }
    }
}

impl Body for StreamBody {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        if !self.data_done {
            match ready!(self.recv.poll_data(cx)) {
                Some(Ok(data)) => {
                    let _ = self.recv.flow_control().release_capacity(data.len());
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => self.data_done = true,
            }
        }
        match ready!(self.recv.poll_trailers(cx)) {
            Ok(Some(trailers)) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
            Ok(None) => Poll::Ready(None),
            Err(e) => Poll::Ready(Some(Err(e))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.recv.is_end_stream()
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use tokio::sync::oneshot;
    use tonic::{Code, Request, Response, Status};

    use crate::proto::identity_server::{Identity, IdentityServer};
    use crate::{ClientOptions, CsiClient, Endpoint, Failure, proto};

    /// An Identity service whose GetPluginInfo answers with a manifest of
    /// `manifest_bytes`, and whose Probe answers `probe`.
    #[derive(Clone)]
    struct Plugin {
        manifest_bytes: usize,
        probe: Code,
    }

    #[tonic::async_trait]
    impl Identity for Plugin {
        async fn get_plugin_info(
            &self,
            _: Request<proto::GetPluginInfoRequest>,
        ) -> Result<Response<proto::GetPluginInfoResponse>, Status> {
            Ok(Response::new(proto::GetPluginInfoResponse {
                name: "test.csi.berth.dev".into(),
                vendor_version: "1".into(),
                manifest: [("blob".to_string(), "x".repeat(self.manifest_bytes))].into(),
            }))
        }

        async fn get_plugin_capabilities(
            &self,
            _: Request<proto::GetPluginCapabilitiesRequest>,
        ) -> Result<Response<proto::GetPluginCapabilitiesResponse>, Status> {
            Ok(Response::new(Default::default()))
        }

        async fn probe(
            &self,
            _: Request<proto::ProbeRequest>,
        ) -> Result<Response<proto::ProbeResponse>, Status> {
            match self.probe {
                Code::Ok => Ok(Response::new(proto::ProbeResponse { ready: Some(true) })),
                code => Err(Status::new(code, "not today")),
            }
        }
    }

    /// Serves `plugin` on `socket` until the sender is dropped or fired.
    fn serve(plugin: Plugin, socket: &Path) -> oneshot::Sender<()> {
        let _ = std::fs::remove_file(socket);
        let listener = tokio::net::UnixListener::bind(socket).unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tonic::transport::Server::builder()
            .add_service(IdentityServer::new(plugin))
            .serve_with_incoming_shutdown(tokio_stream::wrappers::UnixListenerStream::new(listener), async {
                let _ = stopped.await;
            });
        tokio::spawn(server);
        stop
    }

    fn client(socket: &Path) -> CsiClient {
        let options = ClientOptions {
            deadline: Duration::from_secs(10),
            wait: Duration::from_secs(1),
        };
        CsiClient::lazy(Endpoint::parse(socket.to_str().unwrap()).unwrap(), options)
    }

    /// `n` calls made at once, each by `call` on its own clone of `client`.
    fn at_once<T, F, Fut>(client: &CsiClient, n: usize, call: F) -> Vec<tokio::task::JoinHandle<T>>
    where
        F: Fn(CsiClient) -> Fut,
        Fut: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        (0..n).map(|_| tokio::spawn(call(client.clone()))).collect()
    }

    const HEALTHY: Plugin = Plugin {
        manifest_bytes: 0,
        probe: Code::Ok,
    };

    #[tokio::test]
    async fn a_plugin_that_restarts_is_dialled_again_and_its_absence_is_unreachable() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("csi.sock");
        let client = client(&socket);
        let absent = client.probe(Default::default()).await.unwrap_err();
        assert!(matches!(absent.failure, Failure::Unreachable(_)), "{absent}");

        let stop = serve(HEALTHY, &socket);
        assert_eq!(client.probe(Default::default()).await.unwrap().ready, Some(true));
        stop.send(()).unwrap();
        // The old connection closes; until something listens again, calls
        // find nobody there.
        let gone = loop {
            match client.probe(Default::default()).await {
                Ok(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                Err(e) => break e,
            }
        };
        assert!(matches!(gone.failure, Failure::Unreachable(_)), "{gone}");
        let _stop = serve(HEALTHY, &socket);
        assert_eq!(client.probe(Default::default()).await.unwrap().ready, Some(true));
    }

    #[tokio::test]
    async fn a_status_the_plugin_sends_is_kept_as_the_plugins() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("csi.sock");
        let _stop = serve(
            Plugin {
                probe: Code::FailedPrecondition,
                ..HEALTHY
            },
            &socket,
        );
        let e = client(&socket).probe(Default::default()).await.unwrap_err();
        assert_eq!(
            e.failure,
            Failure::Status {
                code: Code::FailedPrecondition,
                message: "not today".into()
            }
        );
    }

    /// A service the plugin does not serve is answered at once, before the
    /// request's message is read: the answer is what the call returns. (The
    /// stream can close between the request's headers and its message only
    /// when the caller's thread is preempted there, which no test here makes
    /// happen; this keeps the answer itself right.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_service_the_plugin_does_not_serve_is_answered_unimplemented_by_the_plugin() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("csi.sock");
        let _stop = serve(HEALTHY, &socket);
        let client = client(&socket);
        let calls = at_once(&client, 200, |c| async move {
            c.node_get_capabilities(Default::default()).await
        });
        for call in calls {
            let e = call.await.unwrap().unwrap_err();
            assert!(
                matches!(
                    e.failure,
                    Failure::Status {
                        code: Code::Unimplemented,
                        ..
                    }
                ),
                "{e}"
            );
        }
    }

    #[tokio::test]
    async fn an_answer_over_the_message_limit_is_invalid_and_the_connection_serves_on() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("csi.sock");
        let _stop = serve(
            Plugin {
                manifest_bytes: crate::grpc_frame::MAX_ANSWER + 1,
                ..HEALTHY
            },
            &socket,
        );
        let client = client(&socket);
        let e = client.get_plugin_info(Default::default()).await.unwrap_err();
        assert!(
            matches!(&e.failure, Failure::Invalid(why) if why.contains("4 MiB limit")),
            "{e}"
        );
        assert_eq!(e.code(), Code::Internal);
        let probed = client.probe(Default::default()).await.unwrap();
        assert_eq!(probed.ready, Some(true), "the next call on the same connection");
    }

    #[tokio::test]
    async fn answers_wider_than_the_flow_control_windows_arrive_whole_and_many_share_a_connection() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("csi.sock");
        // Each answer is wider than a stream's window, and together wider
        // than the connection's: only read data handed back lets them finish.
        let size = (super::STREAM_WINDOW as usize * 3) / 2;
        let _stop = serve(
            Plugin {
                manifest_bytes: size,
                ..HEALTHY
            },
            &socket,
        );
        let client = client(&socket);
        let calls = at_once(&client, 8, |c| async move {
            c.get_plugin_info(Default::default()).await
        });
        for call in calls {
            let info = call.await.unwrap().unwrap();
            assert_eq!(info.manifest["blob"].len(), size);
        }
        // More calls at once than the server takes streams: they wait their turn.
        let calls = at_once(&client, 600, |c| async move { c.probe(Default::default()).await });
        for call in calls {
            assert_eq!(call.await.unwrap().unwrap().ready, Some(true));
        }
    }
}
