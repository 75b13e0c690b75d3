//! `berth snapshot ...`: take, list, inspect and delete snapshots through
//! the berth.v1 API. A snapshot belongs to the volume it is of; restore one
//! with `berth volume create NAME --from-snapshot SNAPSHOT`.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use berth_proto::berth::v1 as api;
use clap::Subcommand;
use serde::Serialize;

use super::client::{ApiArgs, connect, grpc};
use super::volume::WaitArgs;
use super::{Output, say};

#[derive(Debug, Subcommand)]
pub enum SnapshotCommand {
    /// Take a snapshot of a volume (CreateSnapshot; the plugin must offer CREATE_DELETE_SNAPSHOT).
    #[command(after_help = "Example:\n  berth snapshot create db-monday --volume db --wait")]
    Create {
        name: String,
        /// The volume to take it of.
        #[arg(long)]
        volume: String,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Every snapshot, one line each.
    List {
        /// Only this volume's.
        #[arg(long)]
        volume: Option<String>,
    },
    /// One snapshot in full.
    Get { name: String },
    /// Delete a snapshot on the plugin (DeleteSnapshot).
    Delete {
        name: String,
        #[command(flatten)]
        wait: WaitArgs,
    },
}

#[derive(Serialize)]
struct SnapshotView {
    name: String,
    volume: String,
    state: String,
    csi_name: String,
    snapshot_id: String,
    size_bytes: i64,
    created_ms: u64,
    retrying: String,
    failure: String,
}

fn view(s: &api::Snapshot) -> SnapshotView {
    SnapshotView {
        name: s.name.clone(),
        volume: s.volume.clone(),
        state: s.state.clone(),
        csi_name: s.csi_name.clone(),
        snapshot_id: s.snapshot_id.clone(),
        size_bytes: s.size_bytes,
        created_ms: s.created_ms,
        retrying: s.retrying.clone(),
        failure: s.failure.clone(),
    }
}

fn one_line(s: &api::Snapshot) -> String {
    let mut line = format!("{:<24} {:<24} {:<9} {}", s.name, s.volume, s.state, s.snapshot_id);
    if !s.failure.is_empty() {
        line.push_str(&format!("  failed: {}", s.failure));
    } else if !s.retrying.is_empty() {
        line.push_str(&format!("  retrying: {}", s.retrying));
    }
    line.trim_end().to_string()
}

fn print(s: &api::Snapshot, output: Output) -> anyhow::Result<()> {
    match output {
        Output::Json => super::print_json(&view(s)),
        Output::Text => {
            let row = |k: &str, v: &str| {
                if !v.is_empty() {
                    say!("{k:<14}{v}");
                }
            };
            row("name", &s.name);
            row("volume", &s.volume);
            row("state", &s.state);
            row("csi name", &s.csi_name);
            row("snapshot id", &s.snapshot_id);
            if s.size_bytes > 0 {
                row("size", &berth::model::units::format_bytes(s.size_bytes as usize));
            }
            row("retrying", &s.retrying);
            row("failed", &s.failure);
            Ok(())
        }
    }
}

pub async fn run(cmd: SnapshotCommand, api: ApiArgs, output: Output) -> anyhow::Result<ExitCode> {
    let mut client = connect(&api.api).await?;
    match cmd {
        SnapshotCommand::Create { name, volume, wait } => {
            let s = client
                .create_snapshot(api::CreateSnapshotRequest {
                    name: name.clone(),
                    volume,
                })
                .await
                .map_err(grpc)?
                .into_inner();
            if !wait.wait {
                print(&s, output)?;
                return Ok(ExitCode::SUCCESS);
            }
            until(&mut client, &name, wait.timeout, output, |s| {
                s.is_some_and(|s| s.state == "ready")
            })
            .await
        }
        SnapshotCommand::Delete { name, wait } => {
            let s = client
                .delete_snapshot(api::DeleteSnapshotRequest { name: name.clone() })
                .await
                .map_err(grpc)?
                .into_inner();
            if !wait.wait {
                print(&s, output)?;
                return Ok(ExitCode::SUCCESS);
            }
            until(&mut client, &name, wait.timeout, output, |s| s.is_none()).await
        }
        SnapshotCommand::Get { name } => {
            let s = client
                .get_snapshot(api::GetSnapshotRequest { name })
                .await
                .map_err(grpc)?
                .into_inner();
            print(&s, output)?;
            Ok(ExitCode::SUCCESS)
        }
        SnapshotCommand::List { volume } => {
            let all = client
                .list_snapshots(api::ListSnapshotsRequest {
                    volume: volume.unwrap_or_default(),
                })
                .await
                .map_err(grpc)?
                .into_inner()
                .snapshots;
            match output {
                Output::Json => super::print_json(&all.iter().map(view).collect::<Vec<_>>())?,
                Output::Text => {
                    say!("{:<24} {:<24} {:<9} SNAPSHOT ID", "NAME", "VOLUME", "STATE");
                    for s in &all {
                        say!("{}", one_line(s));
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Polls the snapshot until `done` (it is `None` once gone), printing each
/// change; a give-up ends the wait with failure.
async fn until(
    client: &mut api::berth_client::BerthClient<tonic::transport::Channel>,
    name: &str,
    timeout: Duration,
    output: Output,
    done: impl Fn(Option<&api::Snapshot>) -> bool,
) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let mut last = String::new();
    loop {
        let s = match client
            .get_snapshot(api::GetSnapshotRequest { name: name.into() })
            .await
        {
            Ok(s) => Some(s.into_inner()),
            Err(e) if e.code() == tonic::Code::NotFound => None,
            Err(e) => return Err(grpc(e)),
        };
        let line = s.as_ref().map_or_else(|| format!("{name}: deleted"), one_line);
        if line != last && output == Output::Text {
            say!("{line}");
            last = line;
        }
        if done(s.as_ref()) || s.as_ref().is_some_and(|s| !s.failure.is_empty()) {
            if output == Output::Json {
                match &s {
                    Some(s) => super::print_json(&view(s))?,
                    None => super::print_json(&serde_json::json!({ "name": name, "state": "deleted" }))?,
                }
            }
            let failed = s.as_ref().is_some_and(|s| !s.failure.is_empty());
            return Ok(if failed {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            });
        }
        if started.elapsed() > timeout {
            anyhow::bail!(
                "{name} did not get there within {}",
                humantime::format_duration(timeout)
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
