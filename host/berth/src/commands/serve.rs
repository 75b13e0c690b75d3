//! `berth serve`: run the volume manager.

use std::path::PathBuf;
use std::process::ExitCode;

use berth::config::Config;
use clap::Args;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The configuration file (TOML); every key is in berth.toml(5) and the book's configuration reference.
    /// `berth init` writes a commented one.
    #[arg(long, short, default_value = "berth.toml", env = "BERTH_CONFIG")]
    pub config: PathBuf,
    /// Read and check the configuration, say what it sets up, and exit
    /// (0 when it is valid, 1 with the key at fault when it is not).
    #[arg(long)]
    pub check: bool,
}

pub async fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    if !args.config.exists() {
        anyhow::bail!(
            "{} does not exist: `berth init {}` writes a commented one that runs as it is, \
             or name another with --config (BERTH_CONFIG)",
            args.config.display(),
            args.config.display()
        );
    }
    let config = Config::load(&args.config).map_err(anyhow::Error::msg)?;
    if args.check {
        let store = match &config.etcd {
            Some(_) => "etcd".to_string(),
            None => format!("embedded, {}", config.state.display()),
        };
        crate::output::say!(
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

/// `berth init`: writes the example configuration, refusing to replace a
/// file. Writable by its owner alone, whatever the umask: whoever may change
/// a server's config may change what it runs.
pub fn init(args: InitArgs) -> anyhow::Result<ExitCode> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o640)
        .open(&args.path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => {
                anyhow::anyhow!("{} exists already: it is left as it is", args.path.display())
            }
            _ => anyhow::anyhow!("writing {}: {e}", args.path.display()),
        })?;
    // The umask may only narrow the mode; never widen it past 0640.
    file.set_permissions(std::fs::Permissions::from_mode(0o640))?;
    file.write_all(EXAMPLE.as_bytes())?;
    crate::output::say!(
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
