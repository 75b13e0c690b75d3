//! `berth acl`: who may do what through the API. `bootstrap` makes the
//! first management token (once); `policy` keeps the rules; `token` makes,
//! lists and revokes the tokens that hold them; `certificate` binds client
//! certificates' subjects to them.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use berth_proto::berth::v1 as api;
use clap::Subcommand;
use serde::Serialize;

use crate::client::{ApiArgs, Client, connect, grpc};
use crate::output::{Output, print_json, say};

#[derive(Debug, Subcommand)]
pub enum AclCommand {
    /// Make the first management token (only while no token exists). Run it
    /// on the server's machine, through the API socket.
    Bootstrap,
    /// ACL policies: rules granting capabilities per namespace
    /// (list, read, write, mount, or deny) and levels in node, plugin,
    /// policy and operator (read, write, deny). Deny wins.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// ACL tokens: what callers of the TLS API present (BERTH_TOKEN).
    #[command(subcommand)]
    Token(TokenCommand),
    /// Client certificates as identities: a subject's common name (of a
    /// certificate from the server's `api_client_ca`) bound to policies.
    #[command(subcommand)]
    Certificate(CertificateCommand),
}

#[derive(Debug, Subcommand)]
pub enum CertificateCommand {
    /// Bind a subject to policies, replacing what it held; its next call
    /// has the new grant.
    Bind {
        /// The certificate subject's common name (CN).
        subject: String,
        /// A policy it holds (repeat for several; at least one).
        #[arg(long = "policy", required = true)]
        policies: Vec<String>,
    },
    /// Every bound subject with its policies.
    List,
    /// Unbind a subject: its certificate is refused from the next call on.
    Unbind {
        /// The certificate subject's common name (CN).
        subject: String,
    },
}

fn certificate_json(c: &api::AclCertificate) -> serde_json::Value {
    serde_json::json!({ "subject": c.subject, "policies": c.policies, "modified_ms": c.modified_ms })
}

fn show_certificate(c: api::AclCertificate, output: Output) -> anyhow::Result<()> {
    match output {
        Output::Json => print_json(&certificate_json(&c))?,
        Output::Text => say!("{:<32} {}", c.subject, c.policies.join(",")),
    }
    Ok(())
}

