//! `berth policy component`: a core WebAssembly module, as Go (`GOOS=wasip1`)
//! or C (wasi-libc) build one, made a component Berth loads. Berth's WIT
//! package (built into this binary) is embedded as the module's contract for
//! the world asked for, and the module's WASI preview 1 imports, if any, go
//! through the preview 1 reactor adapter. Whatever the module exports must
//! follow the component model's canonical ABI for that world.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Args;
use wit_parser_component::{Resolve, SourceMap};

#[derive(Debug, Args)]
pub struct ComponentArgs {
    /// The core module (`.wasm`, or `.wat` text).
    pub module: PathBuf,
    /// The world it implements: `naming-policy`, `placement-policy`,
    /// `retry-policy` or `policy` (all three).
    #[arg(long, default_value = "policy")]
    pub world: String,
    /// Where to write the component [default: MODULE with `.component.wasm`].
    #[arg(long)]
    pub to: Option<PathBuf>,
}

/// Berth's current WIT package, resolved.
fn contract() -> anyhow::Result<(Resolve, wit_parser_component::PackageId)> {
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

/// The component's bytes for `core` implementing `world`.
pub fn componentize(core: &[u8], world: &str) -> anyhow::Result<Vec<u8>> {
    let (resolve, package) = contract()?;
    let world_id = resolve.select_world(&[package], Some(world)).with_context(|| {
        format!("{world:?} is not a world of Berth's contract (naming-policy, placement-policy, retry-policy, policy)")
    })?;
    let mut module = core.to_vec();
    wit_component::embed_component_metadata(
        &mut module,
        &resolve,
        world_id,
        wit_component::StringEncoding::UTF8,
    )?;
    wit_component::ComponentEncoder::default()
        .validate(true)
        .module(&module)?
        .adapter(
            "wasi_snapshot_preview1",
            wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
        )?
        .encode()
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
    let component = componentize(&core, &args.world)
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
