//! The API over TLS (`api_address`): for callers on other machines, each
//! with an ACL token. The server's certificate, for `api_names`, is issued
//! by the cluster CA when the server has one (shared by every server on
//! etcd), else by a CA of the API's own beside the state file; either way
//! the CA's certificate is written to `api-ca.pem` there, for callers'
//! `BERTH_CACERT`. A caller says who it is with a token, or, when
//! `api_client_ca` names a CA, with a client certificate that CA issued
//! (its subject bound to policies). That CA may not be the CA of Berth's
//! own certificates: an agent's certificate never names a caller. Without
//! `api_client_ca` no client certificate is asked for.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::cluster::pki::ClusterCa;
use crate::config::Config;

use super::error::{ClientCaError, IdentityError, IdentityProblem, ServeError};

/// The most of `api_client_ca` read (a bundle of a few CAs is a few KiB).
const CLIENT_CA_MAX: u64 = 1 << 20;

/// How long a caller has to finish its handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// The TLS API's listener and configuration, ready to serve.
pub(super) struct ApiTls {
    pub listener: tokio::net::TcpListener,
    pub config: rustls::ServerConfig,
    pub address: std::net::SocketAddr,
    pub ca_file: PathBuf,
}

/// Where callers find the CA the API's certificate chains to.
pub(super) fn ca_file(state: &Path) -> PathBuf {
    state.with_file_name("api-ca.pem")
}

/// Binds `api_address`, if set, with a certificate from `cluster_ca` (or
/// the API's own CA).
pub(super) async fn bind(
    config: &Config,
    cluster_ca: Option<&ClusterCa>,
) -> Result<Option<ApiTls>, ServeError> {
    let Some(address) = config.api_address else {
        return Ok(None);
    };
    let tls = with_api_ca(config, cluster_ca, |ca| {
        let (chain, key) = ca.server_identity(&config.api_names)?;
        let clients = match &config.api_client_ca {
            Some(path) => Some(client_roots(path, ca).map_err(|source| ServeError::ApiClientCa {
                path: path.clone(),
                source,
            })?),
            None => None,
        };
        server_config(&chain, &key, clients)
    })?;
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|source| ServeError::BindApi { address, source })?;
    let address = listener.local_addr().unwrap_or(address);
    Ok(Some(ApiTls {
        listener,
        config: tls,
        address,
        ca_file: ca_file(&config.state),
    }))
}

/// Runs `f` with the API's CA (`cluster_ca`, else the API's own beside the
/// state file), having written its certificate to `api-ca.pem` for callers.
fn with_api_ca<T>(
    config: &Config,
    cluster_ca: Option<&ClusterCa>,
    f: impl FnOnce(&ClusterCa) -> Result<T, ServeError>,
) -> Result<T, ServeError> {
    let own;
    let ca = match cluster_ca {
        Some(ca) => ca,
        None => {
            own = ClusterCa::load_or_create(&config.state.with_file_name("api-ca"))?;
            &own
        }
    };
    std::fs::write(ca_file(&config.state), ca.cert_pem())
        .map_err(ServeError::io("writing api-ca.pem beside the state file"))?;
    f(ca)
}

/// The console's TLS: a certificate for `names` from the API's CA (the
/// cluster CA when there is one, else the API's own), no client
/// certificate asked for (a person signs in with a token).
pub(super) fn console_config(
    config: &Config,
    console: &crate::config::console::ConsoleConfig,
    cluster_ca: Option<&ClusterCa>,
) -> Result<rustls::ServerConfig, ServeError> {
    if let Some(own) = &console.identity {
        let (chain, key) = own_identity(own).map_err(|source| ServeError::ConsoleIdentity {
            path: source.path.clone(),
            source,
        })?;
        return server_config_of(chain, key, None);
    }
    with_api_ca(config, cluster_ca, |ca| {
        let (chain, key) = ca.server_identity(&console.names)?;
        server_config(&chain, &key, None)
    })
}

/// The most of a certificate chain or key file read.
const IDENTITY_MAX: u64 = 1 << 20;

/// `[console] certificate` and `key`, read and checked.
fn own_identity(
    own: &crate::config::console::ConsoleIdentity,
) -> Result<
    (
        Vec<rustls::pki_types::CertificateDer<'static>>,
        rustls::pki_types::PrivateKeyDer<'static>,
    ),
    IdentityError,
> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    let fail = |path: &Path, what| IdentityError {
        path: path.to_path_buf(),
        what,
    };
    let read = |path: &Path| -> Result<Vec<u8>, IdentityError> {
        let mut text = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(IDENTITY_MAX).read_to_end(&mut text))
            .map_err(|e| fail(path, IdentityProblem::Read(e)))?;
        Ok(text)
    };
    let mode = std::fs::metadata(&own.key)
        .map_err(|e| fail(&own.key, IdentityProblem::Read(e)))?
        .permissions()
        .mode();
    if mode & 0o004 != 0 {
        return Err(fail(&own.key, IdentityProblem::WorldReadable));
    }
    let chain = CertificateDer::pem_slice_iter(&read(&own.certificate)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail(&own.certificate, IdentityProblem::Pem(e)))?;
    if chain.is_empty() {
        return Err(fail(&own.certificate, IdentityProblem::NoCertificate));
    }
    let key = PrivateKeyDer::from_pem_slice(&read(&own.key)?)
        .map_err(|e| fail(&own.key, IdentityProblem::Pem(e)))?;
    Ok((chain, key))
}

/// A certificate chain and its key, read from PEM.
pub(super) fn identity(
    chain: &str,
    key: &str,
) -> Result<
    (
        Vec<rustls::pki_types::CertificateDer<'static>>,
        rustls::pki_types::PrivateKeyDer<'static>,
    ),
    ServeError,
> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_slice_iter(chain.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(ServeError::tls)?;
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).map_err(ServeError::tls)?;
    Ok((certs, key))
}

/// The roots client certificates must chain to: `path`'s certificates,
/// none of them `own`'s (the CA that issues Berth's own certificates).
fn client_roots(path: &Path, own: &ClusterCa) -> Result<rustls::RootCertStore, ClientCaError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    use std::io::Read;
    let mut text = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(CLIENT_CA_MAX).read_to_end(&mut text))
        .map_err(ClientCaError::Read)?;
    let certs = CertificateDer::pem_slice_iter(&text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(ClientCaError::Pem)?;
    let own = CertificateDer::from_pem_slice(own.cert_pem().as_bytes()).map_err(ClientCaError::Pem)?;
    if certs.contains(&own) {
        return Err(ClientCaError::BerthCa);
    }
    let mut roots = rustls::RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(ClientCaError::Empty);
    }
    Ok(roots)
}

fn server_config(
    chain: &str,
    key: &str,
    clients: Option<rustls::RootCertStore>,
) -> Result<rustls::ServerConfig, ServeError> {
    let (certs, key) = identity(chain, key)?;
    server_config_of(certs, key, clients)
}

fn server_config_of(
    certs: Vec<rustls::pki_types::CertificateDer<'static>>,
    key: rustls::pki_types::PrivateKeyDer<'static>,
    clients: Option<rustls::RootCertStore>,
) -> Result<rustls::ServerConfig, ServeError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(ServeError::tls)?;
    let builder = match clients {
        // A caller with a token sends no certificate; one that sends a
        // certificate must chain it to `api_client_ca`.
        Some(roots) => builder.with_client_cert_verifier(
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(|e| ServeError::tls(ClientCaError::Verifier(e)))?,
        ),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(certs, key).map_err(ServeError::tls)?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

impl ApiTls {
    /// The connections whose handshakes are done: bounded per address and
    /// overall, as the cluster endpoint's are.
    pub(super) fn incoming(
        self,
    ) -> tokio_stream::wrappers::ReceiverStream<
        std::io::Result<tokio_rustls::server::TlsStream<crate::metrics::listener::Held>>,
    > {
        let descriptors = crate::metrics::listener::raise_descriptor_limit();
        let total = (descriptors / 8).clamp(16, 4096) as usize;
        crate::metrics::listener::tls_incoming(
            self.listener,
            tokio_rustls::TlsAcceptor::from(Arc::new(self.config)),
            crate::metrics::listener::Caps {
                total,
                per_address: (total / 4).max(4),
            },
            HANDSHAKE,
            None,
            "api",
        )
    }
}
