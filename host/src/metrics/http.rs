//! The HTTP endpoint: `/metrics` (OpenMetrics text), `/healthz` (the
//! process answers) and `/readyz` (every readiness check passes). Plain
//! HTTP/1.1 on the configured address; nothing here takes a request body.

use std::convert::Infallible;
use std::net::SocketAddr;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::readiness::Readiness;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Binds `address` and serves until the process ends. Binding is done
/// before returning, so a taken port is an error at start, not a log line.
pub async fn serve(address: SocketAddr, readiness: Readiness) -> Result<tokio::task::JoinHandle<()>, String> {
    let metrics = super::install();
    let listener = TcpListener::bind(address)
        .await
        .map_err(|e| format!("metrics = {address:?}: cannot listen there: {e}"))?;
    tracing::info!(address = %listener.local_addr().unwrap_or(address), "serving /metrics, /healthz and /readyz");
    Ok(tokio::spawn(async move {
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors, most likely: pause rather than spin.
                    tracing::warn!(error = %e, "metrics endpoint: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            };
            let readiness = readiness.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let answer = answer(&req, metrics, &readiness);
                    async move { Ok::<_, Infallible>(answer) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    }))
}

fn answer(req: &Request<Incoming>, metrics: &super::Metrics, readiness: &Readiness) -> Response<Full<Bytes>> {
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
            let report = readiness.report();
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
