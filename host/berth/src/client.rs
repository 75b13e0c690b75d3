//! The CLI's side of the berth.v1 API: where it listens, connecting, and
//! errors as operators read them.

use berth::csi::Endpoint;
use berth_proto::berth::v1::berth_client::BerthClient;
use clap::Args;
use tonic::transport::Channel;

/// Where the API listens; `berth serve` puts it beside its state file.
#[derive(Debug, Clone, Args)]
pub struct ApiArgs {
    /// The API socket of `berth serve`; with several servers on this machine,
    /// their sockets separated by commas, tried in turn (any of them answers:
    /// followers pass calls on to the leader).
    #[arg(long, global = true, env = "BERTH_API", default_value = "berth-state/berth.sock", value_parser = Endpoint::parse, value_delimiter = ',')]
    pub api: Vec<Endpoint>,
}

/// A client of the first of `apis` that accepts a connection.
/// The largest answer the CLI reads from the API.
const MAX_ANSWER: usize = 1 << 30;

pub async fn connect(apis: &[Endpoint]) -> anyhow::Result<BerthClient<Channel>> {
    let mut failures = Vec::new();
    for api in apis {
        match reachable(api) {
            Ok(()) => {
                // The server is this machine's own: a list of many volumes may
                // pass tonic's default 4 MiB, and must still be read.
                return Ok(BerthClient::new(berth::csi::unix_channel(api.path()))
                    .max_decoding_message_size(MAX_ANSWER));
            }
            Err(e) => failures.push(e),
        }
    }
    match failures.len() {
        1 => Err(anyhow::Error::msg(failures.remove(0))),
        _ => anyhow::bail!("no Berth API answered: {}", failures.join("; ")),
    }
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
    ApiError {
        code: e.code(),
        message: e.message().to_string(),
    }
    .into()
}
