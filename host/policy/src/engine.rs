//! The wasmtime engine shared by every policy module: configuration, the
//! epoch ticker behind deadlines, and the sandbox each decision runs in.

use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

pub(crate) use crate::sandbox::{CORE_INSTANCES_PER_SLOT, MEMORIES_PER_SLOT, Maker, TABLES_PER_SLOT};
pub use crate::sandbox::{Footprint, GuestState, MemoryLimitExceeded, Sandbox};

#[derive(Clone, Debug)]
pub struct EngineOptions {
    /// Decisions that may run at once; also the number of pooled instance slots.
    pub concurrency: u32,
    /// The largest memory limit any module may be given.
    pub max_module_memory: usize,
    /// Use the pooling allocator (fast instantiation). Falls back to on-demand
    /// allocation when the pool cannot be reserved.
    pub pooling: bool,
    /// Where compiled components are kept across restarts; none: compiled
    /// at every start.
    pub compiled_dir: Option<std::path::PathBuf>,
    /// The share of one core's time shadow modules may take: throughput
    /// first, shadow decisions dropped (counted) past it. `None`: every
    /// decision shadowed, at live work's cost.
    pub shadow_share: Option<f64>,
    /// Instances of each module made ahead of need and refilled in the
    /// background, so a decision's latency is its call alone. Each takes a
    /// decision's share of the pools while it waits, and all of them at most
    /// a quarter of the pools. 0: every decision instantiates on its path.
    pub warm_instances: u32,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            concurrency: 64,
            max_module_memory: 256 << 20,
            pooling: true,
            compiled_dir: None,
            shadow_share: Some(0.05),
            warm_instances: 2,
        }
    }
}

/// A module needs more of a pool for one decision than the engine has.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "one decision needs {need} {what} and the engine pools {have} in all; raise the engine's concurrency"
)]
pub struct PoolsTooSmall {
    pub what: &'static str,
    pub need: u32,
    pub have: u32,
}

/// One wasmtime engine and linker for every module. Cheap to share.
pub struct PolicyEngine {
    linker: Linker<GuestState>,
    options: EngineOptions,
    maker: Maker,
    /// Components compiled in this process, by their bytes' SHA-256.
    compiled: std::sync::Mutex<Vec<(String, Component)>>,
    on_disk: Option<crate::compiled::CompiledCache>,
}

/// Compiled components kept for a module loaded again (a reload that changes
/// only settings or limits, or several policies from one file): a Python
/// component takes seconds to compile.
const COMPILED_KEPT: usize = 8;

impl PolicyEngine {
    pub fn new(options: EngineOptions) -> anyhow::Result<Self> {
        let engine = if options.pooling {
            match Engine::new(&config(&options, true)) {
                Ok(e) => e,
                Err(e) => {
                    tracing::warn!(error = %e, "pooling allocator unavailable; instantiation will be slower");
                    Engine::new(&config(&options, false))?
                }
            }
        } else {
            Engine::new(&config(&options, false))?
        };
        let mut linker = Linker::new(&engine);
        // Rust guests import WASI even when they use none of it; the context
        // each store gets grants nothing. Asynchronous, so a decision runs on
        // the caller's task and yields instead of holding a thread.
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        // The shared types interface has no functions; guests import it for its types.
        for contract in crate::Contract::ALL {
            linker.instance(&format!("{}/types@{}", crate::PACKAGE, contract.version()))?;
        }
        let on_disk = options.compiled_dir.as_deref().and_then(|dir| {
            let settings = format!(
                "pooling={} max_memory={} perfmap={}",
                options.pooling,
                options.max_module_memory,
                std::env::var_os("BERTH_WASM_PERFMAP").is_some()
            );
            crate::compiled::CompiledCache::new(dir, &engine, &settings)
        });
        Ok(PolicyEngine {
            on_disk,
            maker: Maker::new(engine, options.concurrency, options.warm_instances),
            linker,
            options,
            compiled: Default::default(),
        })
    }

    pub fn engine(&self) -> &Engine {
        self.maker.engine()
    }

