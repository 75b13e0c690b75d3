//! WebAssembly tooling for policy modules, as `berth policy component`
//! runs it: a core module (Go with `GOOS=wasip1`, C with wasi-libc) made a
//! component of Berth's contract ([`componentize`]). On the way its
//! `_initialize` runs once, under [`Limits`], and the memory it leaves
//! becomes the module's start ([`preinit`]); the snapshot's data segments
//! are merged ([`data_segments`]); and its WASI preview 1 imports are
//! answered inside the component by a sealed preview 1 ([`sealed_wasi`]),
//! or passed to the host's WASI.
//!
//! Nothing here loads or runs a policy for a decision: that is
//! `berth-policy`. The module's code runs here only while it initialises.

pub mod data_segments;
pub mod preinit;
pub mod sealed_wasi;

use std::path::Path;

use anyhow::Context;
use clap::ValueEnum;
use wit_parser::{Resolve, SourceMap};

pub use preinit::Limits;
use sealed_wasi::Sealed;

/// Berth's WIT package as this release defines it: each file's path below
/// the package and its text. Built in, so that a module is made a
/// component with nothing but the installed `berth`.
pub const WIT: [(&str, &str); 6] = [
    ("wit/types.wit", include_str!("../../../wit/types.wit")),
    ("wit/naming.wit", include_str!("../../../wit/naming.wit")),
    ("wit/placement.wit", include_str!("../../../wit/placement.wit")),
    ("wit/retry.wit", include_str!("../../../wit/retry.wit")),
    ("wit/admission.wit", include_str!("../../../wit/admission.wit")),
    ("wit/worlds.wit", include_str!("../../../wit/worlds.wit")),
];

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

/// The WIT package a component is made for.
#[derive(Clone, Copy, Debug)]
pub enum Contract<'a> {
    /// Berth's own, as this release defines it ([`WIT`]).
    Berth,
    /// The package in a directory: a policy project's `wit/`.
    Dir(&'a Path),
}

/// The contract's package, resolved.
fn resolve(contract: Contract<'_>) -> anyhow::Result<(Resolve, wit_parser::PackageId)> {
    if let Contract::Dir(dir) = contract {
        let mut resolve = Resolve::default();
        let (package, _) = resolve
            .push_dir(dir)
            .with_context(|| format!("reading the WIT package in {}", dir.display()))?;
        return Ok((resolve, package));
    }
    let mut sources = SourceMap::new();
    for (path, text) in WIT {
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
    contract: Contract<'_>,
    world: &str,
    wasi: Wasi,
    limits: Limits,
) -> anyhow::Result<Vec<u8>> {
    let (resolve, package) = resolve(contract)?;
    let world_id = resolve.select_world(&[package], Some(world)).with_context(|| match contract {
        Contract::Berth => format!(
            "{world:?} is not a world of Berth's contract (naming-policy, placement-policy, retry-policy, policy)"
        ),
        Contract::Dir(dir) => format!("{world:?} is not a world of the package in {}", dir.display()),
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
            match preinit::preinitialize(core, limits).context("pre-initialising the module")? {
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
    let mut module = sealed_wasi::module(start)?;
    wit_component::embed_component_metadata(
        &mut module,
        &resolve,
        world,
        wit_component::StringEncoding::UTF8,
    )?;
    Ok(module)
}
