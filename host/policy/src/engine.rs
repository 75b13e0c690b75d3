//! The wasmtime engine shared by every policy module: configuration, the
//! epoch ticker behind deadlines, and the sandbox each decision runs in.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, ResourceLimiter, Store,
    UpdateDeadline,
};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

/// How finely deadlines are measured.
pub const EPOCH_TICK: Duration = Duration::from_millis(1);

/// How much of a guest's stderr (its panic message) is kept for errors.
const STDERR_CAPTURE: usize = 4096;

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
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            concurrency: 64,
            max_module_memory: 256 << 20,
            pooling: true,
            compiled_dir: None,
            shadow_share: Some(0.05),
        }
    }
}

/// Core instances, memories and tables pooled per concurrent decision. A
/// Rust guest uses a few of each; a Python guest (the interpreter, its
/// libraries and WASI's adapters) dozens of core instances and tables, so it
/// takes several decisions' share.
const CORE_INSTANCES_PER_SLOT: u32 = 16;
const MEMORIES_PER_SLOT: u32 = 4;
const TABLES_PER_SLOT: u32 = 16;

/// What one decision of a module takes from the engine's pools, read from
/// the component when it loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footprint {
    pub core_instances: u32,
    pub memories: u32,
    pub tables: u32,
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
    engine: Engine,
    linker: Linker<GuestState>,
    options: EngineOptions,
    pools: Pools,
    ticker: Arc<Ticker>,
    /// Components compiled in this process, by their bytes' SHA-256.
    compiled: std::sync::Mutex<Vec<(String, Component)>>,
    on_disk: Option<crate::compiled::CompiledCache>,
}

/// Compiled components kept for a module loaded again (a reload that changes
/// only settings or limits, or several policies from one file): a Python
/// component takes seconds to compile.
const COMPILED_KEPT: usize = 8;

/// Admission to the instance pools: a decision waits until its module's whole
/// footprint is free, so a burst of large modules queues instead of failing
/// to instantiate, and small modules keep running beside them.
struct Pools {
    instances: tokio::sync::Semaphore,
    core_instances: tokio::sync::Semaphore,
    memories: tokio::sync::Semaphore,
    tables: tokio::sync::Semaphore,
    totals: Footprint,
}

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
        let ticker = Ticker::spawn(engine.clone());
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
            pools: Pools::new(options.concurrency),
            engine,
            linker,
            options,
            ticker,
            compiled: Default::default(),
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
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
        let component = match disk.and_then(|d| d.get(&self.engine, sha256)) {
            Some(c) => c,
            None => {
                let c = Component::new(&self.engine, wasm)?;
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
        let have = &self.pools.totals;
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

    /// A fresh sandbox: no files, no environment, no network, no inherited
    /// stdio; a memory limit and a deadline. Holds a concurrency slot until
    /// dropped: a burst waits briefly for one instead of failing to find a
    /// pooled instance.
    ///
    /// Past the deadline the guest traps with `Interrupt`; before it, a guest
    /// that runs longer than an epoch tick yields to the async runtime at each
    /// tick, so a slow decision never holds a worker thread for long.
    pub async fn store(&self, footprint: &Footprint, memory_limit: usize, deadline: Duration) -> Sandbox<'_> {
        let slot = self.pools.admit(footprint).await;
        let stderr = MemoryOutputPipe::new(STDERR_CAPTURE);
        let wasi = WasiCtxBuilder::new().stderr(stderr.clone()).build();
        let mut store = Store::new(
            &self.engine,
            GuestState {
                wasi,
                table: ResourceTable::new(),
                limiter: MemoryLimiter { limit: memory_limit },
                stderr,
            },
        );
        store.limiter(|s| &mut s.limiter);
        let ends = Instant::now() + deadline;
        store.epoch_deadline_callback(move |_| {
            Ok(if Instant::now() >= ends {
                UpdateDeadline::Interrupt
            } else {
                UpdateDeadline::Yield(1)
            })
        });
        // The first tick checks the clock; a decision shorter than a tick
        // (nearly all) never does.
        store.set_epoch_deadline(1);
        Sandbox {
            store,
            _slot: slot,
            _ticking: self.ticker.hold(),
        }
    }
}

