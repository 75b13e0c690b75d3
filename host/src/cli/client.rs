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
    if !api.path().exists() {
        anyhow::bail!(
            "no Berth API at {} (is `berth serve` running? set --api or BERTH_API)",
            api.path().display()
        );
    }
    Ok(BerthClient::new(berth::csi::unix_channel(api.path())))
}

pub fn grpc(e: tonic::Status) -> anyhow::Error {
    anyhow::anyhow!("{}: {}", berth_proto::code::name(e.code()), e.message())
}
