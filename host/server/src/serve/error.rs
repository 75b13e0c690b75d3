//! Why `berth serve`, or one term of it, could not go on.

use crate::agent::OpenError;
use crate::api::SocketError;
use crate::cluster::pki::PkiError;
use crate::leadership::SharedCaError;
use crate::metrics::http::ListenError;
use crate::policy::SetError;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Socket(#[from] SocketError),
    #[error(transparent)]
    Metrics(#[from] ListenError),
    #[error(transparent)]
    Docker(#[from] crate::agent::docker::ServeError),
    #[error(transparent)]
    Policies(#[from] SetError),
    #[error(transparent)]
    Fetch(#[from] berth_oci::FetchError),
    #[error("the policy set: {0}")]
    PolicySet(#[from] crate::api::ReloadError),
    #[error(transparent)]
    Pki(#[from] PkiError),
    #[error("the cluster CA in etcd ({endpoints}): {error}")]
    SharedCa {
        endpoints: String,
        #[source]
        error: SharedCaError,
    },
    #[error("{doing}: {source}")]
    Io {
        doing: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("cluster_address: binding {address}: {source}")]
    Bind {
        address: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// The TLS cluster endpoint's configuration (certificates, verifier).
    #[error("the TLS cluster endpoint: {0}")]
    Tls(String),
    #[error("starting the WebAssembly engine: {0:#}")]
    Engine(anyhow::Error),
    #[error("node {node}: {error}")]
    Agent {
        node: String,
        #[source]
        error: OpenError,
    },
    #[error("reading the join tokens: {0}")]
    Tokens(#[source] StoreError),
    #[error("the reflection service: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("serving the API: {0}")]
    Serving(#[from] tonic::transport::Error),
    #[error("the term stopped by itself")]
    TermStopped,
}

impl ServeError {
    pub(super) fn io(doing: &'static str) -> impl FnOnce(std::io::Error) -> ServeError {
        move |source| ServeError::Io { doing, source }
    }

    pub(super) fn tls(e: impl std::fmt::Display) -> ServeError {
        ServeError::Tls(e.to_string())
    }
}
