//! Berth's web console: HTML made on the server, with one small script
//! for the live views, served over TLS on an address of its own
//! (`[console]`). A person signs in with an ACL token; every page and
//! action is a call of the API as that token, through the same entrance,
//! ACLs and audit log as the TLS API's callers: the console holds no
//! authority of its own.
//!
//! Invariants:
//! - Nothing from outside reaches a page unescaped ([`html::esc`]), and
//!   the pages carry no inline script or style (the CSP forbids both).
//! - A change is a POST carrying the session's form check (`csrf`), from
//!   a page of the console's own origin; the session cookie is HttpOnly,
//!   Secure and SameSite=Strict.
//! - Requests are bounded: headers within [`HEADER_READ`], a form of at
//!   most [`MAX_FORM`] bytes, connections capped overall and per address.

mod actions;
pub mod api;
mod assets;
mod forms;
pub mod html;
mod live;
pub mod pages;
mod reply;
mod routes;
pub mod session;
mod views;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

pub use api::{Api, ApiService};

/// A request's headers must arrive within this.
pub const HEADER_READ: Duration = Duration::from_secs(10);
/// The largest form read.
pub const MAX_FORM: usize = 16 * 1024;
/// Connections at once: a browser opens a few, a live view holds one.
const CAPS: berth_metrics::listener::Caps = berth_metrics::listener::Caps {
    total: 512,
    per_address: 64,
};
const HANDSHAKE: Duration = Duration::from_secs(10);

/// Why the console could not start.
#[derive(Debug, thiserror::Error)]
#[error("[console] address = {address:?}: cannot listen there: {source}")]
pub struct ListenError {
    pub address: SocketAddr,
    #[source]
    pub source: std::io::Error,
}

/// What the console serves with.
pub struct Console {
    pub(crate) api: Api,
    pub(crate) sessions: session::Sessions,
}

/// Binds `address` (now, so a taken port is an error at start) and serves
/// the console there with `tls` until the process ends.
pub async fn serve(
    address: SocketAddr,
    mut tls: rustls::ServerConfig,
    api: ApiService,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), ListenError> {
    use tokio_stream::StreamExt;
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|source| ListenError { address, source })?;
    let bound = listener.local_addr().unwrap_or(address);
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let console = Arc::new(Console {
        api: Api::new(api),
        sessions: session::Sessions::default(),
    });
    let mut incoming =
        berth_metrics::listener::tls_incoming(listener, acceptor, CAPS, HANDSHAKE, None, "console");
    let task = tokio::spawn(async move {
        while let Some(accepted) = incoming.next().await {
            let Ok(stream) = accepted else { continue };
            let console = console.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    let console = console.clone();
                    async move { Ok::<_, std::convert::Infallible>(routes::answer(&console, request).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(HEADER_READ)
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok((bound, task))
}
