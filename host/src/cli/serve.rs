//! `berth serve`: run the volume manager.

use std::path::PathBuf;
use std::process::ExitCode;

use berth::config::Config;
use clap::Args;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The configuration file (TOML); every key is in the book: docs/src/reference/config.md.
    /// `berth init` writes a commented one.
    #[arg(long, short, default_value = "berth.toml", env = "BERTH_CONFIG")]
    pub config: PathBuf,
    /// Read and check the configuration, say what it sets up, and exit
    /// (0 when it is valid, 1 with the key at fault when it is not).
    #[arg(long)]
    pub check: bool,
}

pub async fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let config = Config::load(&args.config).map_err(anyhow::Error::msg)?;
    if args.check {
        let store = match &config.etcd {
            Some(_) => "etcd".to_string(),
            None => format!("embedded, {}", config.state.display()),
        };
        super::say!(
            "{}: valid; store {store}; API {}; {} plugin(s), {} node(s), {} policy module(s)",
            args.config.display(),
            config.api.path().display(),
            config.plugins.len(),
            config.nodes.len(),
            config.policies.len()
        );
        return Ok(ExitCode::SUCCESS);
    }
    berth::serve::run(config, Some(args.config.clone()), shutdown())
        .await
        .map_err(anyhow::Error::msg)?;
    Ok(ExitCode::SUCCESS)
}

pub(super) async fn shutdown() {
    berth::agent::command::shutdown().await;
}

/// What `berth init` writes: a commented `berth.toml` that runs as it is.
pub const EXAMPLE: &str = include_str!("../../templates/config/berth.toml");

#[derive(Debug, Args)]
pub struct InitArgs {
    /// Where to write it (never over an existing file).
    #[arg(default_value = "berth.toml")]
    pub path: PathBuf,
}

/// `berth init`: writes the example configuration, refusing to replace a file.
pub fn init(args: InitArgs) -> anyhow::Result<ExitCode> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&args.path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => {
                anyhow::anyhow!("{} exists already: it is left as it is", args.path.display())
            }
            _ => anyhow::anyhow!("writing {}: {e}", args.path.display()),
        })?;
    file.write_all(EXAMPLE.as_bytes())?;
    super::say!(
        "wrote {}: a store, the sample plugin on csi.sock and one node; check it with `berth serve --check --config {}`",
        args.path.display(),
        args.path.display()
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_example_configuration_is_valid_as_written() {
        let config =
            berth::config::Config::parse(super::EXAMPLE, std::path::Path::new("/etc/berth")).unwrap();
        assert_eq!(config.plugins.len(), 1);
        assert_eq!(config.nodes.len(), 1);
    }
}
