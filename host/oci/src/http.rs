//! Just enough HTTP/1.1 for the distribution API: one connection a request
//! (a module is a handful of requests), HTTPS with the system's CAs or a
//! given one, plain HTTP to loopback only, every answer's body bounded.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;

use crate::OciError;

/// How long one request may take, connecting and reading included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// How long one registry operation (a pull, a push, a signature check) may
/// take in all, whatever its requests and redirects.
pub(crate) const OPERATION_TIMEOUT: Duration = Duration::from_secs(300);

/// The system's CA bundles, the first that exists.
const SYSTEM_CAS: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

#[derive(Clone)]
pub(crate) enum Transport {
    Https(Arc<rustls::ClientConfig>),
    /// Plain HTTP, to loopback only.
    Plain,
    /// A registry on loopback with no transport asked for: HTTPS first, and
    /// plain HTTP from the first answer that is not TLS on (as Docker and
    /// crane treat loopback registries). Shared by the operation's requests.
    Loopback {
        tls: Arc<rustls::ClientConfig>,
        plain: Arc<std::sync::atomic::AtomicBool>,
    },
}

/// A URL split as the transport needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Target {
    pub authority: String,
    pub path: String,
}

impl Target {
    /// `location` (absolute, or a path on `base`'s authority) as a target.
    pub fn resolve(base: &Target, location: &str, https: bool) -> Option<Target> {
        let scheme = if https { "https://" } else { "http://" };
        if let Some(rest) = location.strip_prefix(scheme) {
            let (authority, path) = match rest.find('/') {
                Some(i) => (&rest[..i], &rest[i..]),
                None => (rest, "/"),
            };
            return Some(Target {
                authority: authority.to_string(),
                path: path.to_string(),
            });
        }
        location.starts_with('/').then(|| Target {
            authority: base.authority.clone(),
            path: location.to_string(),
        })
    }

    fn host(&self) -> &str {
        self.authority
            .rsplit_once(':')
            .map_or(self.authority.as_str(), |(h, _)| h)
    }
}

