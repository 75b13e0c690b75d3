//! The wasmtime engine shared by every policy module: configuration, the
//! epoch ticker behind deadlines, and the sandbox each decision runs in.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use wasmtime::component::{Linker, ResourceTable};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, ResourceLimiter, Store};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

/// How finely deadlines are measured.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(1);

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
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            concurrency: 64,
            max_module_memory: 256 << 20,
            pooling: true,
        }
    }
}

/// One wasmtime engine and linker for every module. Cheap to share.
pub struct PolicyEngine {
    engine: Engine,
    linker: Linker<GuestState>,
    options: EngineOptions,
    slots: Slots,
    ticker: Arc<AtomicBool>,
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
        // each store gets grants nothing.
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
        // The shared types interface has no functions; guests import it for its types.
        for contract in super::Contract::ALL {
            linker.instance(&format!("{}/types@{}", super::PACKAGE, contract.version()))?;
        }
        let ticker = Arc::new(AtomicBool::new(true));
        spawn_ticker(engine.clone(), ticker.clone());
        Ok(PolicyEngine {
            slots: Slots::new(options.concurrency),
            engine,
            linker,
            options,
            ticker,
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub(crate) fn linker(&self) -> &Linker<GuestState> {
        &self.linker
    }

    pub fn options(&self) -> &EngineOptions {
        &self.options
    }

    /// A fresh sandbox: no files, no environment, no network, no inherited
    /// stdio; a memory limit and a deadline. Holds a concurrency slot until dropped.
    pub(crate) fn store(&self, memory_limit: usize, deadline: Duration) -> Sandbox<'_> {
        let slot = self.slots.acquire();
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
        let ticks = deadline.as_micros().div_ceil(EPOCH_TICK.as_micros()) as u64 + 1;
        store.set_epoch_deadline(ticks);
        Sandbox { store, _slot: slot }
    }
}

impl Drop for PolicyEngine {
    fn drop(&mut self) {
        self.ticker.store(false, Ordering::Relaxed);
    }
}

fn config(options: &EngineOptions, pooling: bool) -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    // Component-model async is not used; skipping its per-store setup saves time.
    config.concurrency_support(false);
    if pooling {
        let slots = options.concurrency.max(1);
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(slots)
            .total_core_instances(slots * 8)
            .total_memories(slots * 2)
            .total_tables(slots * 8)
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

fn spawn_ticker(engine: Engine, running: Arc<AtomicBool>) {
    std::thread::Builder::new()
        .name("berth-policy-epoch".into())
        .spawn(move || {
            while running.load(Ordering::Relaxed) {
                std::thread::sleep(EPOCH_TICK);
                engine.increment_epoch();
            }
        })
        .expect("spawning the policy epoch thread");
}

/// What one decision's store holds.
pub(crate) struct GuestState {
    wasi: WasiCtx,
    table: ResourceTable,
    limiter: MemoryLimiter,
    stderr: MemoryOutputPipe,
}

impl GuestState {
    /// What the guest wrote to stderr (a panic message, usually).
    pub(crate) fn stderr_text(&self) -> String {
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
pub(crate) struct MemoryLimitExceeded {
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

pub(crate) struct Sandbox<'a> {
    pub store: Store<GuestState>,
    _slot: SlotGuard<'a>,
}

/// Bounds concurrent decisions to the pool's size, so a burst waits briefly
/// instead of failing to find a slot.
struct Slots {
    free: Mutex<u32>,
    available: Condvar,
}

impl Slots {
    fn new(n: u32) -> Self {
        Slots {
            free: Mutex::new(n.max(1)),
            available: Condvar::new(),
        }
    }

    fn acquire(&self) -> SlotGuard<'_> {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        while *free == 0 {
            free = self.available.wait(free).unwrap_or_else(|p| p.into_inner());
        }
        *free -= 1;
        SlotGuard { slots: self }
    }
}

struct SlotGuard<'a> {
    slots: &'a Slots,
}

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        *self.slots.free.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        self.slots.available.notify_one();
    }
}
