//! `berth namespace`: what namespaces hold and may hold.

use std::process::ExitCode;

use berth_proto::berth::v1 as api;
use clap::Subcommand;
use serde::Serialize;

use crate::client::{ApiArgs, connect, grpc};
use crate::output::{Output, print_json, say};

#[derive(Debug, Subcommand)]
pub enum NamespaceCommand {
    /// What the namespace (-n; `*`: every namespace you may list) holds:
    /// volumes, the bytes they ask for, snapshots, and its quota.
    Status,
    /// Set what a namespace may hold. A limit not given is no limit; with
    /// none, the quota is removed. A quota lowered below what the namespace
    /// holds refuses new requests and touches nothing that exists.
    Quota {
        /// The namespace.
        name: String,
        /// Volumes at most.
        #[arg(long)]
        volumes: Option<u64>,
        /// Bytes its volumes may ask for, in all (e.g. 100GiB).
        #[arg(long, allow_hyphen_values = true, value_parser = berth::model::units::parse_size_flag)]
        bytes: Option<usize>,
        /// Snapshots at most.
        #[arg(long)]
        snapshots: Option<u64>,
    },
}

#[derive(Serialize)]
struct StatusView {
    namespace: String,
    volumes: u64,
    bytes: u64,
    snapshots: u64,
    /// Absent limits are no limits.
    quota: QuotaView,
}

#[derive(Serialize)]
struct QuotaView {
    #[serde(skip_serializing_if = "Option::is_none")]
    volumes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    snapshots: Option<u64>,
}

fn view(s: api::NamespaceStatus) -> StatusView {
    let q = s.quota.unwrap_or_default();
    StatusView {
        namespace: s.namespace,
        volumes: s.volumes,
        bytes: s.bytes,
        snapshots: s.snapshots,
        quota: QuotaView {
            volumes: q.volumes,
            bytes: q.bytes,
            snapshots: q.snapshots,
        },
    }
}

fn of(used: u64, limit: Option<u64>) -> String {
    match limit {
        Some(limit) => format!("{used}/{limit}"),
        None => used.to_string(),
    }
}

fn bytes_of(used: u64, limit: Option<u64>) -> String {
    let shown = |n: u64| berth::model::units::format_bytes(n as usize);
    match limit {
        Some(limit) => format!("{}/{}", shown(used), shown(limit)),
        None => shown(used),
    }
}

fn line(v: &StatusView) -> String {
    format!(
        "{:<24} {:<12} {:<24} {}",
        v.namespace,
        of(v.volumes, v.quota.volumes),
        bytes_of(v.bytes, v.quota.bytes),
        of(v.snapshots, v.quota.snapshots)
    )
}

pub async fn run(command: NamespaceCommand, api: ApiArgs, output: Output) -> anyhow::Result<ExitCode> {
    let mut client = connect(&api).await?;
    let views: Vec<StatusView> = match command {
        NamespaceCommand::Status => client
            .list_namespaces(api::ListNamespacesRequest {})
            .await
            .map_err(grpc)?
            .into_inner()
            .namespaces
            .into_iter()
            .map(view)
            .collect(),
        NamespaceCommand::Quota {
            name,
            volumes,
            bytes,
            snapshots,
        } => {
            let request = api::SetNamespaceQuotaRequest {
                namespace: name,
                quota: Some(api::NamespaceQuota {
                    volumes,
                    bytes: bytes.map(|b| b as u64),
                    snapshots,
                }),
            };
            vec![view(
                client
                    .set_namespace_quota(request)
                    .await
                    .map_err(grpc)?
                    .into_inner(),
            )]
        }
    };
    match output {
        Output::Json => print_json(&views)?,
        Output::Text => {
            say!("{:<24} {:<12} {:<24} SNAPSHOTS", "NAMESPACE", "VOLUMES", "BYTES");
            views.iter().for_each(|v| say!("{}", line(v)));
        }
    }
    Ok(ExitCode::SUCCESS)
}