pub(crate) struct Response {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// Whether `host` is this machine: the only place plain HTTP may go.
pub(crate) fn loopback(host: &str) -> bool {
    host == "localhost"
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

impl Transport {
    /// HTTPS trusting `ca` (a PEM file) if given, else the system's CAs.
    pub fn https(ca: Option<&Path>) -> Result<Transport, OciError> {
        Ok(Transport::Https(tls_config(ca)?))
    }

    /// HTTPS first, plain HTTP if the loopback registry does not speak TLS.
    pub fn loopback(ca: Option<&Path>) -> Result<Transport, OciError> {
        Ok(Transport::Loopback {
            tls: tls_config(ca)?,
            plain: Arc::default(),
        })
    }

    pub fn is_https(&self) -> bool {
        match self {
            Transport::Https(_) => true,
            Transport::Plain => false,
            Transport::Loopback { plain, .. } => !plain.load(std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// Sends one request; the answer's body is read up to `limit` bytes.
    /// It ends at `deadline` (the whole operation's) if not before.
    #[allow(clippy::too_many_arguments)]
    pub async fn send(
        &self,
        registry: &str,
        method: &str,
        target: &Target,
        headers: &[(&str, String)],
        body: Bytes,
        limit: usize,
        deadline: tokio::time::Instant,
    ) -> Result<Response, OciError> {
        let own = tokio::time::Instant::now() + REQUEST_TIMEOUT;
        tokio::time::timeout_at(
            own.min(deadline),
            self.exchange(registry, method, target, headers, body, limit),
        )
        .await
        .map_err(|_| OciError::Http {
            registry: registry.to_string(),
            why: match deadline < own {
                true => format!(
                    "{method} {}: the operation took longer than {OPERATION_TIMEOUT:?} (one deadline for all its requests and redirects)",
                    target.path
                ),
                false => format!("{method} {} took longer than {REQUEST_TIMEOUT:?}", target.path),
            },
        })?
    }

    async fn exchange(
        &self,
        registry: &str,
        method: &str,
        target: &Target,
        headers: &[(&str, String)],
        body: Bytes,
        limit: usize,
    ) -> Result<Response, OciError> {
        let http = |why: String| OciError::Http {
            registry: registry.to_string(),
            why,
        };
        let default_port = if self.is_https() { 443 } else { 80 };
        let addr = if target.authority.contains(':') {
            target.authority.clone()
        } else {
            format!("{}:{default_port}", target.authority)
        };
        let connect = || async {
            let tcp = TcpStream::connect(&addr)
                .await
                .map_err(|source| OciError::Connect {
                    registry: registry.to_string(),
                    source,
                })?;
            let _ = tcp.set_nodelay(true);
            Ok::<_, OciError>(tcp)
        };
        let make_request = || {
            let mut request = hyper::Request::builder()
                .method(method)
                .uri(&target.path)
                .header(hyper::header::HOST, &target.authority)
                .header(
                    hyper::header::USER_AGENT,
                    concat!("berth/", env!("CARGO_PKG_VERSION")),
                )
                .header(hyper::header::CONTENT_LENGTH, body.len());
            for (name, value) in headers {
                let name = HeaderName::from_bytes(name.as_bytes()).map_err(|e| http(e.to_string()))?;
                let value = HeaderValue::from_str(value).map_err(|e| http(e.to_string()))?;
                request = request.header(name, value);
            }
            request
                .body(Full::new(body.clone()))
                .map_err(|e| http(e.to_string()))
        };
        let tls_to = |config: Arc<rustls::ClientConfig>, tcp: TcpStream| async move {
            let name = ServerName::try_from(target.host().to_string())
                .map_err(|e| http(format!("{:?} is not a TLS server name: {e}", target.host())))?;
            Ok::<_, OciError>(tokio_rustls::TlsConnector::from(config).connect(name, tcp).await)
        };
        let plain_to = |tcp: TcpStream| async {
            if !loopback(target.host()) {
                return Err(OciError::PlainHttp(target.authority.clone()));
            }
            Ok(round_trip(TokioIo::new(tcp), make_request()?).await)
        };
        let response = match self {
            Transport::Https(config) => {
                let tls = tls_to(config.clone(), connect().await?)
                    .await?
                    .map_err(|source| OciError::Connect {
                        registry: registry.to_string(),
                        source: not_tls_hint(source),
                    })?;
                round_trip(TokioIo::new(tls), make_request()?).await
            }
            Transport::Plain => plain_to(connect().await?).await?,
            Transport::Loopback { tls, plain } => {
                use std::sync::atomic::Ordering;
                if plain.load(Ordering::Relaxed) {
                    plain_to(connect().await?).await?
                } else {
                    match tls_to(tls.clone(), connect().await?).await? {
                        Ok(stream) => round_trip(TokioIo::new(stream), make_request()?).await,
                        Err(e) if speaks_plain_http(&e) => {
                            tracing::debug!(%registry, "the loopback registry does not speak TLS: plain HTTP");
                            plain.store(true, Ordering::Relaxed);
                            plain_to(connect().await?).await?
                        }
                        Err(source) => {
                            return Err(OciError::Connect {
                                registry: registry.to_string(),
                                source,
                            });
                        }
                    }
                }
            }
        }
        .map_err(|e| http(e.to_string()))?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = Limited::new(response.into_body(), limit)
            .collect()
            .await
            .map_err(|e| {
                if e.is::<http_body_util::LengthLimitError>() {
                    OciError::TooLarge {
                        registry: registry.to_string(),
                        what: format!("the answer to {method} {}", target.path),
                        max: limit,
                    }
                } else {
                    http(e.to_string())
                }
            })?
            .to_bytes();
        Ok(Response {
            status,
            headers,
            body,
        })
    }
}

/// TLS trusting `ca` (a PEM file) if given, else the system's CAs.
fn tls_config(ca: Option<&Path>) -> Result<Arc<rustls::ClientConfig>, OciError> {
    let mut roots = rustls::RootCertStore::empty();
    let files: Vec<&Path> = match ca {
        Some(p) => vec![p],
        None => SYSTEM_CAS
            .iter()
            .map(Path::new)
            .filter(|p| p.exists())
            .take(1)
            .collect(),
    };
    for file in files {
        let certs = CertificateDer::pem_file_iter(file)
            .map_err(|e| OciError::file(file, e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| OciError::file(file, e))?;
        if certs.is_empty() && ca.is_some() {
            return Err(OciError::file(file, "holds no certificate"));
        }
        for cert in certs {
            // A bundle may hold certificates rustls cannot use; the rest still count.
            let _ = roots.add(cert);
        }
    }
    let config =
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| OciError::Http {
                registry: String::new(),
                why: e.to_string(),
            })?
            .with_root_certificates(roots)
            .with_no_client_auth();
    Ok(Arc::new(config))
}

/// Whether a TLS handshake failed because the server answered in plain HTTP.
fn speaks_plain_http(e: &std::io::Error) -> bool {
    e.to_string().contains("InvalidContentType")
}

/// A registry that answered the TLS handshake with plain HTTP says so.
fn not_tls_hint(e: std::io::Error) -> std::io::Error {
    if speaks_plain_http(&e) {
        std::io::Error::new(
            e.kind(),
            format!(
                "{e} (it does not speak TLS here: a registry on loopback over plain HTTP needs --plain-http, or `plain_http` in [oci])"
            ),
        )
    } else {
        e
    }
}

async fn round_trip<IO>(
    io: IO,
    request: hyper::Request<Full<Bytes>>,
) -> Result<hyper::Response<hyper::body::Incoming>, hyper::Error>
where
    IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    sender.send_request(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_goes_to_loopback_only_and_locations_resolve() {
        for host in ["127.0.0.1", "localhost", "::1", "[::1]", "127.8.9.10"] {
            assert!(loopback(host), "{host}");
        }
        for host in [
            "10.0.0.1",
            "registry.example.com",
            "localhost.evil.com",
            "0.0.0.0",
        ] {
            assert!(!loopback(host), "{host}");
        }
        let base = Target {
            authority: "r.io:5000".into(),
            path: "/v2/".into(),
        };
        assert_eq!(
            Target::resolve(&base, "/v2/a/blobs/uploads/1?x=y", true).unwrap(),
            Target {
                authority: "r.io:5000".into(),
                path: "/v2/a/blobs/uploads/1?x=y".into()
            }
        );
        assert_eq!(
            Target::resolve(&base, "https://s3.example.com/b?sig=1", true)
                .unwrap()
                .authority,
            "s3.example.com"
        );
        assert_eq!(
            Target::resolve(&base, "http://r.io/x", true),
            None,
            "no downgrade"
        );
        assert_eq!(Target::resolve(&base, "relative", true), None);
    }
}
