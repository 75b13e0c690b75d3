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
    #[error(transparent)]
    Console(#[from] berth_console::ListenError),
    #[error("[console] {}: {source}", path.display())]
    ConsoleIdentity {
        path: std::path::PathBuf,
        #[source]
        source: IdentityError,
    },
    #[error("api_address: binding {address}: {source}")]
    BindApi {
        address: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("api_client_ca {}: {source}", path.display())]
    ApiClientCa {
        path: std::path::PathBuf,
        #[source]
        source: ClientCaError,
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

/// Why `api_client_ca` cannot verify callers' certificates.
#[derive(Debug, thiserror::Error)]
pub enum ClientCaError {
    #[error("reading it: {0}")]
    Read(#[source] std::io::Error),
    #[error("a certificate in it does not read: {0}")]
    Pem(#[source] rustls::pki_types::pem::Error),
    #[error("it holds no PEM certificate")]
    Empty,
    #[error(
        "it is the CA of Berth's own certificates (agents and servers hold them): name a CA of its own for the API's callers"
    )]
    BerthCa,
    #[error("no client verifier from it: {0}")]
    Verifier(#[source] rustls::server::VerifierBuilderError),
}

/// Why the console's own certificate or key cannot be served with.
#[derive(Debug, thiserror::Error)]
#[error("{what}")]
pub struct IdentityError {
    pub path: std::path::PathBuf,
    pub(super) what: IdentityProblem,
}

#[derive(Debug, thiserror::Error)]
pub(super) enum IdentityProblem {
    #[error("reading it: {0}")]
    Read(#[source] std::io::Error),
    #[error("every user may read this private key: chmod o-r it")]
    WorldReadable,
    #[error("it does not read as PEM: {0}")]
    Pem(#[source] rustls::pki_types::pem::Error),
    #[error("it holds no PEM certificate")]
    NoCertificate,
}
