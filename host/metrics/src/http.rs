//! The HTTP endpoint: `/metrics` (OpenMetrics text), `/healthz` (the
//! process answers) and `/readyz` (every readiness check passes). Plain
//! HTTP/1.1 on the configured address; nothing here takes a request body.
//!
//! Whoever reaches the address can connect, so connections are capped
//! (overall and per address), a request's headers must arrive within a few
//! seconds, and a connection lives a minute at most. Bound beyond loopback,
//! `/readyz` names its checks and whether each passes, but not their
//! messages (paths, plugins' errors).

use std::convert::Infallible;
use std::net::SocketAddr;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::readiness::Readiness;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Scrapers and probes need few connections.
const CAPS: crate::listener::Caps = crate::listener::Caps {
    total: 64,
    per_address: 16,
};
const HEADER_READ: std::time::Duration = std::time::Duration::from_secs(5);
const CONNECTION_LIFETIME: std::time::Duration = std::time::Duration::from_secs(60);

/// Binds `address` and serves until the process ends. Binding is done
/// before returning, so a taken port is an error at start, not a log line.
/// The metrics address could not be listened on.
#[derive(Debug, thiserror::Error)]
#[error("metrics = {address:?}: cannot listen there: {source}")]
pub struct ListenError {
    pub address: SocketAddr,
    #[source]
    pub source: std::io::Error,
}

pub async fn serve(
    address: SocketAddr,
    readiness: Readiness,
) -> Result<tokio::task::JoinHandle<()>, ListenError> {
    let metrics = super::install();
    let listener = TcpListener::bind(address)
        .await
        .map_err(|source| ListenError { address, source })?;
    let bound = listener.local_addr().unwrap_or(address);
    let details = bound.ip().is_loopback();
    if details {
        tracing::info!(address = %bound, "serving /metrics, /healthz and /readyz");
    } else {
        tracing::warn!(
            address = %bound,
            "serving /metrics, /healthz and /readyz beyond loopback: anyone who reaches this address can read them (/readyz without its checks' messages)"
        );
    }
    let limiter = crate::listener::Limiter::new(CAPS);
    Ok(tokio::spawn(async move {
        loop {
            let (stream, _, place) = crate::listener::accept(&listener, &limiter, "metrics").await;
            let readiness = readiness.clone();
            tokio::spawn(async move {
                let _place = place;
                let service = hyper::service::service_fn(move |req| {
                    let answer = answer(&req, metrics, &readiness, details);
                    async move { Ok::<_, Infallible>(answer) }
                });
                let connection = hyper::server::conn::http1::Builder::new()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(HEADER_READ)
                    .serve_connection(TokioIo::new(stream), service);
                let _ = tokio::time::timeout(CONNECTION_LIFETIME, connection).await;
            });
        }
    }))
}

fn answer(
    req: &Request<Incoming>,
    metrics: &super::Metrics,
    readiness: &Readiness,
    details: bool,
) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n".into());
    }
    match req.uri().path() {
        "/metrics" => Response::builder()
            .header(hyper::header::CONTENT_TYPE, OPENMETRICS)
            .body(Full::new(Bytes::from(metrics.encode())))
            .unwrap_or_default(),
        "/healthz" | "/livez" => text(StatusCode::OK, "ok\n".into()),
        "/readyz" => {
            let mut report = readiness.report();
            if !details {
                for line in &mut report.lines {
                    line.truncate(line.find(':').unwrap_or(line.len()));
                }
            }
            let mut body = report.lines.join("\n");
            body.push('\n');
            body.push_str(if report.ready { "ready\n" } else { "not ready\n" });
            let status = match report.ready {
                true => StatusCode::OK,
                false => StatusCode::SERVICE_UNAVAILABLE,
            };
            text(status, body)
        }
        other => text(
            StatusCode::NOT_FOUND,
            format!("{other}: not here; try /metrics, /healthz or /readyz\n"),
        ),
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header(hyper::header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(Full::new(Bytes::from(body)))
        .unwrap_or_default()
}
