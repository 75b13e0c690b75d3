//! `berth policy push` and `berth policy pull`: modules in OCI registries,
//! as the WebAssembly artifact the ecosystem shares, by digest.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use serde::Serialize;

use berth::oci::{Access, Component, Digest, Reference, Registry, layout};

use super::{Output, say};

#[derive(Debug, Args)]
pub struct RegistryArgs {
    /// A PEM file of the CA(s) the registry's certificate is checked against
    /// (default: the system's).
    #[arg(long)]
    pub ca: Option<PathBuf>,
    /// Plain HTTP instead of HTTPS: to a registry on this machine (loopback) only.
    #[arg(long)]
    pub plain_http: bool,
    /// The Docker config file holding registry credentials (`auths`; default:
    /// $DOCKER_CONFIG/config.json, else ~/.docker/config.json).
    #[arg(long)]
    pub docker_config: Option<PathBuf>,
}

impl RegistryArgs {
    fn access(&self) -> Access {
        Access {
            ca: self.ca.clone(),
            plain_http: self.plain_http,
            docker_config: self.docker_config.clone(),
        }
    }
}

#[derive(Debug, Args)]
pub struct PushArgs {
    /// The module: a WebAssembly component (.wasm) that loads as a policy.
    pub module: PathBuf,
    /// Where to: oci://HOST[:PORT]/REPOSITORY[:TAG] (without a tag, by digest only).
    pub reference: String,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

#[derive(Debug, Args)]
pub struct PullArgs {
    /// oci://HOST[:PORT]/REPOSITORY:TAG or …@sha256:DIGEST.
    pub reference: String,
    /// A file for the module, or a directory to hold it as an OCI image
    /// layout (an existing directory, or a path ending in /); default: the
    /// repository's last part, .wasm, here. (`--output` is the answer's format.)
    #[arg(long, value_name = "FILE|DIR")]
    pub to: Option<PathBuf>,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

#[derive(Serialize)]
struct Pinned {
    /// The reference pinned by the manifest's digest: what `[[policy]] module` takes.
    reference: String,
    digest: String,
    /// The digest of the module's bytes (the artifact's one layer).
    layer: String,
    size: usize,
    /// Where it was written (pull).
    #[serde(skip_serializing_if = "Option::is_none")]
    output: Option<String>,
}

/// What the config says of the component: the policy interfaces it exports, its imports.
fn describe(path: &Path) -> anyhow::Result<Component> {
    let (_, module, _) = super::policy::load(path, &super::policy::LimitArgs::default(), Default::default())
        .with_context(|| format!("{} does not load as a policy module", path.display()))?;
    let version = module.contract().version();
    Ok(Component {
        exports: module
            .decisions()
            .iter()
            .map(|d| format!("berth:policy/{d}@{version}"))
            .collect(),
        imports: module.imports().to_vec(),
        target: None,
    })
}

pub async fn push(args: PushArgs, output: Output) -> anyhow::Result<ExitCode> {
    let reference = Reference::parse_destination(&args.reference)?;
    let bytes = std::fs::read(&args.module).with_context(|| format!("reading {}", args.module.display()))?;
    let component = describe(&args.module)?;
    let registry = Registry::new(&reference, &args.registry.access())?;
    let title = args.module.file_name().and_then(|n| n.to_str());
    let size = bytes.len();
    let layer = Digest::of(&bytes);
    let pinned = registry.push(&reference, bytes.into(), component, title).await?;
    report(
        &Pinned {
            digest: pinned
                .digest
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default(),
            reference: pinned.to_string(),
            layer: layer.to_string(),
            size,
            output: None,
        },
        output,
    )
}

pub async fn pull(args: PullArgs, output: Output) -> anyhow::Result<ExitCode> {
    let reference = Reference::parse(&args.reference)?;
    let registry = Registry::new(&reference, &args.registry.access())?;
    let pulled = registry.pull(&reference, berth::oci::MODULE_MAX).await?;
    let default = || {
        PathBuf::from(format!(
            "{}.wasm",
            reference.repository.rsplit('/').next().unwrap_or("module")
        ))
    };
    let target = args.to.clone().unwrap_or_else(default);
    let as_layout = target.is_dir()
        || args
            .to
            .as_ref()
            .is_some_and(|o| o.to_string_lossy().ends_with('/'));
    if as_layout {
        layout::store(&target, &pulled, reference.tag.as_deref())?;
    } else {
        // Checked already; written whole or not at all.
        let tmp = target.with_extension("partial");
        std::fs::write(&tmp, &pulled.module)
            .and_then(|()| std::fs::rename(&tmp, &target))
            .with_context(|| format!("writing {}", target.display()))?;
    }
    report(
        &Pinned {
            reference: pulled.reference.to_string(),
            digest: pulled
                .reference
                .digest
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default(),
            layer: pulled.layer.to_string(),
            size: pulled.module.len(),
            output: Some(target.display().to_string()),
        },
        output,
    )
}

fn report(p: &Pinned, output: Output) -> anyhow::Result<ExitCode> {
    match output {
        Output::Json => super::print_json(p)?,
        Output::Text => {
            if let Some(o) = &p.output {
                say!("{:<10}{o}", "written");
            }
            say!("{:<10}{}", "layer", p.layer);
            say!("{:<10}{} bytes", "size", p.size);
            say!("{}", p.reference);
        }
    }
    Ok(ExitCode::SUCCESS)
}
