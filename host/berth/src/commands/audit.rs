//! `berth audit tail`: the latest lines of the audit log of the server
//! that answers (the leader).

use std::process::ExitCode;

use berth_proto::berth::v1 as api;
use clap::Subcommand;

use crate::client::{ApiArgs, connect, grpc};
use crate::output::{Output, out, say};

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// The latest lines: who did what, and what was refused (text: one
    /// line each; -o json: the JSON lines as written).
    Tail {
        /// How many lines (at most 10,000).
        #[arg(long, short = 'l', default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        lines: u32,
    },
}

/// One audit line as a person reads it; a line that does not read as the
/// audit log writes them is shown as it is.
fn readable(line: &str) -> String {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
        return line.to_string();
    };
    let text = |k: &str| v[k].as_str().unwrap_or("").to_string();
    let at = v["at_ms"].as_u64().map_or(String::new(), |ms| {
        humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
            .to_string()
    });
    let target = match text("target").as_str() {
        "" => String::new(),
        t => format!(" {t}"),
    };
    let message = match text("message").as_str() {
        "" => String::new(),
        m => format!(": {m}"),
    };
    format!(
        "{at}  {:<28} {:<20} {}{target}  {}{message}",
        text("identity"),
        text("call"),
        text("namespace"),
        text("code")
    )
}

pub async fn run(command: AuditCommand, api: ApiArgs, output: Output) -> anyhow::Result<ExitCode> {
    let AuditCommand::Tail { lines } = command;
    let mut client = connect(&api).await?;
    let tail = client
        .tail_audit(api::TailAuditRequest { lines })
        .await
        .map_err(grpc)?
        .into_inner();
    for line in &tail.lines {
        match output {
            Output::Json => out(line),
            Output::Text => say!("{}", readable(line)),
        }
    }
    Ok(ExitCode::SUCCESS)
}
