//! The CLI's side of the berth.v1 API: where it listens, connecting, and
//! errors as operators read them.

use berth::csi::Endpoint;
use berth::model::namespace::NAMESPACE_HEADER;
use berth_proto::berth::v1::berth_client::BerthClient;
use clap::Args;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// Where the API listens, who asks, and the namespace calls work in.
#[derive(Debug, Clone, Args)]
pub struct ApiArgs {
    /// The API socket of `berth serve`; with several servers on this machine,
    /// their sockets separated by commas, tried in turn (any of them answers:
    /// followers pass calls on to the leader).
    #[arg(long, global = true, env = "BERTH_API", default_value = "berth-state/berth.sock", value_parser = Endpoint::parse, value_delimiter = ',')]
    pub api: Vec<Endpoint>,
    /// A server's TLS API (`https://HOST:PORT`, its `api_address`), used
    /// instead of the socket; calls carry BERTH_TOKEN.
    #[arg(long, global = true, env = "BERTH_ADDR", value_name = "URL")]
    pub addr: Option<String>,
    /// The CA certificate (PEM) the TLS API's certificate is checked
    /// against: `api-ca.pem` beside the server's state file.
    #[arg(long, global = true, env = "BERTH_CACERT", value_name = "FILE")]
    pub cacert: Option<std::path::PathBuf>,
    /// A client certificate (PEM) for the TLS API, of the CA its server's
    /// `api_client_ca` names: who calls when no BERTH_TOKEN is set.
    #[arg(
        long,
        global = true,
        env = "BERTH_CLIENT_CERT",
        value_name = "FILE",
        requires = "client_key"
    )]
    pub client_cert: Option<std::path::PathBuf>,
    /// The client certificate's private key (PEM; mode 0600).
    #[arg(
        long,
        global = true,
        env = "BERTH_CLIENT_KEY",
        value_name = "FILE",
        requires = "client_cert"
    )]
    pub client_key: Option<std::path::PathBuf>,
    /// The namespace to work in (`*` with `volume list`: every namespace);
    /// `default` unless a context names one.
    #[arg(short = 'n', long, global = true, env = "BERTH_NAMESPACE")]
    pub namespace: Option<String>,
    /// A named context of the contexts file (BERTH_CONTEXTS, else
    /// ~/.config/berth/contexts.toml): its addr, cacert, namespace,
    /// token_file and client_cert/client_key stand for what is not given
    /// otherwise; without it, the file's `current`.
    #[arg(long, global = true, env = "BERTH_CONTEXT", value_name = "NAME")]
    pub context: Option<String>,
}

/// The API's client: each call carries the namespace.
pub type Client = BerthClient<InterceptedService<Channel, Stamp>>;

/// What every call carries.
#[derive(Clone)]
pub struct Stamp {
    namespace: MetadataValue<Ascii>,
    token: Option<MetadataValue<Ascii>>,
}

impl tonic::service::Interceptor for Stamp {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        let metadata = request.metadata_mut();
        metadata.insert(NAMESPACE_HEADER, self.namespace.clone());
        if let Some(token) = &self.token {
            metadata.insert("authorization", token.clone());
        }
        Ok(request)
    }
}

/// The largest answer the CLI reads from the API.
const MAX_ANSWER: usize = 1 << 30;

