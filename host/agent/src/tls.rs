//! The agent's side of the TLS cluster endpoint. The first time, it joins
//! with a token: the server's certificate must chain to the CA whose
//! fingerprint the token carries (checked before anything is sent), and the
//! agent sends a certificate request for a key that never leaves it. The
//! certificate it gets back, with the CA, is kept in `<dir>/tls/` (owner
//! only) and presented on every session after.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use berth_proto::berth::v1 as wire;
use berth_proto::berth::v1::cluster_client::ClusterClient;
use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tonic::transport::{Channel, Uri};

use berth_model::credentials::{JoinToken, fingerprint};
use berth_model::files::FileError;
use berth_store::{private_dir, private_file};

/// What the agent presents: its certificate and key, and the CA it trusts.
pub struct Credentials {
    pub ca: String,
    pub cert: String,
    pub key: String,
}

/// Why the agent's TLS credentials or a channel could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error(transparent)]
    File(#[from] FileError),
    #[error("{what}: {source}")]
    Pem {
        what: &'static str,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("{what}: {source}")]
    Rustls {
        what: &'static str,
        #[source]
        source: rustls::Error,
    },
    #[error("{0:?} has no port")]
    NoPort(String),
    #[error("{0:?}: the port is not a number")]
    Port(String),
    #[error("server {host:?}: {source}")]
    Name {
        host: String,
        #[source]
        source: rustls::pki_types::InvalidDnsNameError,
    },
    #[error("server {address:?}: {source}")]
    Address {
        address: String,
        #[source]
        source: tonic::codegen::http::uri::InvalidUri,
    },
}

fn pem(what: &'static str) -> impl FnOnce(rustls::pki_types::pem::Error) -> TlsError {
    move |source| TlsError::Pem { what, source }
}

fn rustls_error(what: &'static str) -> impl FnOnce(rustls::Error) -> TlsError {
    move |source| TlsError::Rustls { what, source }
}

fn tls_dir(dir: &Path) -> PathBuf {
    dir.join("tls")
}

impl Credentials {
    /// The credentials kept under `dir`, if the agent has joined.
    pub fn load(dir: &Path) -> Result<Option<Credentials>, TlsError> {
        let d = tls_dir(dir);
        let read = |f: &str| std::fs::read_to_string(d.join(f)).map_err(FileError::at("reading", &d.join(f)));
        if !d.join("agent.pem").exists() {
            return Ok(None);
        }
        Ok(Some(Credentials {
            ca: read("ca.pem")?,
            cert: read("agent.pem")?,
            key: read("agent.key")?,
        }))
    }

    fn save(&self, dir: &Path) -> Result<(), TlsError> {
        let d = tls_dir(dir);
        private_dir(&d).map_err(FileError::at("creating", &d))?;
        for (f, text) in [
            ("agent.key", &self.key),
            ("ca.pem", &self.ca),
            ("agent.pem", &self.cert),
        ] {
            let path = d.join(f);
            private_file(&path).map_err(FileError::at("creating", &path))?;
            std::fs::write(&path, text).map_err(FileError::at("writing", &path))?;
        }
        Ok(())
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Accepts the server only if its chain holds the CA with the pinned
/// fingerprint and its certificate verifies against that CA.
#[derive(Debug)]
struct PinnedCa {
    fingerprint: String,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

const NOT_THE_CLUSTER: &str = "the server's certificate is not from the cluster CA the join token names";

impl ServerCertVerifier for PinnedCa {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let ca = intermediates
            .iter()
            .find(|c| fingerprint(c) == self.fingerprint)
            .ok_or_else(|| rustls::Error::General(NOT_THE_CLUSTER.into()))?;
        let mut roots = RootCertStore::empty();
        roots
            .add(ca.clone().into_owned())
            .map_err(|_| rustls::Error::General(NOT_THE_CLUSTER.into()))?;
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), self.provider.clone())
            .build()
            .map_err(|e| rustls::Error::General(e.to_string()))?
            .verify_server_cert(end_entity, &[], server_name, ocsp, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

fn roots(ca_pem: &str, what: &'static str) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(ca.map_err(pem(what))?).map_err(rustls_error(what))?;
    }
    Ok(roots)
}

/// What a server offers besides HTTP/2 when it dials another server's TLS
/// endpoint: the endpoint's admission keeps places for hellos that offer
/// it, so a follower's calls are not held behind a fleet's handshakes. The
/// leader answers in HTTP/2 all the same (an earlier release ignores it).
pub const SERVER_PROTOCOL: &[u8] = b"berth-server";

/// A channel to another server's TLS endpoint (`host:port`), trusting the
/// cluster CA alone, presenting this server's own certificate (`identity`:
/// chain and key, PEM) as the client's.
pub fn server_channel(address: &str, ca_pem: &str, identity: (&str, &str)) -> Result<Channel, TlsError> {
    let (host, port) = address
        .rsplit_once(':')
        .ok_or_else(|| TlsError::NoPort(address.into()))?;
    let port = port.parse().map_err(|_| TlsError::Port(address.into()))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(rustls_error("TLS versions"))?
        .with_root_certificates(roots(ca_pem, "the cluster CA")?)
        .with_client_auth_cert(
            client_chain(identity.0, "this server's certificate")?,
            client_key(identity.1, "this server's key")?,
        )
        .map_err(rustls_error("this server's certificate"))?;
    config.alpn_protocols = vec![SERVER_PROTOCOL.to_vec()];
    channel(host, port, config)
}

fn client_chain(text: &str, what: &'static str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    CertificateDer::pem_slice_iter(text.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(pem(what))
}

fn client_key(text: &str, what: &'static str) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(text.as_bytes()).map_err(pem(what))
}

/// A lazily connecting gRPC channel to `host:port` over TLS with `config`
/// (HTTP/2, and whatever protocols `config` offers already beside it).
fn channel(host: &str, port: u16, mut config: ClientConfig) -> Result<Channel, TlsError> {
    config.alpn_protocols.insert(0, b"h2".to_vec());
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let name = ServerName::try_from(host.to_string()).map_err(|source| TlsError::Name {
        host: host.into(),
        source,
    })?;
    let address = format!("{host}:{port}");
    let uri: Uri = format!("http://{address}")
        .parse()
        .map_err(|source| TlsError::Address {
            address: address.clone(),
            source,
        })?;
    // No HTTP/2 pings: a server that stops answering (frozen, cut off) is
    // noticed by the session's heartbeats going unanswered, which the
    // server paces for the whole fleet; pings of their own, every few
    // seconds from every agent, would cost the server more than those.
    Ok(tonic::transport::Endpoint::from(uri)
        // TCP and the TLS handshake: a frozen server accepts, then never answers.
        .connect_timeout(Duration::from_secs(5))
        .connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
            let (connector, name, address) = (connector.clone(), name.clone(), address.clone());
            async move {
                let tcp = tokio::net::TcpStream::connect(&address).await?;
                // Small messages both ways: Nagle's algorithm would hold each one back.
                tcp.set_nodelay(true)?;
                let tls = connector.connect(name, tcp).await?;
                Ok::<_, std::io::Error>(TokioIo::new(tls))
            }
        })))
}

