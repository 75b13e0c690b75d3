//! `berth cluster token`: join tokens for new agents, listed and revoked.

use std::process::ExitCode;
use std::time::Duration;

use berth_proto::berth::v1 as api;
use clap::{Args, Subcommand};

use crate::client::{ApiArgs, connect, grpc};
use crate::output::{Output, say};

#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Make a join token: an agent gives it once (`token` in agent.toml, or
    /// `berth agent --token`) to get its certificate. It carries the cluster
    /// CA's fingerprint, so the agent checks the server before sending
    /// anything. The server keeps only its hash; it is shown once.
    #[command(args_conflicts_with_subcommands = true)]
    Token {
        #[command(subcommand)]
        action: Option<TokenAction>,
        #[command(flatten)]
        create: CreateToken,
    },
}

#[derive(Debug, Args)]
pub struct CreateToken {
    /// The one node the token lets join (used once).
    #[arg(long, conflicts_with = "uses")]
    node: Option<String>,
    /// Instead of --node: how many new nodes may join with the token.
    #[arg(long)]
    uses: Option<u32>,
    /// With --node: the token may take over that node's identity when it has
    /// joined before (a lost certificate, a rebuilt machine); its old
    /// certificate is revoked and a live session ended.
    #[arg(long, requires = "node")]
    replace: bool,
    /// How long the token can be used to join (at most the server's
    /// join_token_max_ttl, 24h by default).
    #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
    ttl: Duration,
}

#[derive(Debug, Subcommand)]
pub enum TokenAction {
    /// The live tokens: id, node (or uses left), expiry. Never the secrets.
    List,
    /// Remove a token: no agent can join with it from now on.
    Revoke {
        /// The token's id, as `list` shows it.
        id: String,
    },
}

pub async fn run(command: ClusterCommand, api: ApiArgs, output: Output) -> anyhow::Result<ExitCode> {
    let ClusterCommand::Token { action, create } = command;
    let mut client = connect(&api).await?;
    match action {
        None => {
            let t = client
                .create_join_token(api::CreateJoinTokenRequest {
                    ttl_seconds: create.ttl.as_secs().max(1),
                    node: create.node.clone().unwrap_or_default(),
                    uses: create.uses.unwrap_or(0),
                    replace: create.replace,
                })
                .await
                .map_err(grpc)?
                .into_inner();
            match output {
                Output::Json => crate::output::print_json(&serde_json::json!({
                    "token": t.token,
                    "id": t.id,
                    "address": t.address,
                    "expires_unix": t.expires_unix,
                }))?,
                Output::Text => {
                    say!("{}", t.token);
                    let for_whom = match (&create.node, create.uses) {
                        (Some(node), _) => format!("node {}", berth::model::text::printable(node)),
                        (None, Some(n)) => format!("{n} new node(s)"),
                        (None, None) => "?".into(),
                    };
                    eprintln!(
                        "token {} for {for_whom}, valid for {}; server: https://{} (agent.toml: server = \"https://<this host>:<port>\")",
                        t.id,
                        humantime::format_duration(create.ttl),
                        t.address,
                    );
                }
            }
        }
        Some(TokenAction::List) => {
            let tokens = client
                .list_join_tokens(api::ListJoinTokensRequest {})
                .await
                .map_err(grpc)?
                .into_inner()
                .tokens;
            match output {
                Output::Json => crate::output::print_json(
                    &tokens
                        .iter()
                        .map(|t| {
                            serde_json::json!({
                                "id": t.id,
                                "node": (!t.node.is_empty()).then_some(&t.node),
                                "uses_left": t.uses_left,
                                "replace": t.replace,
                                "created_unix": t.created_unix,
                                "expires_unix": t.expires_unix,
                            })
                        })
                        .collect::<Vec<_>>(),
                )?,
                Output::Text => {
                    say!(
                        "{:<18} {:<24} {:<9} {:<8} EXPIRES",
                        "ID",
                        "NODE",
                        "USES LEFT",
                        "REPLACE"
                    );
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_secs());
                    for t in &tokens {
                        let node = match t.node.as_str() {
                            "" => "(any new node)".to_string(),
                            n => n.to_string(),
                        };
                        let expires = match t.expires_unix.checked_sub(now) {
                            Some(left) if left > 0 => {
                                format!("in {}", humantime::format_duration(Duration::from_secs(left)))
                            }
                            _ => "expired".into(),
                        };
                        say!(
                            "{:<18} {:<24} {:<9} {:<8} {expires}",
                            t.id,
                            node,
                            t.uses_left,
                            if t.replace { "yes" } else { "no" }
                        );
                    }
                }
            }
        }
        Some(TokenAction::Revoke { id }) => {
            client
                .revoke_join_token(api::RevokeJoinTokenRequest { id: id.clone() })
                .await
                .map_err(grpc)?;
            match output {
                Output::Json => crate::output::print_json(&serde_json::json!({ "id": id, "revoked": true }))?,
                Output::Text => say!("join token {id} revoked"),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
