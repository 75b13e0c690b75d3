//! The `berth` command: the CLI and the server.

mod cli;
mod client;
mod commands;
mod contexts;
mod output;

use std::process::ExitCode;

use clap::Parser;

// The hot path's small allocations: see `berth::metrics::allocator`.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let args = match cli::Cli::try_parse() {
        Ok(args) => args,
        Err(e) => return cli::usage_error(e),
    };
    // The book's examples are checked this way: each command, as written,
    // is read and nothing is done.
    if std::env::var_os("BERTH_CHECK_ARGS").is_some() {
        return ExitCode::SUCCESS;
    }
    // Long-running processes say what they start and change; commands only warn.
    let serve = matches!(args.command, cli::Command::Serve(_) | cli::Command::Agent(_));
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
            eprintln!(
                "error: {}",
                berth::model::text::printable_lines(&berth::model::text::causes_once(
                    e.chain().map(ToString::to_string)
                ))
            );
            ExitCode::FAILURE
        }
    }
}