/// `berth acl certificate ...`.
async fn certificate(command: CertificateCommand, client: &mut Client, output: Output) -> anyhow::Result<()> {
    match command {
        CertificateCommand::Bind { subject, policies } => {
            let request = api::BindAclCertificateRequest { subject, policies };
            let c = client.bind_acl_certificate(request).await.map_err(grpc)?;
            show_certificate(c.into_inner(), output)
        }
        CertificateCommand::Unbind { subject } => {
            let request = api::UnbindAclCertificateRequest { subject };
            let c = client.unbind_acl_certificate(request).await.map_err(grpc)?;
            show_certificate(c.into_inner(), output)
        }
        CertificateCommand::List => {
            let all = client
                .list_acl_certificates(api::ListAclCertificatesRequest {})
                .await
                .map_err(grpc)?
                .into_inner()
                .certificates;
            if output == Output::Json {
                return print_json(&all.iter().map(certificate_json).collect::<Vec<_>>());
            }
            all.into_iter().try_for_each(|c| show_certificate(c, output))
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Make or replace a policy from a TOML file of rules (`-` reads stdin);
    /// tokens holding it get the new rules at once.
    Apply {
        /// The policy's name, as tokens name it.
        name: String,
        /// The rules (TOML), or `-` for stdin.
        file: PathBuf,
        /// What the policy is for, shown by `list`.
        #[arg(long, default_value = "")]
        description: String,
    },
    /// Every policy, by name.
    List,
    /// One policy with its rules.
    Get {
        /// The policy's name.
        name: String,
    },
    /// Delete a policy: the tokens naming it lose what it granted.
    Delete {
        /// The policy's name.
        name: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Make a token; its secret is printed once (Berth keeps only a hash).
    Create {
        /// Who or what it is for (a person, a CI job).
        #[arg(long)]
        name: String,
        /// A policy it holds (repeat for several).
        #[arg(long = "policy")]
        policies: Vec<String>,
        /// It may do everything, as the API socket's user may.
        #[arg(long)]
        management: bool,
        /// How long it lives (e.g. 24h); without: until revoked.
        #[arg(long, value_parser = humantime::parse_duration)]
        ttl: Option<Duration>,
        /// Print the secret alone (for `export BERTH_TOKEN=$(...)`).
        #[arg(long)]
        secret_only: bool,
    },
    /// Every token, by name (accessors, never secrets).
    List,
    /// Revoke a token by its accessor: refused from the next call on.
    Revoke {
        /// The token's accessor (`token list` shows them).
        accessor: String,
    },
    /// The token this command runs with (BERTH_TOKEN).
    #[command(name = "self")]
    Whoami,
}

#[derive(Serialize)]
struct TokenView {
    accessor: String,
    name: String,
    policies: Vec<String>,
    management: bool,
    created_ms: u64,
    /// Absent: until revoked.
    #[serde(skip_serializing_if = "Option::is_none")]
    expires_ms: Option<u64>,
}

fn token_view(t: api::AclToken) -> TokenView {
    TokenView {
        accessor: t.accessor,
        name: t.name,
        policies: t.policies,
        management: t.management,
        created_ms: t.created_ms,
        expires_ms: (t.expires_ms > 0).then_some(t.expires_ms),
    }
}

fn token_line(t: &TokenView) -> String {
    let grants = match t.management {
        true => "management".to_string(),
        false => t.policies.join(","),
    };
    format!("{:<17} {:<24} {grants}", t.accessor, t.name)
}

fn show_token(t: TokenView, output: Output) -> anyhow::Result<()> {
    match output {
        Output::Json => print_json(&t)?,
        Output::Text => say!("{}", token_line(&t)),
    }
    Ok(())
}

fn show_secret(made: api::AclTokenSecret, output: Output, secret_only: bool) -> anyhow::Result<()> {
    if secret_only {
        crate::output::out(&made.secret);
        return Ok(());
    }
    let token = token_view(made.token.unwrap_or_default());
    match output {
        Output::Json => print_json(&serde_json::json!({ "token": token, "secret": made.secret }))?,
        Output::Text => {
            say!("accessor {}", token.accessor);
            say!("secret   {}", made.secret);
            say!("The secret is shown this once (Berth keeps only its hash): give it as BERTH_TOKEN.");
        }
    }
    Ok(())
}

fn show_policy(p: api::AclPolicy, output: Output, rules: bool) -> anyhow::Result<()> {
    match output {
        Output::Json => print_json(&serde_json::json!({
            "name": p.name, "description": p.description, "rules": p.rules, "modified_ms": p.modified_ms,
        }))?,
        Output::Text if rules => say!("# {}: {}\n{}", p.name, p.description, p.rules.trim_end()),
        Output::Text => say!("{:<24} {}", p.name, p.description),
    }
    Ok(())
}

pub async fn run(command: AclCommand, api: ApiArgs, output: Output) -> anyhow::Result<ExitCode> {
    let mut client = connect(&api).await?;
    match command {
        AclCommand::Bootstrap => {
            let made = client
                .bootstrap_acl(api::BootstrapAclRequest {})
                .await
                .map_err(grpc)?;
            show_secret(made.into_inner(), output, false)?;
        }
        AclCommand::Policy(PolicyCommand::Apply {
            name,
            file,
            description,
        }) => {
            let rules = match file.to_str() {
                Some("-") => {
                    std::io::read_to_string(std::io::stdin()).context("reading the rules from stdin")?
                }
                _ => std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?,
            };
            let policy = api::AclPolicy {
                name,
                description,
                rules,
                modified_ms: 0,
            };
            let applied = client
                .apply_acl_policy(api::ApplyAclPolicyRequest { policy: Some(policy) })
                .await
                .map_err(grpc)?;
            show_policy(applied.into_inner(), output, false)?;
        }
        AclCommand::Policy(PolicyCommand::List) => {
            let all = client
                .list_acl_policies(api::ListAclPoliciesRequest {})
                .await
                .map_err(grpc)?
                .into_inner()
                .policies;
            if output == Output::Json {
                let all: Vec<_> = all
                    .into_iter()
                    .map(|p| serde_json::json!({ "name": p.name, "description": p.description, "rules": p.rules }))
                    .collect();
                print_json(&all)?;
            } else {
                all.into_iter().try_for_each(|p| show_policy(p, output, false))?;
            }
        }
        AclCommand::Policy(PolicyCommand::Get { name }) => {
            let p = client
                .get_acl_policy(api::GetAclPolicyRequest { name })
                .await
                .map_err(grpc)?;
            show_policy(p.into_inner(), output, true)?;
        }
        AclCommand::Policy(PolicyCommand::Delete { name }) => {
            let p = client
                .delete_acl_policy(api::DeleteAclPolicyRequest { name })
                .await
                .map_err(grpc)?;
            show_policy(p.into_inner(), output, false)?;
        }
        AclCommand::Token(TokenCommand::Create {
            name,
            policies,
            management,
            ttl,
            secret_only,
        }) => {
            let request = api::CreateAclTokenRequest {
                name,
                policies,
                management,
                ttl_seconds: ttl.map_or(0, |t| t.as_secs().max(1)),
            };
            let made = client.create_acl_token(request).await.map_err(grpc)?;
            show_secret(made.into_inner(), output, secret_only)?;
        }
        AclCommand::Token(TokenCommand::List) => {
            let all: Vec<TokenView> = client
                .list_acl_tokens(api::ListAclTokensRequest {})
                .await
                .map_err(grpc)?
                .into_inner()
                .tokens
                .into_iter()
                .map(token_view)
                .collect();
            match output {
                Output::Json => print_json(&all)?,
                Output::Text => all.iter().for_each(|t| say!("{}", token_line(t))),
            }
        }
        AclCommand::Token(TokenCommand::Revoke { accessor }) => {
            let t = client
                .revoke_acl_token(api::RevokeAclTokenRequest { accessor })
                .await
                .map_err(grpc)?;
            show_token(token_view(t.into_inner()), output)?;
        }
        AclCommand::Certificate(command) => certificate(command, &mut client, output).await?,
        AclCommand::Token(TokenCommand::Whoami) => {
            let t = client
                .acl_token_self(api::AclTokenSelfRequest {})
                .await
                .map_err(grpc)?;
            show_token(token_view(t.into_inner()), output)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