/// The channel an agent that has joined uses: the cluster CA as the only
/// root, its own certificate as the client's.
pub fn session_channel(host: &str, port: u16, creds: &Credentials) -> Result<Channel, TlsError> {
    let roots = roots(&creds.ca, "the kept cluster CA")?;
    let certs = client_chain(&creds.cert, "the agent's certificate")?;
    let key = client_key(&creds.key, "the agent's key")?;
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(rustls_error("TLS versions"))?
        .with_root_certificates(roots)
        .with_client_auth_cert(certs, key)
        .map_err(rustls_error("the agent's certificate"))?;
    channel(host, port, config)
}

/// Joins the cluster with `token` as `node`; keeps and returns the credentials.
pub async fn join(
    host: &str,
    port: u16,
    token: &str,
    node: &str,
    dir: &Path,
) -> Result<Credentials, tonic::Status> {
    let fatal = tonic::Status::failed_precondition;
    let pinned = JoinToken::parse(token).map_err(|e| fatal(e.to_string()))?;
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| fatal(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(PinnedCa {
            fingerprint: pinned.ca_fingerprint,
            provider: provider(),
        }))
        .with_no_client_auth();
    let key = rcgen::KeyPair::generate().map_err(|e| fatal(e.to_string()))?;
    let request = rcgen::CertificateParams::new(Vec::<String>::new())
        .and_then(|p| p.serialize_request(&key))
        .and_then(|r| r.pem())
        .map_err(|e| fatal(e.to_string()))?;
    let mut client = ClusterClient::new(channel(host, port, config).map_err(|e| fatal(e.to_string()))?);
    let answer = client
        .join(wire::JoinRequest {
            token: token.trim().to_string(),
            node: node.to_string(),
            certificate_request: request,
        })
        .await?
        .into_inner();
    let creds = Credentials {
        ca: answer.ca,
        cert: answer.certificate,
        key: key.serialize_pem(),
    };
    creds.save(dir).map_err(|e| fatal(e.to_string()))?;
    Ok(creds)
}