    /// Whether `wasm` was compiled before and kept in the compiled-module
    /// cache (so loading it does not compile it again).
    pub fn compiled_before(&self, wasm: &[u8]) -> bool {
        self.on_disk
            .as_ref()
            .is_some_and(|d| d.holds(&crate::compiled::sha256_hex(wasm)))
    }

    pub fn linker(&self) -> &Linker<GuestState> {
        &self.linker
    }

    pub fn options(&self) -> &EngineOptions {
        &self.options
    }

    /// Compiles `wasm` (binary or text), or returns the component compiled
    /// from the same bytes before.
    pub fn compile(&self, wasm: &[u8]) -> wasmtime::Result<Component> {
        self.compile_known(wasm, &crate::compiled::sha256_hex(wasm))
    }

    /// [`PolicyEngine::compile`] of bytes whose SHA-256 (hex) the caller has.
    pub(crate) fn compile_known(&self, wasm: &[u8], sha256: &str) -> wasmtime::Result<Component> {
        let cached = |c: &Vec<(String, Component)>| c.iter().find(|(h, _)| h == sha256).map(|e| e.1.clone());
        if let Some(c) = cached(&self.compiled.lock().unwrap_or_else(|p| p.into_inner())) {
            return Ok(c);
        }
        // Text (tests write guests in it) compiles in no time: never kept on disk.
        let disk = self.on_disk.as_ref().filter(|_| wasm.starts_with(b"\0asm"));
        let component = match disk.and_then(|d| d.get(self.maker.engine(), sha256)) {
            Some(c) => c,
            None => {
                let c = Component::new(self.maker.engine(), wasm)?;
                if let Some(d) = disk {
                    d.put(sha256, &c);
                }
                c
            }
        };
        let mut kept = self.compiled.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() >= COMPILED_KEPT {
            kept.remove(0);
        }
        kept.push((sha256.to_string(), component.clone()));
        Ok(component)
    }

    /// Whether a module with this footprint can run at all here; the error
    /// says which pool is too small and how to grow it.
    pub fn fits(&self, need: &Footprint) -> Result<(), PoolsTooSmall> {
        let have = self.maker.totals();
        let short = [
            ("core instances", need.core_instances, have.core_instances),
            ("memories", need.memories, have.memories),
            ("tables", need.tables, have.tables),
        ]
        .into_iter()
        .find(|(_, need, have)| need > have);
        match short {
            Some((what, need, have)) => Err(PoolsTooSmall { what, need, have }),
            None => Ok(()),
        }
    }

    /// What makes sandboxes (no files, environment, network or inherited
    /// stdio; a memory limit and a deadline), also for work that outlives a
    /// borrow of the engine (instances made ahead of need).
    pub(crate) fn maker(&self) -> &Maker {
        &self.maker
    }
}

impl Drop for PolicyEngine {
    fn drop(&mut self) {
        self.maker.stop();
    }
}

fn config(options: &EngineOptions, pooling: bool) -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    // For profiling guests with `perf`: names their JIT code in /tmp/perf-PID.map.
    if std::env::var_os("BERTH_WASM_PERFMAP").is_some() {
        config.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    // Component-model async is not used; skipping its per-store setup saves time.
    config.concurrency_support(false);
    if pooling {
        let slots = options.concurrency.max(1);
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(slots)
            .total_core_instances(slots * CORE_INSTANCES_PER_SLOT)
            .total_memories(slots * MEMORIES_PER_SLOT)
            .total_tables(slots * TABLES_PER_SLOT)
            .total_stacks(slots)
            .max_memory_size(options.max_module_memory)
            // Reset memory with memset instead of madvise, so a reused slot
            // takes no page faults on the guest's first pages.
            .linear_memory_keep_resident(2 << 20)
            .table_keep_resident(64 << 10)
            // Reset only the pages a decision dirtied (Linux 6.7+; ignored elsewhere).
            .pagemap_scan(wasmtime::Enabled::Auto)
            .max_unused_warm_slots(slots);
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    config
}