impl Drop for PolicyEngine {
    fn drop(&mut self) {
        self.ticker.state.running.store(false, Ordering::Relaxed);
        self.ticker.thread.unpark();
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

/// The thread that advances the engine's epoch, every [`EPOCH_TICK`] while a
/// sandbox exists and asleep while none does: with built-in policies only, or
/// between decisions, it does not wake a thousand times a second for nothing.
struct Ticker {
    state: Arc<TickState>,
    thread: std::thread::Thread,
}

struct TickState {
    running: AtomicBool,
    sandboxes: AtomicUsize,
}

impl Ticker {
    fn spawn(engine: Engine) -> Arc<Ticker> {
        let state = Arc::new(TickState {
            running: AtomicBool::new(true),
            sandboxes: AtomicUsize::new(0),
        });
        let ticks = state.clone();
        let handle = std::thread::Builder::new()
            .name("berth-policy-epoch".into())
            .spawn(move || {
                while ticks.running.load(Ordering::Relaxed) {
                    if ticks.sandboxes.load(Ordering::Acquire) == 0 {
                        // A sandbox made meanwhile unparks first: park returns at once.
                        std::thread::park();
                        continue;
                    }
                    std::thread::sleep(EPOCH_TICK);
                    engine.increment_epoch();
                }
            })
            .expect("spawning the policy epoch thread");
        Arc::new(Ticker {
            state,
            thread: handle.thread().clone(),
        })
    }

    /// Counts a sandbox until the guard drops, waking the thread for the first.
    fn hold(self: &Arc<Ticker>) -> Ticking {
        if self.state.sandboxes.fetch_add(1, Ordering::AcqRel) == 0 {
            self.thread.unpark();
        }
        Ticking(self.clone())
    }
}

struct Ticking(Arc<Ticker>);

impl Drop for Ticking {
    fn drop(&mut self) {
        self.0.state.sandboxes.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What one decision's store holds.
pub struct GuestState {
    wasi: WasiCtx,
    table: ResourceTable,
    limiter: MemoryLimiter,
    stderr: MemoryOutputPipe,
}

impl GuestState {
    /// What the guest wrote to stderr (a panic message, usually).
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr.contents())
            .trim()
            .to_string()
    }
}

impl WasiView for GuestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Raised inside the guest when it asks for more memory than its limit.
#[derive(Debug, thiserror::Error)]
#[error("memory limit of {limit} bytes exceeded")]
pub struct MemoryLimitExceeded {
    pub limit: usize,
}

struct MemoryLimiter {
    limit: usize,
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.limit {
            return Err(wasmtime::Error::new(MemoryLimitExceeded { limit: self.limit }));
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1 << 20)
    }
}

pub struct Sandbox<'a> {
    pub store: Store<GuestState>,
    _slot: Admission<'a>,
    _ticking: Ticking,
}

type Permit<'a> = tokio::sync::SemaphorePermit<'a>;

async fn take(pool: &tokio::sync::Semaphore, n: u32) -> Permit<'_> {
    pool.acquire_many(n).await.expect("the pools are never closed")
}

/// A decision's share of the pools, given back when its sandbox drops.
struct Admission<'a> {
    _instance: Permit<'a>,
    _core_instances: Permit<'a>,
    _memories: Permit<'a>,
    _tables: Permit<'a>,
}

impl Pools {
    fn new(slots: u32) -> Self {
        let slots = slots.max(1);
        let totals = Footprint {
            core_instances: slots * CORE_INSTANCES_PER_SLOT,
            memories: slots * MEMORIES_PER_SLOT,
            tables: slots * TABLES_PER_SLOT,
        };
        let semaphore = |n: u32| tokio::sync::Semaphore::new(n as usize);
        Pools {
            instances: semaphore(slots),
            core_instances: semaphore(totals.core_instances),
            memories: semaphore(totals.memories),
            tables: semaphore(totals.tables),
            totals,
        }
    }

    /// Every decision takes the pools in the same order, so two waiting
    /// decisions never each hold what the other waits for.
    async fn admit(&self, need: &Footprint) -> Admission<'_> {
        Admission {
            _instance: take(&self.instances, 1).await,
            _core_instances: take(&self.core_instances, need.core_instances).await,
            _memories: take(&self.memories, need.memories).await,
            _tables: take(&self.tables, need.tables).await,
        }
    }
}
