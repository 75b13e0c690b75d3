//! `berth serve`: run the volume manager.

use std::path::PathBuf;
use std::process::ExitCode;

use berth::config::Config;
use clap::Args;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The configuration file (TOML); every key is in the book: docs/src/reference/config.md.
    #[arg(long, short, default_value = "berth.toml", env = "BERTH_CONFIG")]
    pub config: PathBuf,
}

pub async fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let config = Config::load(&args.config).map_err(anyhow::Error::msg)?;
    berth::serve::run(config, Some(args.config.clone()), shutdown())
        .await
        .map_err(anyhow::Error::msg)?;
    Ok(ExitCode::SUCCESS)
}

pub(super) async fn shutdown() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
    tracing::info!("shutting down");
}
