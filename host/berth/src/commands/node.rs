//! `berth node list`: nodes and their CSI node plugins.

use std::collections::BTreeMap;
use std::process::ExitCode;

use berth_proto::berth::v1 as api;
use clap::Subcommand;
use serde::Serialize;

use crate::client::{ApiArgs, connect, grpc};
use crate::output::{Output, say};

#[derive(Serialize)]
struct NodeView {
    name: String,
    /// ready, down or unknown.
    state: String,
    /// Unix milliseconds; absent when not heard from since the server started.
    last_seen_unix_ms: Option<u64>,
    labels: BTreeMap<String, String>,
    plugins: Vec<NodePluginView>,
}

#[derive(Serialize)]
struct NodePluginView {
    plugin: String,
    node_id: String,
    health: String,
    reason: String,
    max_volumes: i64,
    published_volumes: u64,
    topology: BTreeMap<String, String>,
}

#[derive(Debug, Subcommand)]
pub enum NodeCommand {
    /// Every node with its state (ready, down, unknown, forgotten), when it was last
    /// seen, and its plugins' node ids, health, topology and load.
    List,
    /// Keep placement away from a node and unpublish everything on it.
    Drain {
        /// The node's name.
        name: String,
        /// Let placement use the node again (what is unpublished stays so).
        #[arg(long)]
        undo: bool,
    },
    /// DANGEROUS: declare a node dead. Its node-side unpublish and unstage are
    /// skipped and ControllerUnpublish runs, so its volumes can be published
    /// elsewhere even if the node is in fact alive and writing to them. Its
    /// agent is refused from now on. Needs --force.
    Forget {
        /// The node's name.
        name: String,
        /// Yes, the node is gone for good.
        #[arg(long)]
        force: bool,
    },
    /// Remove a node nothing is published on any more (drained or forgotten).
    Remove {
        /// The node's name.
        name: String,
    },
}

pub async fn run(command: NodeCommand, api: ApiArgs, output: Output) -> anyhow::Result<ExitCode> {
    use NodeCommand as C;
    let mut client = connect(&api).await?;
    let (name, changed, what) = match command {
        C::List => return list(api, output).await,
        C::Drain { name, undo } => {
            let r = client
                .drain_node(api::DrainNodeRequest {
                    name: name.clone(),
                    undo,
                })
                .await;
            let what = match undo {
                true => Said::Undrained,
                false => Said::Undoing,
            };
            (name, r, what)
        }
        C::Forget { name, force } => {
            let r = client
                .forget_node(api::ForgetNodeRequest {
                    name: name.clone(),
                    force,
                })
                .await;
            (name, r, Said::Undoing)
        }
        C::Remove { name } => {
            let r = client
                .remove_node(api::RemoveNodeRequest { name: name.clone() })
                .await;
            (name, r, Said::Undoing)
        }
    };
    let publications = changed.map_err(grpc)?.into_inner().publications;
    match output {
        Output::Json => {
            crate::output::print_json(&serde_json::json!({ "node": name, "publications": publications }))?
        }
        Output::Text => match what {
            Said::Undoing => say!("node {name}: {publications} publication(s) being undone"),
            Said::Undrained => say!("node {name}: no longer draining; it takes new publications again"),
        },
    }
    Ok(ExitCode::SUCCESS)
}

/// What a node command's answer means to the person who ran it.
enum Said {
    /// Publications are being undone (drain, forget, remove).
    Undoing,
    /// A drain was called off (`drain --undo`): nothing is undone.
    Undrained,
}

async fn list(api: ApiArgs, output: Output) -> anyhow::Result<ExitCode> {
    let mut client = connect(&api).await?;
    let list = client
        .list_nodes(api::ListNodesRequest {})
        .await
        .map_err(grpc)?
        .into_inner();
    let views: Vec<NodeView> = list
        .nodes
        .into_iter()
        .map(|n| NodeView {
            name: n.name,
            state: if n.draining {
                format!("{} (draining)", n.state)
            } else {
                n.state
            },
            last_seen_unix_ms: (n.last_seen_unix_ms > 0).then_some(n.last_seen_unix_ms),
            labels: n.labels.into_iter().collect(),
            plugins: n
                .plugins
                .into_iter()
                .map(|p| NodePluginView {
                    plugin: p.plugin,
                    node_id: p.node_id,
                    health: p.health,
                    reason: p.reason,
                    max_volumes: p.max_volumes,
                    published_volumes: p.published_volumes,
                    topology: p
                        .topology
                        .map(|t| t.segments.into_iter().collect())
                        .unwrap_or_default(),
                })
                .collect(),
        })
        .collect();
    match output {
        Output::Json => crate::output::print_json(&views)?,
        Output::Text => {
            say!(
                "{:<12} {:<16} {:<10} {:<12} {:<12} {:<10} {:<8} {:<22} LABELS",
                "NODE",
                "STATE",
                "LAST SEEN",
                "PLUGIN",
                "NODE ID",
                "HEALTH",
                "VOLUMES",
                "TOPOLOGY"
            );
            for n in &views {
                let labels = n
                    .labels
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(",");
                let seen = n.last_seen_unix_ms.map_or_else(|| "never".to_string(), ago);
                if n.plugins.is_empty() {
                    say!("{:<12} {:<16} {:<10} {:<12}", n.name, n.state, seen, "-");
                }
                for p in &n.plugins {
                    let max = if p.max_volumes > 0 {
                        p.max_volumes.to_string()
                    } else {
                        "-".into()
                    };
                    let topo = p
                        .topology
                        .iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect::<Vec<_>>()
                        .join(",");
                    say!(
                        "{:<12} {:<16} {:<10} {:<12} {:<12} {:<10} {:<8} {:<22} {labels}",
                        n.name,
                        n.state,
                        seen,
                        p.plugin,
                        p.node_id,
                        p.health,
                        format!("{}/{max}", p.published_volumes),
                        topo
                    );
                    if !p.reason.is_empty() {
                        say!("{:<12} {}", "", p.reason);
                    }
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// How long ago a time in unix milliseconds was, briefly: `3s ago`.
fn ago(unix_ms: u64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let secs = now.saturating_sub(unix_ms) / 1000;
    match secs {
        0..60 => format!("{secs}s ago"),
        60..3600 => format!("{}m ago", secs / 60),
        _ => format!("{}h ago", secs / 3600),
    }
}
