//! Command-line interface: argument parsing and dispatch.

mod agent;
mod client;
mod cluster;
mod data_segments;
mod health;
mod manual;
mod node;
mod plugin;
mod plugin_check;
mod policy;
mod policy_component;
mod policy_diff;
mod policy_new;
mod policy_new_go;
mod policy_new_js;
mod policy_oci;
mod policy_replay;
mod policy_sdk;
mod policy_set;
mod preinit;
mod sealed_wasi;
mod serve;
mod snapshot;
mod snapshot_group;
mod status;
mod volume;
mod volume_explain;
mod volume_list;
mod volume_view;
mod volume_wait;

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

const AFTER_HELP: &str = "\
Exit status: 0 on success, 1 when the operation failed (the message says why), 2 on bad usage.
With --output json, results are JSON on stdout and a failure is one JSON document on stderr:
{\"error\": {\"code\": \"NOT_FOUND\", \"message\": \"...\"}} (code is the API's gRPC code, or
null for a failure on this side).
Logs go to stderr; set BERTH_LOG (e.g. BERTH_LOG=debug) to see more.";

/// Berth: a CSI volume manager whose policy is pluggable through sandboxed WebAssembly components.
#[derive(Debug, Parser)]
#[command(name = "berth", version, after_help = AFTER_HELP, propagate_version = true)]
pub struct Cli {
    /// How to print results.
    #[arg(long, short, global = true, value_enum, default_value_t = Output::Text)]
    pub output: Output,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Aligned, human-readable text.
    Text,
    /// One JSON document on stdout, for scripts.
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Inspect CSI plugins directly over their sockets.
    #[command(subcommand)]
    Plugin(plugin::PluginCommand),
    /// WebAssembly policy modules: check and test them, deliver them (registries,
    /// signatures, the cluster's policy set) and roll them out (replay, shadow,
    /// promote, roll back).
    #[command(subcommand)]
    Policy(policy::PolicyCommand),
    /// Run the volume manager: the API, the reconciler and the plugin registry.
    Serve(serve::ServeArgs),
    /// Write a commented berth.toml to start from (a store, one plugin, one node).
    Init(serve::InitArgs),
    /// Run the node agent: this node's CSI node plugins, driven by `berth serve`.
    Agent(agent::AgentArgs),
    /// Create, publish, inspect and delete volumes (through `berth serve`).
    Volume {
        #[command(subcommand)]
        command: Box<volume::VolumeCommand>,
        #[command(flatten)]
        api: client::ApiArgs,
    },
    /// Take, list and delete snapshots of volumes (through `berth serve`).
    Snapshot {
        #[command(subcommand)]
        command: snapshot::SnapshotCommand,
        #[command(flatten)]
        api: client::ApiArgs,
    },
    /// How many volumes are in each state, how much work is outstanding, and
    /// which plugins and nodes are unhealthy or down (through `berth serve`).
    Status {
        /// Exit 1 when a plugin is unhealthy or a node is down (for scripts).
        #[arg(long)]
        check: bool,
        #[command(flatten)]
        api: client::ApiArgs,
    },
    /// The cluster's TLS endpoint: join tokens for new agents (through `berth serve`).
    Cluster {
        #[command(subcommand)]
        command: cluster::ClusterCommand,
        #[command(flatten)]
        api: client::ApiArgs,
    },
    /// Shell completions for berth or berth-agent, on stdout (for example
    /// `berth completions bash > /etc/bash_completion.d/berth`).
    Completions(manual::CompletionsArgs),
    /// Man pages for berth, each subcommand and berth-agent, into a directory.
    #[command(hide = true)]
    Manual(manual::ManualArgs),
    /// Nodes and their CSI node plugins (through `berth serve`).
    Node {
        #[command(subcommand)]
        command: NodeCommand,
        #[command(flatten)]
        api: client::ApiArgs,
    },
}

