//! `berth snapshot ...`: take, list, inspect and delete snapshots through
//! the berth.v1 API. A snapshot belongs to the volume it is of; restore one
//! with `berth volume create NAME --from-snapshot SNAPSHOT`.

mod group;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use berth_proto::berth::v1 as api;
use clap::Subcommand;
use serde::Serialize;

use crate::client::{ApiArgs, connect, grpc};
use crate::commands::volume::WaitArgs;
use crate::output::{Output, say};

#[derive(Debug, Subcommand)]
pub enum SnapshotCommand {
    /// Take a snapshot of a volume (CreateSnapshot; the plugin must offer CREATE_DELETE_SNAPSHOT).
    #[command(after_help = "Example:\n  berth snapshot create db-monday --volume db --wait")]
    Create {
        /// The snapshot's name.
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
    Get {
        /// The snapshot's name.
        name: String,
    },
    /// Delete a snapshot on the plugin (DeleteSnapshot).
    Delete {
        /// The snapshot's name.
        name: String,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Group snapshots: several volumes of one plugin snapshotted together
    /// (the plugin must offer CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT).
    #[command(subcommand)]
    Group(crate::commands::snapshot::group::GroupCommand),
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
        Output::Json => crate::output::print_json(&view(s)),
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

pub(super) use crate::client::Client;

/// Asks `get` for one thing by name, each time it is called.
pub(super) fn fetch<Fut>(
    client: &Client,
    name: &str,
    get: impl Fn(Client, String) -> Fut,
) -> impl FnMut() -> Fut {
    let (client, name) = (client.clone(), name.to_string());
    move || get(client.clone(), name.clone())
}

async fn get_snapshot(mut client: Client, name: String) -> Result<api::Snapshot, tonic::Status> {
    client
        .get_snapshot(api::GetSnapshotRequest { name })
        .await
        .map(tonic::Response::into_inner)
}

pub async fn run(cmd: SnapshotCommand, api: ApiArgs, output: Output) -> anyhow::Result<ExitCode> {
    let mut client = connect(&api).await?;
    match cmd {
        SnapshotCommand::Group(cmd) => crate::commands::snapshot::group::run(cmd, client, output).await,
        SnapshotCommand::Create { name, volume, wait } => {
            let s = client
                .create_snapshot(api::CreateSnapshotRequest {
                    name: name.clone(),
                    volume,
                })
                .await
                .map_err(grpc)?
                .into_inner();
            until(
                s,
                &name,
                &wait,
                output,
                fetch(&client, &name, get_snapshot),
                |s: Option<&api::Snapshot>| s.is_some_and(|s| s.state == "ready"),
            )
            .await
        }
        SnapshotCommand::Delete { name, wait } => {
            let s = client
                .delete_snapshot(api::DeleteSnapshotRequest { name: name.clone() })
                .await
                .map_err(grpc)?
                .into_inner();
            until(
                s,
                &name,
                &wait,
                output,
                fetch(&client, &name, get_snapshot),
                |s: Option<&api::Snapshot>| s.is_none(),
            )
            .await
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
                Output::Json => crate::output::print_json(&all.iter().map(view).collect::<Vec<_>>())?,
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

/// Something `until` waits on: a snapshot or a group snapshot.
pub(super) trait Watched {
    fn line(&self) -> String;
    fn failure(&self) -> &str;
    fn print_json(&self) -> anyhow::Result<()>;
    /// In full, as `get` prints it.
    fn print(&self, output: Output) -> anyhow::Result<()>;
}

impl Watched for api::Snapshot {
    fn line(&self) -> String {
        one_line(self)
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

/// The answer to a request, printed; with `--wait`, polls with `fetch`
/// until `done` (it answers `None` once the thing is gone), printing each
/// change; a give-up ends the wait with failure.
pub(super) async fn until<T: Watched, Fut>(
    answer: T,
    name: &str,
    wait: &WaitArgs,
    output: Output,
    mut fetch: impl FnMut() -> Fut,
    done: impl Fn(Option<&T>) -> bool,
) -> anyhow::Result<ExitCode>
where
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    if !wait.wait {
        answer.print(output)?;
        return Ok(ExitCode::SUCCESS);
    }
    let timeout = wait.timeout;
    let started = Instant::now();
    let mut last = String::new();
    loop {
        let s = match fetch().await {
            Ok(s) => Some(s),
            Err(e) if e.code() == tonic::Code::NotFound => None,
            Err(e) => return Err(grpc(e)),
        };
        let line = s
            .as_ref()
            .map_or_else(|| format!("{name}: deleted"), Watched::line);
        if line != last && output == Output::Text {
            say!("{line}");
            last = line;
        }
        let failed = s.as_ref().is_some_and(|s| !s.failure().is_empty());
        if done(s.as_ref()) || failed {
            if output == Output::Json {
                match &s {
                    Some(s) => s.print_json()?,
                    None => {
                        crate::output::print_json(&serde_json::json!({ "name": name, "state": "deleted" }))?
                    }
                }
            }
            return Ok(if failed {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            });
        }
        if started.elapsed() > timeout {
            anyhow::bail!(
                "waited {} for {name}; it stands at: {last} (--timeout waits longer)",
                humantime::format_duration(timeout)
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
