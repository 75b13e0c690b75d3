//! `berth policy component`: a core WebAssembly module, as Go (`GOOS=wasip1`)
//! or C (wasi-libc) build one, made a component Berth loads. Berth's WIT
//! package (built into this binary) is embedded as the module's contract for
//! the world asked for, and the module's WASI preview 1 imports, if any, are
//! answered inside the component by Berth's sealed preview 1
//! (`berth_component::sealed_wasi`), or, with `--wasi preview2`, passed to the host's WASI
//! through the standard preview 1 reactor adapter. Whatever the module
//! exports must follow the component model's canonical ABI for that world.

use std::path::PathBuf;

use anyhow::{Context, bail};
use berth_component::{Contract, Limits, Wasi, componentize};
use clap::Args;

#[derive(Debug, Args)]
pub struct ComponentArgs {
    /// The core module (`.wasm`, or `.wat` text).
    pub module: PathBuf,
    /// The world it implements: `naming-policy`, `placement-policy`,
    /// `retry-policy`, `admission-policy`, `policy` (all four),
    /// `lifecycle-policy` (all but admission), or a world of `--wit`.
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

pub fn run(args: ComponentArgs) -> anyhow::Result<()> {
    let core = wat::parse_file(&args.module)
        .with_context(|| format!("reading the core module {}", args.module.display()))?;
    if wasmparser_is_component(&core) {
        bail!(
            "{} is a component already: load it as it is (berth policy check)",
            args.module.display()
        );
    }
    let contract = match &args.wit {
        Some(dir) => Contract::Dir(dir),
        None => Contract::Berth,
    };
    let component = componentize(&core, contract, &args.world, args.wasi, args.limits())
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
