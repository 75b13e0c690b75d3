//! Command-line interface: the command line as clap reads it, and the
//! dispatch to `commands`, one module per subcommand.

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use crate::client;
use crate::commands::{
    acl, agent, audit, cluster, manual, namespace, node, plugin, policy, serve, snapshot, status, store,
    volume,
};
pub use crate::output::Output;

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
    /// The embedded store, checked with `berth serve` stopped.
    #[command(subcommand)]
    Store(store::StoreCommand),
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
    /// Who may do what through the API: ACL policies and tokens (through `berth serve`).
    Acl {
        #[command(subcommand)]
        command: acl::AclCommand,
        #[command(flatten)]
        api: client::ApiArgs,
    },
    /// The audit log: who did what, and what was refused (through `berth serve`).
    Audit {
        #[command(subcommand)]
        command: audit::AuditCommand,
        #[command(flatten)]
        api: client::ApiArgs,
    },
    /// What namespaces hold, and their quotas (through `berth serve`).
    Namespace {
        #[command(subcommand)]
        command: namespace::NamespaceCommand,
        #[command(flatten)]
        api: client::ApiArgs,
    },
    /// Nodes and their CSI node plugins (through `berth serve`).
    Node {
        #[command(subcommand)]
        command: node::NodeCommand,
        #[command(flatten)]
        api: client::ApiArgs,
    },
}

pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Plugin(cmd) => plugin::run(cmd, cli.output).await,
        Command::Policy(cmd) => policy::run(cmd, cli.output).await,
        Command::Serve(args) => serve::run(args).await,
        Command::Init(args) => serve::init(args),
        Command::Agent(args) => agent::run(args).await,
        Command::Store(cmd) => store::run(cmd, cli.output),
        Command::Volume { command, api } => volume::run(*command, api, cli.output).await,
        Command::Snapshot { command, api } => snapshot::run(command, api, cli.output).await,
        Command::Status { check, api } => status::status(api, check, cli.output).await,
        Command::Node { command, api } => node::run(command, api, cli.output).await,
        Command::Namespace { command, api } => namespace::run(command, api, cli.output).await,
        Command::Audit { command, api } => audit::run(command, api, cli.output).await,
        Command::Acl { command, api } => acl::run(command, api, cli.output).await,
        Command::Cluster { command, api } => cluster::run(command, api, cli.output).await,
        Command::Completions(args) => manual::completions(&args, Cli::command()),
        Command::Manual(args) => manual::manual(&args, Cli::command()),
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

    /// `--help` helps: every command, at every depth, and every argument
    /// it takes says what it is (a doc comment on its definition).
    #[test]
    fn every_command_and_argument_has_help() {
        use clap::CommandFactory;
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let builtin = ["help", "version"].contains(&arg.get_id().as_str());
                if !builtin && !arg.is_hide_set() && arg.get_help().is_none() && arg.get_long_help().is_none()
                {
                    missing.push(format!("{path} {}", arg.get_id()));
                }
            }
            for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
                let sub_path = format!("{path} {}", sub.get_name());
                if sub.get_about().is_none() && sub.get_long_about().is_none() {
                    missing.push(sub_path.clone());
                }
                walk(sub, &sub_path, missing);
            }
        }
        let mut missing = Vec::new();
        walk(&super::Cli::command(), "berth", &mut missing);
        assert!(missing.is_empty(), "without help text: {missing:#?}");
    }
}
