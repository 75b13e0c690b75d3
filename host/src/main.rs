//! The `berth` command: the CLI and the server.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    let daemon = matches!(args.command, cli::Command::Serve(_) | cli::Command::Agent(_));
    if !daemon {
        // A client command whose output is closed (`berth volume list | head`)
        // ends quietly, as Unix tools do. The server and the agent keep
        // ignoring SIGPIPE: a peer going away mid-write must never kill them.
        // SAFETY: restoring a signal's default disposition at startup, before any threads.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    let serve = matches!(args.command, cli::Command::Serve(_));
    cli::init_logging(serve);
    let json = args.output == cli::Output::Json;
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(cli::run(args)) {
        Ok(code) => code,
        Err(e) if json => {
            eprintln!("{}", cli::error_json(&e));
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {}", berth::text::printable(&format!("{e:#}")));
            ExitCode::FAILURE
        }
    }
}
