//! The CLI's side of the berth.v1 API: where it listens, connecting, and
//! errors as operators read them.

use berth::csi::Endpoint;
use berth_proto::berth::v1::berth_client::BerthClient;
use clap::Args;
use tonic::transport::Channel;

/// Where the API listens; `berth serve` puts it beside its state file.
#[derive(Debug, Clone, Args)]
pub struct ApiArgs {
    /// The API socket of `berth serve`.
    #[arg(long, global = true, env = "BERTH_API", default_value = "berth-state/berth.sock", value_parser = Endpoint::parse)]
    pub api: Endpoint,
}

pub async fn connect(api: &Endpoint) -> anyhow::Result<BerthClient<Channel>> {
    let path = api.path();
    // The channel connects lazily; a first connection here turns the usual
    // mistakes into messages that say what to do.
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => anyhow::bail!(
            "no Berth API at {} (is `berth serve` running? set --api or BERTH_API)",
            path.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => anyhow::bail!(
            "no permission to connect to the Berth API at {}: the socket is for the user running \
             `berth serve` (mode 0600 unless socket_mode in berth.toml says otherwise); run as that user",
            path.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => anyhow::bail!(
            "nothing listens on {} (a socket left by a `berth serve` that stopped?)",
            path.display()
        ),
        Err(e) => anyhow::bail!("connecting to the Berth API at {}: {e}", path.display()),
    }
    Ok(BerthClient::new(berth::csi::unix_channel(path)))
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
