//! `berth policy component`: a core WebAssembly module, as Go (`GOOS=wasip1`)
//! or C (wasi-libc) build one, made a component Berth loads. Berth's WIT
//! package (built into this binary) is embedded as the module's contract for
//! the world asked for, and the module's WASI preview 1 imports, if any, are
//! answered inside the component by Berth's sealed preview 1
//! (`sealed_wasi`), or, with `--wasi preview2`, passed to the host's WASI
//! through the standard preview 1 reactor adapter. Whatever the module
//! exports must follow the component model's canonical ABI for that world.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use wit_parser_component::{Resolve, SourceMap};

use super::preinit::Limits;
use super::sealed_wasi::Sealed;

#[derive(Debug, Args)]
pub struct ComponentArgs {
    /// The core module (`.wasm`, or `.wat` text).
    pub module: PathBuf,
    /// The world it implements: `naming-policy`, `placement-policy`,
    /// `retry-policy` or `policy` (all three), or a world of `--wit`.
    #[arg(long, default_value = "policy")]
    pub world: String,
    /// A directory holding the contract instead of the one built into
    /// berth: a policy project's `wit/`, whose `module` world names the
    /// decisions it exports.
    #[arg(long)]
    pub wit: Option<PathBuf>,
    /// Where to write the component [default: MODULE with `.component.wasm`].
    #[arg(long)]
    pub to: Option<PathBuf>,
    /// How the module's WASI preview 1 imports are answered.
    #[arg(long, value_enum, default_value_t = Wasi::Sealed)]
    pub wasi: Wasi,
    /// How long the module's `_initialize` may run while the component is
    /// made (the module's code runs here, on this machine).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub init_deadline: std::time::Duration,
    /// The most memory the module's `_initialize` may grow to (e.g. 256MiB).
    #[arg(long, default_value = "256MiB", value_parser = berth::model::units::parse_size_flag)]
    pub init_memory: usize,
    /// The most data segments the pre-initialised module may keep.
    #[arg(long, default_value_t = 4096)]
    pub init_segments: usize,
}

impl ComponentArgs {
    fn limits(&self) -> Limits {
        Limits {
            deadline: self.init_deadline,
            memory: self.init_memory,
            segments: self.init_segments,
        }
    }
}

/// Where a core module's WASI preview 1 calls go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Wasi {
    /// Inside the component: no clock, fixed randomness, writes dropped; the
    /// component imports nothing. Needed for Go, whose runtime starts
    /// before it can serve the standard adapter's allocations.
    Sealed,
    /// To the host's WASI through the standard preview 1 reactor adapter
    /// (Berth's sandbox: no files, network or environment; stderr shows in
    /// trap messages). For C built with wasi-libc, not for Go.
    Preview2,
}

/// Berth's current WIT package, resolved; or the one in `dir`.
fn contract(dir: Option<&Path>) -> anyhow::Result<(Resolve, wit_parser_component::PackageId)> {
    if let Some(dir) = dir {
        let mut resolve = Resolve::default();
        let (package, _) = resolve
            .push_dir(dir)
            .with_context(|| format!("reading the WIT package in {}", dir.display()))?;
        return Ok((resolve, package));
    }
    let mut sources = SourceMap::new();
    for (path, text) in super::policy_sdk::WIT {
        sources.push(Path::new(path), text);
    }
    let group = sources
        .parse()
        .map_err(|(_, e)| anyhow::anyhow!("Berth's own WIT package does not parse: {e}"))?;
    let mut resolve = Resolve::default();
    let package = resolve.push_group(group)?;
    Ok((resolve, package))
}

/// The component's bytes for `core` implementing `world`. The module's
/// exports are checked against the world before any of its code runs;
/// its initialisation then runs under `limits`.
pub fn componentize(
    core: &[u8],
    wit: Option<&Path>,
    world: &str,
    wasi: Wasi,
    limits: Limits,
) -> anyhow::Result<Vec<u8>> {
    let (resolve, package) = contract(wit)?;
    let world_id = resolve.select_world(&[package], Some(world)).with_context(|| match wit {
        None => format!(
            "{world:?} is not a world of Berth's contract (naming-policy, placement-policy, retry-policy, policy)"
        ),
        Some(dir) => format!("{world:?} is not a world of the package in {}", dir.display()),
    })?;
    let encode = |module: &[u8], start: Sealed| -> anyhow::Result<Vec<u8>> {
        let mut module = module.to_vec();
        wit_component::embed_component_metadata(
            &mut module,
            &resolve,
            world_id,
            wit_component::StringEncoding::UTF8,
        )?;
        let adapter = match wasi {
            Wasi::Sealed => sealed_adapter(start)?,
            Wasi::Preview2 => {
                wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER.to_vec()
            }
        };
        wit_component::ComponentEncoder::default()
            .validate(true)
            .module(&module)?
            .adapter("wasi_snapshot_preview1", &adapter)?
            .encode()
    };
    match wasi {
        // Start-up done once, for the sealed preview 1 (whose clock and
        // random source go on from where initialisation left them); only
        // for a module whose exports already make the component.
        Wasi::Sealed => {
            let plain = encode(core, Sealed::default())?;
            match super::preinit::preinitialize(core, limits).context("pre-initialising the module")? {
                Some((module, start)) => encode(&module, start),
                None => Ok(plain),
            }
        }
        Wasi::Preview2 => encode(core, Sealed::default()),
    }
}

/// The sealed preview 1 with its contract embedded: a world importing
/// nothing.
fn sealed_adapter(start: Sealed) -> anyhow::Result<Vec<u8>> {
    let mut resolve = Resolve::default();
    let package = resolve.push_str("sealed.wit", "package berth:sealed-wasi;\nworld sealed {}\n")?;
    let world = resolve.select_world(&[package], Some("sealed"))?;
    let mut module = super::sealed_wasi::module(start)?;
    wit_component::embed_component_metadata(
        &mut module,
        &resolve,
        world,
        wit_component::StringEncoding::UTF8,
    )?;
    Ok(module)
}

pub fn run(args: ComponentArgs) -> anyhow::Result<()> {
    let core = wat::parse_file(&args.module)
        .with_context(|| format!("reading the core module {}", args.module.display()))?;
    if wasmparser_is_component(&core) {
        bail!(
            "{} is a component already: load it as it is (berth policy check)",
            args.module.display()
        );
    }
    let component = componentize(&core, args.wit.as_deref(), &args.world, args.wasi, args.limits())
        .with_context(|| format!("making {} a component of {}", args.module.display(), args.world))?;
    let output = args
        .to
        .unwrap_or_else(|| args.module.with_extension("component.wasm"));
    std::fs::write(&output, &component).with_context(|| format!("writing {}", output.display()))?;
    println!(
        "wrote {} ({} bytes, world {}); next: berth policy check {}",
        output.display(),
        component.len(),
        args.world,
        output.display()
    );
    Ok(())
}

/// A component's header differs from a core module's in its version field.
fn wasmparser_is_component(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && bytes[..4] == *b"\0asm" && bytes[4..8] != [1, 0, 0, 0]
}
