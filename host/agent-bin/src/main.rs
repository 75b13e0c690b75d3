//! `berth-agent`: the node agent on its own (`berth agent` without the
//! server, the CLI's other commands and the policy engine), for every node.

use std::process::ExitCode;

use berth_agent::command::{ABOUT, AgentArgs, run};
use clap::Parser;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "berth-agent", version, about = ABOUT)]
struct Cli {
    #[command(flatten)]
    agent: AgentArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    berth_metrics::logging::init(true);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli.agent)) {
        Ok(code) => code,
        Err(e) => {
            let text = berth_model::text::causes_once(e.chain().map(ToString::to_string));
            eprintln!("error: {}", berth_model::text::printable_lines(&text));
            ExitCode::FAILURE
        }
    }
}