#[derive(Debug, Subcommand)]
pub enum NodeCommand {
    /// Every node with its state (ready, down, unknown, forgotten), when it was last
    /// seen, and its plugins' node ids, health, topology and load.
    List,
    /// Keep placement away from a node and unpublish everything on it.
    Drain {
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
        name: String,
        /// Yes, the node is gone for good.
        #[arg(long)]
        force: bool,
    },
    /// Remove a node nothing is published on any more (drained or forgotten).
    Remove { name: String },
}

pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Plugin(cmd) => plugin::run(cmd, cli.output).await,
        Command::Policy(cmd) => policy::run(cmd, cli.output).await,
        Command::Serve(args) => serve::run(args).await,
        Command::Init(args) => serve::init(args),
        Command::Agent(args) => agent::run(args).await,
        Command::Volume { command, api } => volume::run(*command, api, cli.output).await,
        Command::Snapshot { command, api } => snapshot::run(command, api, cli.output).await,
        Command::Status { check, api } => status::status(api, check, cli.output).await,
        Command::Node { command, api } => node::run(command, api, cli.output).await,
        Command::Cluster { command, api } => cluster::run(command, api, cli.output).await,
        Command::Completions(args) => manual::completions(&args),
        Command::Manual(args) => manual::manual(&args),
    }
}

pub fn init_logging(serve: bool) {
    berth::metrics::logging::init(serve);
}

/// Bad usage: clap's own message, or with `-o json` on the command line the
/// same as one JSON document on stderr (`code` null: refused on this side);
/// exit status 2 either way. Help and version print as usual.
pub fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    let informational = matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    );
    if informational || !json_asked(std::env::args().skip(1)) {
        e.exit();
    }
    let rendered = e.render().to_string();
    let message = rendered.trim().trim_start_matches("error: ");
    eprintln!(
        "{}",
        serde_json::json!({"error": {"code": null, "message": message}})
    );
    ExitCode::from(2)
}

/// Whether `-o json` (in any of its spellings) is among `args`.
fn json_asked(args: impl Iterator<Item = String>) -> bool {
    let mut previous_was_flag = false;
    for a in args {
        if a == "--" {
            return false;
        }
        if (previous_was_flag && a == "json") || ["--output=json", "-ojson", "-o=json"].contains(&a.as_str())
        {
            return true;
        }
        previous_was_flag = a == "-o" || a == "--output";
    }
    false
}

/// A failure as `-o json` reports it on stderr.
pub fn error_json(e: &anyhow::Error) -> String {
    let api = e.downcast_ref::<client::ApiError>();
    let message = match api {
        Some(a) => a.message.clone(),
        None => berth::model::text::causes_once(e.chain().map(ToString::to_string)),
    };
    serde_json::json!({
        "error": {
            "code": api.map(|a| berth_proto::code::name(a.code)),
            "message": message,
        }
    })
    .to_string()
}

/// Prints `value` as pretty JSON on stdout.
/// Prints one line, with control characters in it (from plugins, guests or
/// requests) shown escaped; every text line the CLI prints goes through it.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::cli::out(&berth::model::text::printable(&format!($($arg)*)))
    };
}
pub(crate) use say;

/// One line on stdout. Output closed by its reader (`berth volume list |
/// head`) ends the command quietly, as Unix tools do; SIGPIPE itself stays
/// ignored, so a socket closed under a call is an error, never a silent death.
pub fn out(line: &str) {
    out_raw(&format!("{line}\n"));
}

/// Text on stdout as it is (no line's end added), ending as [`out`] does.
pub fn out_raw(text: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_all(text.as_bytes()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(141);
        }
        panic!("writing to stdout: {e}");
    }
}

pub fn print_json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    out(&serde_json::to_string_pretty(value)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    /// clap's own checks of the whole command line, and a subcommand whose
    /// flags once clashed with the global `--output` (a panic at parse time).
    #[test]
    fn the_command_line_is_well_formed() {
        use clap::{CommandFactory, Parser};
        super::Cli::command().debug_assert();
        let args = [
            "berth",
            "policy",
            "component",
            "core.wasm",
            "--world",
            "naming-policy",
            "--to",
            "x.wasm",
        ];
        assert!(super::Cli::try_parse_from(args).is_ok());
    }
}