/// A client of the TLS API at `--addr`, or else of the first of the
/// sockets that accepts a connection; a namespace that is no DNS label (nor
/// `*`) is refused before any call. The token is read from BERTH_TOKEN
/// only, never from the command line, where other users can see it.
pub async fn connect(args: &ApiArgs) -> anyhow::Result<Client> {
    let context = crate::contexts::chosen(args.context.as_deref())?.unwrap_or_default();
    let namespace = args
        .namespace
        .clone()
        .or(context.namespace)
        .unwrap_or_else(|| berth::model::Namespace::DEFAULT.to_string());
    let namespace = if namespace == berth::model::namespace::EVERY_NAMESPACE {
        namespace
    } else {
        berth::model::Namespace::parse(&namespace)?.to_string()
    };
    let namespace = MetadataValue::try_from(namespace)?;
    if let Some(addr) = args.addr.as_ref().or(context.addr.as_ref()) {
        let certificate = match (&args.client_cert, &args.client_key) {
            (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
            _ => context.client_cert.clone().zip(context.client_key.clone()),
        };
        let token = match (std::env::var("BERTH_TOKEN"), &context.token_file) {
            (Ok(token), _) => Some(token),
            (Err(_), Some(file)) => Some(crate::contexts::private_text(file)?),
            (Err(_), None) if certificate.is_some() => None,
            (Err(_), None) => anyhow::bail!(
                "the Berth API at {addr} asks who you are: set BERTH_TOKEN to an ACL token (or a context's \
                 token_file), or BERTH_CLIENT_CERT and BERTH_CLIENT_KEY to a client certificate"
            ),
        };
        let token = match token {
            Some(token) => {
                let mut value = MetadataValue::try_from(format!("Bearer {}", token.trim()))
                    .map_err(|_| anyhow::anyhow!("BERTH_TOKEN holds characters no token has"))?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        let cacert = args.cacert.as_ref().or(context.cacert.as_ref());
        let identity = match certificate {
            Some((cert, key)) => Some(client_identity(&cert, &key)?),
            None => None,
        };
        let channel = remote_channel(addr, cacert.map(|p| p.as_path()), identity).await?;
        let stamp = Stamp { namespace, token };
        return Ok(BerthClient::with_interceptor(channel, stamp).max_decoding_message_size(MAX_ANSWER));
    }
    let stamp = Stamp {
        namespace,
        token: None,
    };
    let mut failures = Vec::new();
    for api in &args.api {
        match reachable(api) {
            Ok(()) => {
                // The server is this machine's own: a list of many volumes may
                // pass tonic's default 4 MiB, and must still be read.
                let channel = berth::csi::unix_channel(api.path());
                return Ok(
                    BerthClient::with_interceptor(channel, stamp).max_decoding_message_size(MAX_ANSWER)
                );
            }
            Err(e) => failures.push(e),
        }
    }
    match failures.len() {
        1 => Err(anyhow::Error::msg(failures.remove(0))),
        _ => anyhow::bail!("no Berth API answered: {}", failures.join("; ")),
    }
}

/// Set once this command presents a client certificate.
static CERTIFICATE_PRESENTED: std::sync::OnceLock<()> = std::sync::OnceLock::new();

/// A client certificate and its key, the key readable by its owner only.
fn client_identity(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> anyhow::Result<tonic::transport::Identity> {
    use anyhow::Context;
    let cert =
        std::fs::read(cert).with_context(|| format!("reading BERTH_CLIENT_CERT {}", cert.display()))?;
    let key = crate::contexts::private_text(key)?;
    let _ = CERTIFICATE_PRESENTED.set(());
    Ok(tonic::transport::Identity::from_pem(cert, key))
}

/// A TLS channel to the API at `addr`, its certificate checked against
/// `cacert` (presenting `identity`, if given), connected now so that a
/// wrong address or certificate is said before any call.
async fn remote_channel(
    addr: &str,
    cacert: Option<&std::path::Path>,
    identity: Option<tonic::transport::Identity>,
) -> anyhow::Result<Channel> {
    use anyhow::Context;
    use tonic::transport::{Certificate, ClientTlsConfig};
    if !addr.starts_with("https://") {
        anyhow::bail!("BERTH_ADDR {addr:?}: the API is served over TLS only; write https://HOST:PORT");
    }
    let Some(path) = cacert else {
        anyhow::bail!(
            "set BERTH_CACERT to the CA certificate the API at {addr} is checked against \
             (api-ca.pem beside the server's state file)"
        );
    };
    let pem = std::fs::read(path).with_context(|| format!("reading BERTH_CACERT {}", path.display()))?;
    let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem));
    if let Some(identity) = identity {
        tls = tls.identity(identity);
    }
    Channel::from_shared(addr.to_string())
        .with_context(|| format!("BERTH_ADDR {addr:?}"))?
        .tls_config(tls)?
        .connect_timeout(std::time::Duration::from_secs(10))
        .connect()
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "connecting to the Berth API at {addr}: {}",
                berth::csi::error_chain(&e)
            )
        })
}

/// The channel connects lazily; a first connection here turns the usual
/// mistakes into messages that say what to do.
fn reachable(api: &Endpoint) -> Result<(), String> {
    let path = api.path();
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(format!(
            "no Berth API at {} (is `berth serve` running? set --api or BERTH_API)",
            path.display()
        )),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(format!(
            "no permission to connect to the Berth API at {}: the socket is for the user running \
             `berth serve` (mode 0600 unless socket_mode in berth.toml says otherwise); run as that user",
            path.display()
        )),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => Err(format!(
            "nothing listens on {} (a socket left by a `berth serve` that stopped?)",
            path.display()
        )),
        Err(e) => Err(format!("connecting to the Berth API at {}: {e}", path.display())),
    }
}

/// An error the API answered: its gRPC code kept, for `-o json`.
#[derive(Debug)]
pub struct ApiError {
    pub code: tonic::Code,
    pub message: String,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", berth_proto::code::name(self.code), self.message)
    }
}

impl std::error::Error for ApiError {}

pub fn grpc(e: tonic::Status) -> anyhow::Error {
    // A call that never reached the API says why (a refused client
    // certificate, say, is known only once the first call is made).
    let message = match std::error::Error::source(&e) {
        // Under TLS 1.3 the server checks a client certificate after the
        // handshake: one it refuses closes the connection at the first call.
        Some(source) if CERTIFICATE_PRESENTED.get().is_some() => format!(
            "{}: {} (the API closed the connection: was BERTH_CLIENT_CERT issued by the CA its server's \
             api_client_ca names, and is it still valid?)",
            e.message(),
            berth::csi::error_chain(source)
        ),
        Some(source) => format!("{}: {}", e.message(), berth::csi::error_chain(source)),
        None => e.message().to_string(),
    };
    ApiError {
        code: e.code(),
        message,
    }
    .into()
}
