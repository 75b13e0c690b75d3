//! The web console (`[console]`), beside the API: every page and action is
//! a call of `api`, marked as the TLS API's entrance marks its calls, so
//! the guard asks for the signed-in token and applies its ACLs.

use std::convert::Infallible;

use crate::api::access::Entrance;
use crate::cluster::pki::ClusterCa;
use crate::config::Config;

use super::error::ServeError;

/// The console's address and TLS, ready to serve, if `[console]` is set.
pub(super) struct Prepared {
    address: std::net::SocketAddr,
    tls: rustls::ServerConfig,
}

/// Makes the console's certificate (from the API's CA) if it is configured.
pub(super) fn prepare(config: &Config, ca: Option<&ClusterCa>) -> Result<Option<Prepared>, ServeError> {
    let Some(console) = &config.console else {
        return Ok(None);
    };
    let tls = super::api_tls::console_config(config, console, ca)?;
    Ok(Some(Prepared {
        address: console.address,
        tls,
    }))
}

/// Serves the console on what [`prepare`] made; returns its task.
pub(super) async fn serve<S>(prepared: Prepared, api: S) -> Result<tokio::task::JoinHandle<()>, ServeError>
where
    S: tower::Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
            Error = Infallible,
        > + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    let remote = tower::util::MapRequest::new(api, |mut request: http::Request<tonic::body::Body>| {
        Entrance::Remote.mark(&mut request);
        request
    });
    let service = tower::util::BoxCloneSyncService::new(remote);
    let (address, task) = berth_console::serve(prepared.address, prepared.tls, service).await?;
    tracing::info!(console = %format!("https://{address}/"), "serving the web console; sign in with an ACL token");
    Ok(task)
}
