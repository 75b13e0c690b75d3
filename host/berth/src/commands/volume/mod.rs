//! `berth volume ...`: declare, publish, inspect and delete volumes through
//! the berth.v1 API, and wait for them to get there.

mod explain;
mod health;
mod list;
mod view;
mod wait;

use std::process::ExitCode;
use std::time::Duration;

use berth::model::{PublicationState, VolumeState};
use berth_proto::berth::v1 as api;
use clap::{Args, Subcommand};

use crate::client::{ApiArgs, connect, grpc};
use crate::commands::volume::view::{WithHealth, event_line, event_view, print_volume, view};
use crate::commands::volume::wait::{Goal, wait};
use crate::output::{Output, say};

#[derive(Debug, Subcommand)]
pub enum VolumeCommand {
    /// Declare a volume; Berth names it, creates it, and keeps it.
    Create(Box<CreateArgs>),
    /// All volumes, one line each, by name (asked for a page at a time).
    List(crate::commands::volume::list::ListArgs),
    /// One volume in full, with its latest events.
    Get {
        /// The volume's name.
        name: String,
    },
    /// A volume's story: its latest requests, steps done and steps failed,
    /// with time, gRPC code and message (how many are kept: `events_per_volume`).
    Events {
        /// The volume's name.
        name: String,
    },
    /// Why the volume is as it is: the name naming gave it, where placement
    /// could put it and why not elsewhere (each node's verdict and score),
    /// and the latest retry decisions, each with the module, digest and time.
    Explain {
        /// The volume's name.
        name: String,
    },
    /// Delete on the plugin. A volume published anywhere is refused, naming
    /// the nodes, unless --force.
    Delete {
        /// The volume's name.
        name: String,
        /// Delete it even while published: unpublish it everywhere (the
        /// workloads using it lose it), then delete it.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Publish on a node (placement chooses one when --node is not given).
    Publish {
        /// The volume's name.
        name: String,
        /// The node to publish on [default: placement chooses].
        #[arg(long)]
        node: Option<String>,
        /// Publish it read-only on that node.
        #[arg(long)]
        readonly: bool,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Unpublish from a node (the one it is published on, when there is one only).
    Unpublish {
        /// The volume's name.
        name: String,
        /// The node to unpublish from; needed only when the volume is published on several.
        #[arg(long)]
        node: Option<String>,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Grow a volume (ControllerExpandVolume, then NodeExpandVolume on the
    /// nodes it is published on, when the plugin asks for it).
    Expand {
        /// The volume's name.
        name: String,
        /// The new size (e.g. 2GiB); volumes only grow.
        #[arg(long, allow_hyphen_values = true, value_parser = berth::model::units::parse_size_flag)]
        size: usize,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Change mutable parameters the plugin keeps for the volume
    /// (ControllerModifyVolume; the plugin must offer MODIFY_VOLUME). The
    /// keys given are set; the others stay as they are.
    #[command(after_help = "Example:
  berth volume modify db --parameter iops=3000 --wait")]
    Modify {
        /// The volume's name.
        name: String,
        /// A mutable parameter, KEY=VALUE; repeatable.
        #[arg(long = "parameter", value_parser = kv, required = true)]
        parameters: Vec<(String, String)>,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Take over a volume that exists on the plugin already.
    #[command(after_help = "Example:
  berth volume import legacy-db --plugin hostpath --volume-id hp-0123abcd")]
    Import(Box<ImportArgs>),
    /// Drop a volume from Berth, leaving it on the plugin untouched.
    ///
    /// Refused while the volume is published, has snapshots, or may be
    /// being created: forgetting then would lose track of it.
    Forget {
        /// The volume's name.
        name: String,
    },
    /// Say which nodes' Docker may see and publish a volume.
    ///
    /// A volume made through the API is no Docker's until marked; one made
    /// through a node's Docker is every node's Docker's. Docker users never
    /// remove a volume the API made, nor undo a publication the API asked for.
    #[command(after_help = "Examples:
  berth volume docker pg-data all              # every node's Docker
  berth volume docker pg-data node-a,node-b    # these nodes' Docker only
  berth volume docker pg-data none             # no Docker
  berth volume docker pg-data origin           # as who made it says (the default)")]
    Docker {
        /// The volume's name.
        name: String,
        /// origin, none, all, or node names separated by commas.
        scope: String,
    },
    /// Try a failed volume again.
    Retry {
        /// The volume's name.
        name: String,
        #[command(flatten)]
        wait: WaitArgs,
    },
}

#[derive(Debug, Args)]
pub struct WaitArgs {
    /// Wait until done, printing each state change.
    #[arg(long)]
    pub wait: bool,
    /// How long --wait waits.
    #[arg(long, default_value = "2m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Its name: 1 to 253 letters, digits, `_`, `.` or `-`, starting with a
    /// letter or a digit.
    pub name: String,
    /// The configured plugin that serves it.
    #[arg(long)]
    pub plugin: String,
    /// Capacity it must have at least (e.g. 1GiB).
    #[arg(long, allow_hyphen_values = true, value_parser = berth::model::units::parse_size_flag)]
    pub size: Option<usize>,
    /// Capacity it may have at most.
    #[arg(long, allow_hyphen_values = true, value_parser = berth::model::units::parse_size_flag)]
    pub limit: Option<usize>,
    #[command(flatten)]
    pub access: AccessArgs,
    /// A mount option for the node's mount; repeatable.
    #[arg(long = "mount-flag")]
    pub mount_flags: Vec<String>,
    /// A CSI parameter, KEY=VALUE; repeatable.
    #[arg(long = "param", value_parser = kv)]
    pub params: Vec<(String, String)>,
    /// A parameter the plugin can change later (`berth volume modify`),
    /// KEY=VALUE; repeatable. The plugin must offer MODIFY_VOLUME.
    #[arg(long = "mutable-param", value_parser = kv)]
    pub mutable_params: Vec<(String, String)>,
    /// A label, KEY=VALUE; repeatable.
    #[arg(long = "label", value_parser = kv)]
    pub labels: Vec<(String, String)>,
    /// The name of a secret in the server's secrets_dir.
    #[arg(long)]
    pub secret: Option<String>,
    /// A topology it must be reachable from, k=v[,k=v]; repeatable.
    #[arg(long = "requisite", value_parser = topology)]
    pub requisite: Vec<api::Topology>,
    /// A topology it should be reachable from, k=v[,k=v]; repeatable, best first.
    #[arg(long = "preferred", value_parser = topology)]
    pub preferred: Vec<api::Topology>,
    /// Start from this snapshot's contents (the plugin must offer CREATE_DELETE_SNAPSHOT).
    #[arg(long, conflicts_with = "from_volume")]
    pub from_snapshot: Option<String>,
    /// Start as a copy of this volume (the plugin must offer CLONE_VOLUME).
    #[arg(long)]
    pub from_volume: Option<String>,
    /// Which nodes' Docker may see and publish it: none (the default for
    /// a volume made here), all, or node names separated by commas.
    #[arg(long, default_value = "")]
    pub docker: String,
    #[command(flatten)]
    pub wait: WaitArgs,
}

/// How a volume is used on its nodes, as `create` and `import` take it.
#[derive(Debug, Args)]
pub struct AccessArgs {
    /// How nodes may use it: single-node-writer, single-node-reader-only,
    /// single-node-single-writer, single-node-multi-writer,
    /// multi-node-reader-only, multi-node-single-writer or
    /// multi-node-multi-writer.
    #[arg(long, default_value = "single-node-writer")]
    pub access_mode: String,
    /// A raw block device, not a file system.
    #[arg(long)]
    pub block: bool,
    /// Its file system (e.g. ext4) [default: the plugin's].
    #[arg(long, default_value = "", hide_default_value = true)]
    pub fs_type: String,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// Its name in Berth.
    pub name: String,
    /// The configured plugin that has it.
    #[arg(long)]
    pub plugin: String,
    /// The plugin's id for it.
    #[arg(long)]
    pub volume_id: String,
    #[command(flatten)]
    pub access: AccessArgs,
    /// The name of a secret in the server's secrets_dir.
    #[arg(long)]
    pub secret: Option<String>,
    /// A label, KEY=VALUE; repeatable.
    #[arg(long = "label", value_parser = kv)]
    pub labels: Vec<(String, String)>,
}

fn kv(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("{text:?} is not KEY=VALUE")),
    }
}

fn topology(text: &str) -> Result<api::Topology, String> {
    let segments = text.split(',').map(kv).collect::<Result<_, _>>()?;
    Ok(api::Topology { segments })
}

pub async fn run(cmd: VolumeCommand, api: ApiArgs, output: Output) -> anyhow::Result<ExitCode> {
    let mut client = connect(&api).await?;
    let created = matches!(cmd, VolumeCommand::Create(_));
    let (volume, name, goal, wait_args) = match cmd {
        VolumeCommand::List(args) => {
            crate::commands::volume::list::list(&mut client, &args, output).await?;
            return Ok(ExitCode::SUCCESS);
        }
        VolumeCommand::Events { name } => {
            let v = client
                .get_volume(api::GetVolumeRequest { name })
                .await
                .map_err(grpc)?
                .into_inner();
            match output {
                Output::Json => {
                    crate::output::print_json(&v.events.iter().map(event_view).collect::<Vec<_>>())?
                }
                Output::Text => {
                    for e in &v.events {
                        say!("{}", event_line(e));
                    }
                }
            }
            return Ok(ExitCode::SUCCESS);
        }
        VolumeCommand::Explain { name } => {
            let v = client
                .get_volume(api::GetVolumeRequest { name })
                .await
                .map_err(grpc)?
                .into_inner();
            crate::commands::volume::explain::print(&v, output)?;
            return Ok(ExitCode::SUCCESS);
        }
        VolumeCommand::Get { name } => {
            let v = client
                .get_volume(api::GetVolumeRequest { name: name.clone() })
                .await
                .map_err(grpc)?
                .into_inner();
            // Health is asked of the plugins now; only a created volume has any.
            let health = if v.volume_id.is_empty() {
                None
            } else {
                Some(
                    client
                        .volume_health(api::VolumeHealthRequest { name })
                        .await
                        .map(tonic::Response::into_inner)
                        .map_err(|e| e.message().to_string()),
                )
            };
            match output {
                Output::Json => crate::output::print_json(&WithHealth {
                    volume: view(&v),
                    health: health.as_ref().map(crate::commands::volume::health::view),
                })?,
                Output::Text => {
                    print_volume(&v, output)?;
                    if let Some(h) = &health {
                        crate::commands::volume::health::print(h);
                    }
                }
            }
            return Ok(ExitCode::SUCCESS);
        }
        VolumeCommand::Create(a) => {
            let a = *a;
            let spec = api::VolumeSpec {
                name: a.name.clone(),
                plugin: a.plugin,
                required_bytes: a.size.unwrap_or(0) as i64,
                limit_bytes: a.limit.unwrap_or(0) as i64,
                access_mode: a.access.access_mode,
                block: a.access.block,
                fs_type: a.access.fs_type,
                mount_flags: a.mount_flags,
                parameters: a.params.into_iter().collect(),
                secret: a.secret.unwrap_or_default(),
                requisite_topology: a.requisite,
                preferred_topology: a.preferred,
                labels: a.labels.into_iter().collect(),
                from_snapshot: a.from_snapshot.unwrap_or_default(),
                from_volume: a.from_volume.unwrap_or_default(),
                mutable_parameters: a.mutable_params.into_iter().collect(),
                docker_scope: a.docker,
            };
            let v = client
                .create_volume(api::CreateVolumeRequest { spec: Some(spec) })
                .await
                .map_err(grpc)?;
            (v.into_inner(), a.name, Goal::Ready, a.wait)
        }
        VolumeCommand::Delete { name, force, wait } => {
            let v = client
                .delete_volume(api::DeleteVolumeRequest {
                    name: name.clone(),
                    force,
                })
                .await
                .map_err(grpc)?;
            (v.into_inner(), name, Goal::Deleted, wait)
        }
        VolumeCommand::Publish {
            name,
            node,
            readonly,
            wait,
        } => {
            let v = client
                .publish_volume(api::PublishVolumeRequest {
                    name: name.clone(),
                    node: node.clone().unwrap_or_default(),
                    readonly,
                })
                .await
                .map_err(grpc)?
                .into_inner();
            // Placement's choice is the publication on its way in: neither
            // published yet nor one being undone (a drained node's, say).
            let chosen = node.or_else(|| {
                v.publications
                    .iter()
                    .find(|p| {
                        p.state.parse().is_ok_and(|s| {
                            !matches!(s, PublicationState::Published | PublicationState::Unpublishing)
                        })
                    })
                    .map(|p| p.node.clone())
            });
            if !wait.wait {
                print_volume(&v, output)?;
                return Ok(ExitCode::SUCCESS);
            }
            return self::wait(
                &mut client,
                &v,
                Goal::PublishedOn(chosen.as_deref()),
                wait.timeout,
                output,
            )
            .await;
        }
        VolumeCommand::Unpublish { name, node, wait } => {
            let node = match node {
                Some(node) => node,
                None => the_one_node(&mut client, &name).await?,
            };
            let v = client
                .unpublish_volume(api::UnpublishVolumeRequest {
                    name: name.clone(),
                    node: node.clone(),
                })
                .await
                .map_err(grpc)?
                .into_inner();
            if !wait.wait {
                print_volume(&v, output)?;
                return Ok(ExitCode::SUCCESS);
            }
            return self::wait(&mut client, &v, Goal::GoneFrom(&node), wait.timeout, output).await;
        }
        VolumeCommand::Expand { name, size, wait } => {
            let v = client
                .expand_volume(api::ExpandVolumeRequest {
                    name: name.clone(),
                    required_bytes: size as i64,
                })
                .await
                .map_err(grpc)?;
            (v.into_inner(), name, Goal::Grown(size as i64), wait)
        }
        VolumeCommand::Modify {
            name,
            parameters,
            wait,
        } => {
            let v = client
                .modify_volume(api::ModifyVolumeRequest {
                    name: name.clone(),
                    mutable_parameters: parameters.into_iter().collect(),
                })
                .await
                .map_err(grpc)?;
            (v.into_inner(), name, Goal::Modified, wait)
        }
        VolumeCommand::Import(a) => {
            let a = *a;
            let spec = api::VolumeSpec {
                name: a.name,
                plugin: a.plugin,
                access_mode: a.access.access_mode,
                block: a.access.block,
                fs_type: a.access.fs_type,
                secret: a.secret.unwrap_or_default(),
                labels: a.labels.into_iter().collect(),
                ..Default::default()
            };
            let v = client
                .import_volume(api::ImportVolumeRequest {
                    spec: Some(spec),
                    volume_id: a.volume_id,
                })
                .await
                .map_err(grpc)?
                .into_inner();
            print_volume(&v, output)?;
            return Ok(ExitCode::SUCCESS);
        }
        VolumeCommand::Forget { name } => {
            let v = client
                .forget_volume(api::ForgetVolumeRequest { name: name.clone() })
                .await
                .map_err(grpc)?
                .into_inner();
            match output {
                Output::Json => print_volume(&v, output)?,
                Output::Text => say!(
                    "{name}: forgotten; volume {} is left on the plugin as it is",
                    if v.volume_id.is_empty() {
                        "(never created)"
                    } else {
                        &v.volume_id
                    }
                ),
            }
            return Ok(ExitCode::SUCCESS);
        }
        VolumeCommand::Docker { name, scope } => {
            let v = client
                .set_docker_scope(api::SetDockerScopeRequest { name, scope })
                .await
                .map_err(grpc)?
                .into_inner();
            print_volume(&v, output)?;
            return Ok(ExitCode::SUCCESS);
        }
        VolumeCommand::Retry { name, wait } => {
            let before = client
                .get_volume(api::GetVolumeRequest { name: name.clone() })
                .await
                .map_err(grpc)?
                .into_inner();
            if before.failure.is_empty() && before.retrying.is_empty() {
                match output {
                    Output::Text => say!("{name} has nothing to retry: it is {}", before.state),
                    Output::Json => print_volume(&before, output)?,
                }
                return Ok(ExitCode::SUCCESS);
            }
            let v = client
                .retry_volume(api::RetryVolumeRequest { name: name.clone() })
                .await
                .map_err(grpc)?;
            (v.into_inner(), name, Goal::Ready, wait)
        }
    };
    if wait_args.wait {
        wait(&mut client, &volume, goal, wait_args.timeout, output).await
    } else {
        print_volume(&volume, output)?;
        if output == Output::Text && created && !volume.state.parse().is_ok_and(VolumeState::is_ready) {
            say!(
                "accepted: Berth names and creates it next (`berth volume get {name}` shows how far it got; --wait waits)"
            );
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// The node a volume is published on, when it is published on one only.
async fn the_one_node(client: &mut crate::client::Client, name: &str) -> anyhow::Result<String> {
    let v = client
        .get_volume(api::GetVolumeRequest {
            name: name.to_string(),
        })
        .await
        .map_err(grpc)?
        .into_inner();
    let nodes: Vec<&str> = v.publications.iter().map(|p| p.node.as_str()).collect();
    match nodes[..] {
        [one] => Ok(one.to_string()),
        [] => anyhow::bail!("{name} is not published on any node: nothing to unpublish"),
        _ => anyhow::bail!(
            "{name} is published on {}: say which with --node",
            nodes.join(", ")
        ),
    }
}
