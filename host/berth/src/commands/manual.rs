//! What packages ship beside the binaries, made from the CLI's own
//! definition so that it cannot drift from it: shell completions (`berth
//! completions SHELL`) and man pages (`berth manual DIR`, hidden), for
//! `berth` and for `berth-agent`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, ValueEnum};
use clap_complete::Shell;

/// Which program the completions or man pages are for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Program {
    /// `berth`: server, agent and CLI.
    Berth,
    /// `berth-agent`: the node agent alone.
    BerthAgent,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    #[arg(value_enum)]
    pub shell: Shell,
    /// The program to complete.
    #[arg(long, value_enum, default_value_t = Program::Berth)]
    pub program: Program,
}

#[derive(Debug, Args)]
pub struct ManualArgs {
    /// The directory the pages are written into (made if missing): berth.1,
    /// one page per subcommand (berth-volume-create.1, ...) and berth-agent.1.
    pub dir: PathBuf,
}

/// `berth-agent`'s command line, as its own binary defines it.
pub fn agent_command() -> clap::Command {
    let cmd = clap::Command::new("berth-agent")
        .version(env!("CARGO_PKG_VERSION"))
        .about(berth::agent::command::ABOUT);
    berth::agent::command::AgentArgs::augment_args(cmd)
}

/// `berth`'s command line is `berth` (the whole CLI, which calls this).
fn command(program: Program, berth: &clap::Command) -> clap::Command {
    match program {
        Program::Berth => berth.clone(),
        Program::BerthAgent => agent_command(),
    }
}

pub fn completions(args: &CompletionsArgs, berth: clap::Command) -> anyhow::Result<ExitCode> {
    let mut cmd = command(args.program, &berth);
    let name = cmd.get_name().to_string();
    // Made whole first, then written: clap_complete panics on a write
    // error, and a reader that stops early (`| head`) is not one.
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, name, &mut script);
    let text = String::from_utf8(script).context("the completion script is not UTF-8")?;
    crate::output::out(text.trim_end_matches('\n'));
    Ok(ExitCode::SUCCESS)
}

pub fn manual(args: &ManualArgs, berth: clap::Command) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(&args.dir).with_context(|| format!("making {}", args.dir.display()))?;
    let mut written = 0;
    for program in [Program::Berth, Program::BerthAgent] {
        let mut cmd = command(program, &berth);
        cmd.build();
        let name = cmd.get_name().to_string();
        written += pages(&cmd, &name, &name, &args.dir)?;
    }
    crate::output::say!("wrote {written} man pages into {}", args.dir.display());
    Ok(ExitCode::SUCCESS)
}

/// Writes `name.1` for `cmd` (run as `bin`), then a page for each of its
/// subcommands (`name-sub.1`, run as `bin sub`), all the way down. Returns
/// how many were written.
fn pages(cmd: &clap::Command, name: &str, bin: &str, dir: &Path) -> anyhow::Result<usize> {
    let page = cmd.clone().name(name.to_string()).bin_name(bin.to_string());
    let mut roff = Vec::new();
    clap_mangen::Man::new(page)
        .render(&mut roff)
        .with_context(|| format!("rendering {name}'s man page"))?;
    let path = dir.join(format!("{name}.1"));
    std::fs::write(&path, roff).with_context(|| format!("writing {}", path.display()))?;
    let mut written = 1;
    for sub in cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        let sub_name = sub.get_name();
        written += pages(
            sub,
            &format!("{name}-{sub_name}"),
            &format!("{bin} {sub_name}"),
            dir,
        )?;
    }
    Ok(written)
}
