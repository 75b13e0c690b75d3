//! `berth store check`: the embedded store's own check, with the server
//! stopped: redb's integrity check, then every record read back.

use std::path::PathBuf;
use std::process::ExitCode;

use berth::config::Config;
use clap::{Args, Subcommand};

use crate::output::{Output, say};

#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Check the embedded store file with `berth serve` stopped: its integrity
    /// (checksums and page tree; a crash's leftovers are repaired as the next
    /// start would repair them), then every record read back as a start reads
    /// it. Exit 0 when the store is sound, 1 when it is not.
    #[command(after_help = "Examples:
  berth store check                       # the store of ./berth.toml
  berth store check --config /etc/berth/berth.toml
  berth store check --file /var/lib/berth/berth.redb --output json

A store in etcd is checked by etcd itself (`etcdctl endpoint health`, `etcdctl check perf`).")]
    Check(CheckArgs),
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The configuration whose store to check (its `state` file).
    #[arg(long, short, default_value = "berth.toml", env = "BERTH_CONFIG")]
    pub config: PathBuf,
    /// The store file itself, instead of the configuration's.
    #[arg(long, conflicts_with = "config")]
    pub file: Option<PathBuf>,
}

pub fn run(command: StoreCommand, output: Output) -> anyhow::Result<ExitCode> {
    let StoreCommand::Check(args) = command;
    let path = match args.file {
        Some(file) => file,
        None => {
            let config = Config::load(&args.config).map_err(anyhow::Error::msg)?;
            if config.etcd.is_some() {
                anyhow::bail!(
                    "{} keeps its store in etcd: etcd checks it (`etcdctl endpoint health`)",
                    args.config.display()
                );
            }
            config.state
        }
    };
    let found = berth::store::check_file(&path)?;
    match output {
        Output::Json => crate::output::print_json(&found)?,
        Output::Text => {
            say!("{:<16}{}", "store", path.display());
            let integrity = match found.repaired {
                true => "repaired (a crash's leftovers; the last whole write is kept)",
                false => "sound",
            };
            say!("{:<16}{integrity}", "integrity");
            say!(
                "{:<16}{} volumes, {} nodes, {} join tokens, {} ACL records, {} policy sets, {} plugin checks",
                "records",
                found.volumes,
                found.nodes,
                found.join_tokens,
                found.acl_records,
                found.policy_sets,
                found.plugin_checks
            );
            for problem in &found.unreadable {
                say!("{:<16}{problem}", "unreadable");
            }
        }
    }
    Ok(match found.unreadable.is_empty() {
        true => ExitCode::SUCCESS,
        false => ExitCode::FAILURE,
    })
}
