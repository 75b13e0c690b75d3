//! `berth snapshot group ...`: snapshots of several volumes taken together
//! (CSI group snapshots). Restore a member with `berth volume create NAME
//! --from-snapshot GROUP/VOLUME`.

use std::process::ExitCode;

use berth_proto::berth::v1 as api;
use clap::Subcommand;
use serde::Serialize;

use crate::client::grpc;
use crate::commands::snapshot::{Client, Watched, fetch, until};
use crate::commands::volume::WaitArgs;
use crate::output::{Output, say};

#[derive(Debug, Subcommand)]
pub enum GroupCommand {
    /// Snapshot several volumes together (CreateVolumeGroupSnapshot); the
    /// group is taken once, however often this is asked or Berth restarts.
    #[command(after_help = "Example:\n  berth snapshot group create nightly --volume db --volume wal --wait")]
    Create {
        /// The group snapshot's name.
        name: String,
        /// A volume to include; repeatable, all on one plugin.
        #[arg(long = "volume", required = true)]
        volumes: Vec<String>,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Every group snapshot, one line each.
    List,
    /// One group snapshot in full, with what restores each member.
    Get {
        /// The group snapshot's name.
        name: String,
    },
    /// Delete a group snapshot and its members' snapshots (DeleteVolumeGroupSnapshot).
    Delete {
        /// The group snapshot's name.
        name: String,
        #[command(flatten)]
        wait: WaitArgs,
    },
}

#[derive(Serialize)]
struct GroupView {
    name: String,
    state: String,
    csi_name: String,
    group_snapshot_id: String,
    members: Vec<MemberView>,
    requested_ms: u64,
    retrying: String,
    failure: String,
}

#[derive(Serialize)]
struct MemberView {
    volume: String,
    snapshot_id: String,
    ready: bool,
    size_bytes: i64,
    restore_as: String,
}

fn view(g: &api::GroupSnapshot) -> GroupView {
    GroupView {
        name: g.name.clone(),
        state: g.state.clone(),
        csi_name: g.csi_name.clone(),
        group_snapshot_id: g.group_snapshot_id.clone(),
        members: g
            .members
            .iter()
            .map(|m| MemberView {
                volume: m.volume.clone(),
                snapshot_id: m.snapshot_id.clone(),
                ready: m.ready,
                size_bytes: m.size_bytes,
                restore_as: m.restore_as.clone(),
            })
            .collect(),
        requested_ms: g.requested_ms,
        retrying: g.retrying.clone(),
        failure: g.failure.clone(),
    }
}

impl Watched for api::GroupSnapshot {
    fn line(&self) -> String {
        let volumes: Vec<&str> = self.members.iter().map(|m| m.volume.as_str()).collect();
        let mut line = format!("{:<24} {:<9} {}", self.name, self.state, volumes.join(","));
        if !self.failure.is_empty() {
            line.push_str(&format!("  failed: {}", self.failure));
        } else if !self.retrying.is_empty() {
            line.push_str(&format!("  retrying: {}", self.retrying));
        }
        line
    }
    fn failure(&self) -> &str {
        &self.failure
    }
    fn print_json(&self) -> anyhow::Result<()> {
        crate::output::print_json(&view(self))
    }
    fn print(&self, output: Output) -> anyhow::Result<()> {
        print(self, output)
    }
}

fn print(g: &api::GroupSnapshot, output: Output) -> anyhow::Result<()> {
    if output == Output::Json {
        return g.print_json();
    }
    let row = |k: &str, v: &str| {
        if !v.is_empty() {
            say!("{k:<14}{v}");
        }
    };
    row("name", &g.name);
    row("state", &g.state);
    row("csi name", &g.csi_name);
    row("group id", &g.group_snapshot_id);
    for m in &g.members {
        let ready = if m.ready { "ready" } else { "not ready" };
        let id = if m.snapshot_id.is_empty() {
            "not taken yet"
        } else {
            &m.snapshot_id
        };
        row(
            "member",
            &format!("{}: {id} ({ready}); restore as {}", m.volume, m.restore_as),
        );
    }
    row("retrying", &g.retrying);
    row("failed", &g.failure);
    Ok(())
}

async fn get_group(mut client: Client, name: String) -> Result<api::GroupSnapshot, tonic::Status> {
    client
        .get_group_snapshot(api::GetGroupSnapshotRequest { name })
        .await
        .map(tonic::Response::into_inner)
}

pub async fn run(cmd: GroupCommand, mut client: Client, output: Output) -> anyhow::Result<ExitCode> {
    match cmd {
        GroupCommand::Create { name, volumes, wait } => {
            let g = client
                .create_group_snapshot(api::CreateGroupSnapshotRequest {
                    name: name.clone(),
                    volumes,
                })
                .await
                .map_err(grpc)?
                .into_inner();
            let ready = |g: Option<&api::GroupSnapshot>| g.is_some_and(|g| g.state == "ready");
            until(g, &name, &wait, output, fetch(&client, &name, get_group), ready).await
        }
        GroupCommand::Delete { name, wait } => {
            let g = client
                .delete_group_snapshot(api::DeleteGroupSnapshotRequest { name: name.clone() })
                .await
                .map_err(grpc)?
                .into_inner();
            let gone = |g: Option<&api::GroupSnapshot>| g.is_none();
            until(g, &name, &wait, output, fetch(&client, &name, get_group), gone).await
        }
        GroupCommand::Get { name } => {
            let g = client
                .get_group_snapshot(api::GetGroupSnapshotRequest { name })
                .await
                .map_err(grpc)?
                .into_inner();
            print(&g, output)?;
            Ok(ExitCode::SUCCESS)
        }
        GroupCommand::List => {
            let all = client
                .list_group_snapshots(api::ListGroupSnapshotsRequest {})
                .await
                .map_err(grpc)?
                .into_inner()
                .groups;
            match output {
                Output::Json => crate::output::print_json(&all.iter().map(view).collect::<Vec<_>>())?,
                Output::Text => {
                    say!("{:<24} {:<9} VOLUMES", "NAME", "STATE");
                    for g in &all {
                        say!("{}", g.line());
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
