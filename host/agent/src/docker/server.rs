//! The socket Docker dials: bound with its mode from the start, HTTP/1.1,
//! connections and request bodies bounded (Docker sends a few small JSON
//! requests; anything else on the socket is refused, not served).

use std::convert::Infallible;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::UnixListener;

use super::DockerPlugin;

/// Docker's requests are a name and a few options.
const MAX_BODY: usize = 1 << 20;
/// Containers starting at once each make a request or two.
const MAX_CONNECTIONS: usize = 64;
const HEADER_READ: Duration = Duration::from_secs(5);
/// How long a request's body may take to arrive (Docker sends it at once).
const BODY_READ: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(
        "docker.socket_mode {0:o}: a socket others may write to would let anyone on the machine create, mount and remove volumes"
    )]
    WorldWritable(u32),
    #[error("docker.socket {}: another process serves it (another berth on the same config?); refusing to take it over", .0.display())]
    InUse(PathBuf),
    #[error("docker.socket {path}: {source}")]
    Bind {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Binds the socket at `path` with `mode` (never world-writable), making its
/// directory when there is none and replacing a socket left by an earlier run
/// (never one that another live process answers on).
pub fn bind(path: &Path, mode: u32) -> Result<UnixListener, ServeError> {
    if mode & 0o002 != 0 {
        return Err(ServeError::WorldWritable(mode));
    }
    let io = |source| ServeError::Bind {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()) => {
            // A socket someone answers on is theirs; only a stale one goes.
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(ServeError::InUse(path.to_path_buf()));
            }
            std::fs::remove_file(path).map_err(io)?
        }
        Ok(_) => {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "something other than a socket is there",
            )));
        }
        Err(_) => {}
    }
    // Bound under a umask that keeps it private until its mode is set.
    let old = unsafe { libc::umask(0o177) };
    let bound = UnixListener::bind(path);
    unsafe { libc::umask(old) };
    let listener = bound.map_err(io)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io)?;
    Ok(listener)
}

/// Serves Docker's requests on `listener` until the task is aborted.
pub fn serve(listener: UnixListener, plugin: Arc<DockerPlugin>) -> tokio::task::JoinHandle<()> {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    tokio::spawn(async move {
        loop {
            let Ok(slot) = slots.clone().acquire_owned().await else {
                return;
            };
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a Docker connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let plugin = plugin.clone();
            tokio::spawn(async move {
                let _slot = slot;
                let service = hyper::service::service_fn(move |req| {
                    let plugin = plugin.clone();
                    async move { Ok::<_, Infallible>(answer(&plugin, req).await) }
                });
                // One request a connection: a slot is held for one request's
                // header, body and answer, never by an idle peer.
                let _ = hyper::server::conn::http1::Builder::new()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(HEADER_READ)
                    .keep_alive(false)
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    })
}

async fn answer(plugin: &DockerPlugin, req: Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::POST {
        return reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "the volume plugin protocol is POST only".into(),
        );
    }
    let path = req.uri().path().to_string();
    let body = match tokio::time::timeout(BODY_READ, Limited::new(req.into_body(), MAX_BODY).collect()).await
    {
        Ok(Ok(b)) => b.to_bytes(),
        Ok(Err(e)) => return reply(StatusCode::PAYLOAD_TOO_LARGE, format!("reading the request: {e}")),
        Err(_) => {
            return reply(
                StatusCode::REQUEST_TIMEOUT,
                format!("the request's body did not arrive within {BODY_READ:?}"),
            );
        }
    };
    match plugin.answer(&path, &body).await {
        Ok(json) => reply(StatusCode::OK, json),
        Err(e) => reply(
            StatusCode::BAD_REQUEST,
            serde_json::json!({ "Err": e.to_string() }).to_string(),
        ),
    }
}

fn reply(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header(
            hyper::header::CONTENT_TYPE,
            "application/vnd.docker.plugins.v1.2+json",
        )
        .body(Full::new(Bytes::from(body)))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::docker::{DockerSettings, Volumes};
    use berth_proto::berth::v1 as api;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tonic::Status;

    /// Berth's side, for a test of the socket alone.
    struct NoVolumes;

    #[tonic::async_trait]
    impl Volumes for NoVolumes {
        async fn get(&self, _: &str) -> Result<api::Volume, Status> {
            Err(Status::not_found("none"))
        }
        async fn list(&self) -> Result<Vec<api::Volume>, Status> {
            Ok(Vec::new())
        }
        async fn create(&self, _: api::VolumeSpec) -> Result<(), Status> {
            Err(Status::permission_denied("no"))
        }
        async fn delete(&self, _: &str) -> Result<(), Status> {
            Err(Status::permission_denied("no"))
        }
        async fn publish(&self, _: &str, _: &str) -> Result<(), Status> {
            Err(Status::permission_denied("no"))
        }
        async fn unpublish(&self, _: &str, _: &str) -> Result<(), Status> {
            Err(Status::permission_denied("no"))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn peers_that_never_finish_their_bodies_hold_no_slot_for_long() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("berth.sock");
        let settings = DockerSettings {
            node: "node-a".into(),
            create_volumes: false,
            plugin: None,
            wait: Duration::from_secs(1),
            holders: dir.path().join("holders.json"),
        };
        let plugin = Arc::new(DockerPlugin::new(Box::new(NoVolumes), settings).unwrap());
        let served = serve(bind(&socket, 0o600).unwrap(), plugin);
        // Every slot taken by a request whose body never comes.
        let mut stalled = Vec::new();
        for _ in 0..MAX_CONNECTIONS {
            let mut s = tokio::net::UnixStream::connect(&socket).await.unwrap();
            s.write_all(b"POST /VolumeDriver.List HTTP/1.1\r\nHost: p\r\nContent-Length: 100\r\n\r\n{")
                .await
                .unwrap();
            stalled.push(s);
        }
        let whole = async {
            let mut s = tokio::net::UnixStream::connect(&socket).await.unwrap();
            s.write_all(b"POST /VolumeDriver.List HTTP/1.1\r\nHost: p\r\nContent-Length: 2\r\n\r\n{}")
                .await
                .unwrap();
            let mut answer = String::new();
            s.read_to_string(&mut answer).await.unwrap();
            answer
        };
        let answer = tokio::time::timeout(Duration::from_secs(60), whole)
            .await
            .expect("answered once the stalled bodies time out");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        let mut first = String::new();
        stalled[0].read_to_string(&mut first).await.unwrap();
        assert!(first.starts_with("HTTP/1.1 408"), "{first}");
        served.abort();
    }
}
