//! `berth cluster token`: a join token for a new agent.

use std::process::ExitCode;
use std::time::Duration;

use berth_proto::berth::v1 as api;
use clap::Subcommand;

use super::client::{ApiArgs, connect, grpc};
use super::{Output, say};

#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Print a join token: an agent gives it once (`token` in agent.toml, or
    /// `berth agent --token`) to get its certificate. It carries the cluster
    /// CA's fingerprint, so the agent checks the server before sending anything.
    /// Keep it secret until it expires.
    Token {
        /// How long the token can be used to join (at most 30 days).
        #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
        ttl: Duration,
    },
}

pub async fn run(command: ClusterCommand, api: ApiArgs, output: Output) -> anyhow::Result<ExitCode> {
    let ClusterCommand::Token { ttl } = command;
    let mut client = connect(&api.api).await?;
    let t = client
        .create_join_token(api::CreateJoinTokenRequest {
            ttl_seconds: ttl.as_secs().max(1),
        })
        .await
        .map_err(grpc)?
        .into_inner();
    match output {
        Output::Json => super::print_json(&serde_json::json!({
            "token": t.token,
            "address": t.address,
            "expires_unix": t.expires_unix,
        }))?,
        Output::Text => {
            say!("{}", t.token);
            eprintln!(
                "server: https://{} (agent.toml: server = \"https://<this host>:<port>\"); valid for {}",
                t.address,
                humantime::format_duration(ttl)
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
