//! The sandboxes decisions run in: the pools they are admitted to, the
//! store each gets (no files, environment or network; a memory limit and a
//! deadline), and the epoch ticker behind deadlines.
//!
//! A sandbox is either armed (its deadline running, the ticker counting it)
//! or parked: made ahead of need, holding its share of the pools, and counted
//! against the quarter of the pools parked sandboxes may hold.

use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use wasmtime::component::ResourceTable;
use wasmtime::{Engine, ResourceLimiter, Store, UpdateDeadline};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

/// How finely deadlines are measured.
pub const EPOCH_TICK: Duration = Duration::from_millis(1);

/// How much of a guest's stderr (its panic message) is kept for errors.
const STDERR_CAPTURE: usize = 4096;

/// Core instances, memories and tables pooled per concurrent decision. A
/// Rust guest uses a few of each; a Python guest (the interpreter, its
/// libraries and WASI's adapters) dozens of core instances and tables, so it
/// takes several decisions' share.
pub(crate) const CORE_INSTANCES_PER_SLOT: u32 = 16;
pub(crate) const MEMORIES_PER_SLOT: u32 = 4;
pub(crate) const TABLES_PER_SLOT: u32 = 16;

/// What one decision of a module takes from the engine's pools, read from
/// the component when it loads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    pub core_instances: u32,
    pub memories: u32,
    pub tables: u32,
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

    /// Stops the thread (the engine is gone).
    fn stop(&self) {
        self.state.running.store(false, Ordering::Relaxed);
        self.thread.unpark();
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

/// The engine's pools and ticker, cloneable so that work outliving a borrow
/// of the engine (instances made ahead of need) can make sandboxes.
#[derive(Clone)]
pub(crate) struct Maker {
    engine: Engine,
    pools: Arc<Pools>,
    ticker: Arc<Ticker>,
    warm_per_module: usize,
}

impl Maker {
    /// `slots` decisions at once; `warm_per_module` instances of each
    /// module made ahead of need.
    pub(crate) fn new(engine: Engine, slots: u32, warm_per_module: u32) -> Self {
        Maker {
            ticker: Ticker::spawn(engine.clone()),
            engine,
            pools: Arc::new(Pools::new(slots)),
            warm_per_module: warm_per_module as usize,
        }
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Whether both make sandboxes from the same pools.
    pub(crate) fn same(&self, other: &Maker) -> bool {
        Arc::ptr_eq(&self.pools, &other.pools)
    }

    pub(crate) fn totals(&self) -> &Footprint {
        &self.pools.totals
    }

    /// How many instances of each module are made ahead of need.
    pub(crate) fn warm_per_module(&self) -> usize {
        self.warm_per_module
    }

    /// Whether the engine is still there (its ticker runs).
    pub(crate) fn running(&self) -> bool {
        self.ticker.state.running.load(Ordering::Relaxed)
    }

    pub(crate) fn stop(&self) {
        self.ticker.stop();
    }

    /// An armed sandbox, once the pools admit `footprint`: a burst waits
    /// briefly for a slot instead of failing to find a pooled instance.
    pub(crate) async fn store(
        &self,
        footprint: &Footprint,
        memory_limit: usize,
        deadline: Duration,
    ) -> Sandbox {
        let slot = self.pools.admit(footprint).await;
        let mut sandbox = self.build(slot, memory_limit, None);
        self.arm(&mut sandbox, deadline);
        sandbox
    }

    /// A parked sandbox, if the pools have `footprint` free now and parked
    /// sandboxes would still hold at most a quarter of them. Never waits:
    /// decisions come first.
    pub(crate) fn park(&self, footprint: &Footprint, memory_limit: usize) -> Option<Sandbox> {
        let share = Parked::take(&self.pools, footprint)?;
        let slot = self.pools.try_admit(footprint)?;
        Some(self.build(slot, memory_limit, Some(share)))
    }

    fn build(&self, slot: Admission, memory_limit: usize, parked: Option<Parked>) -> Sandbox {
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
        Sandbox::new(Held {
            store,
            _slot: slot,
            ticking: None,
            parked,
        })
    }

    /// Starts the sandbox's deadline. Past it the guest traps with
    /// `Interrupt`; before it, a guest that runs longer than an epoch tick
    /// yields to the async runtime at each tick, so a slow decision never
    /// holds a worker thread for long.
    pub(crate) fn arm(&self, sandbox: &mut Sandbox, deadline: Duration) {
        let ends = Instant::now() + deadline;
        sandbox.store.epoch_deadline_callback(move |_| {
            Ok(if Instant::now() >= ends {
                UpdateDeadline::Interrupt
            } else {
                UpdateDeadline::Yield(1)
            })
        });
        // The first tick checks the clock; a decision shorter than a tick
        // (nearly all) never does.
        sandbox.store.set_epoch_deadline(1);
        sandbox.ticking = Some(self.ticker.hold());
    }
}

/// A store and its share of the pools, given back when it drops: here, or
/// handed to whatever it was given to for recycling.
pub struct Sandbox {
    held: ManuallyDrop<Held>,
    recycle: Option<Arc<dyn Recycle>>,
}

/// What a sandbox holds; a sandbox derefs to it.
pub struct Held {
    pub store: Store<GuestState>,
    _slot: Admission,
    ticking: Option<Ticking>,
    parked: Option<Parked>,
}

/// Takes used sandboxes, to drop them off the decision's path.
pub(crate) trait Recycle: Send + Sync {
    fn recycle(self: Arc<Self>, used: Held);
}

impl Sandbox {
    fn new(held: Held) -> Self {
        Sandbox {
            held: ManuallyDrop::new(held),
            recycle: None,
        }
    }

    /// When dropped, the sandbox goes to `to` instead of dropping here.
    pub(crate) fn recycle_to(&mut self, to: Arc<dyn Recycle>) {
        self.recycle = Some(to);
    }

    /// The sandbox's contents, without recycling them.
    pub(crate) fn into_held(mut self) -> Held {
        self.recycle = None;
        // SAFETY: `held` is taken once; `forget` keeps `Drop` from taking it again.
        let held = unsafe { ManuallyDrop::take(&mut self.held) };
        std::mem::forget(self);
        held
    }
}

impl std::ops::Deref for Sandbox {
    type Target = Held;
    fn deref(&self) -> &Held {
        &self.held
    }
}

impl std::ops::DerefMut for Sandbox {
    fn deref_mut(&mut self) -> &mut Held {
        &mut self.held
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        // SAFETY: `held` is taken once, here; the sandbox is not used after.
        let held = unsafe { ManuallyDrop::take(&mut self.held) };
        match self.recycle.take() {
            Some(to) => to.recycle(held),
            None => drop(held),
        }
    }
}

impl Held {
    /// Parks an armed sandbox: its deadline no longer keeps the ticker awake.
    pub(crate) fn disarm(&mut self) {
        self.ticking = None;
    }

    /// Takes a parked sandbox out of the parked share, to be armed for a
    /// decision.
    pub(crate) fn unpark(self) -> Sandbox {
        let mut sandbox = Sandbox::new(self);
        sandbox.parked = None;
        sandbox
    }
}

/// A decision's share of the pools, given back when its sandbox drops.
struct Admission {
    _instance: OwnedSemaphorePermit,
    _core_instances: OwnedSemaphorePermit,
    _memories: OwnedSemaphorePermit,
    _tables: OwnedSemaphorePermit,
}

/// Admission to the instance pools: a decision waits until its module's whole
/// footprint is free, so a burst of large modules queues instead of failing
/// to instantiate, and small modules keep running beside them.
struct Pools {
    instances: Arc<Semaphore>,
    core_instances: Arc<Semaphore>,
    memories: Arc<Semaphore>,
    tables: Arc<Semaphore>,
    totals: Footprint,
    /// What parked sandboxes hold: slots, then their footprints summed.
    parked: Mutex<(u32, Footprint)>,
}

impl Pools {
    fn new(slots: u32) -> Self {
        let slots = slots.max(1);
        let totals = Footprint {
            core_instances: slots * CORE_INSTANCES_PER_SLOT,
            memories: slots * MEMORIES_PER_SLOT,
            tables: slots * TABLES_PER_SLOT,
        };
        let semaphore = |n: u32| Arc::new(Semaphore::new(n as usize));
        Pools {
            instances: semaphore(slots),
            core_instances: semaphore(totals.core_instances),
            memories: semaphore(totals.memories),
            tables: semaphore(totals.tables),
            totals,
            parked: Mutex::new((0, Footprint::default())),
        }
    }

    /// Every decision takes the pools in the same order, so two waiting
    /// decisions never each hold what the other waits for.
    async fn admit(&self, need: &Footprint) -> Admission {
        async fn take(pool: &Arc<Semaphore>, n: u32) -> OwnedSemaphorePermit {
            pool.clone()
                .acquire_many_owned(n)
                .await
                .expect("the pools are never closed")
        }
        Admission {
            _instance: take(&self.instances, 1).await,
            _core_instances: take(&self.core_instances, need.core_instances).await,
            _memories: take(&self.memories, need.memories).await,
            _tables: take(&self.tables, need.tables).await,
        }
    }

    /// [`Pools::admit`] if everything is free now. A waiting decision is
    /// handed what is released before this can take it.
    fn try_admit(&self, need: &Footprint) -> Option<Admission> {
        let take = |pool: &Arc<Semaphore>, n: u32| pool.clone().try_acquire_many_owned(n).ok();
        Some(Admission {
            _instance: take(&self.instances, 1)?,
            _core_instances: take(&self.core_instances, need.core_instances)?,
            _memories: take(&self.memories, need.memories)?,
            _tables: take(&self.tables, need.tables)?,
        })
    }
}

/// A parked sandbox's count in [`Pools::parked`], taken back when it drops.
struct Parked {
    pools: Arc<Pools>,
    footprint: Footprint,
}

impl Parked {
    fn take(pools: &Arc<Pools>, footprint: &Footprint) -> Option<Parked> {
        let totals = &pools.totals;
        let mut parked = pools.parked.lock().unwrap_or_else(|p| p.into_inner());
        let (slots, held) = *parked;
        let after = Footprint {
            core_instances: held.core_instances + footprint.core_instances,
            memories: held.memories + footprint.memories,
            tables: held.tables + footprint.tables,
        };
        let slots_total = totals.core_instances / CORE_INSTANCES_PER_SLOT;
        let fits = (slots + 1) * 4 <= slots_total
            && after.core_instances * 4 <= totals.core_instances
            && after.memories * 4 <= totals.memories
            && after.tables * 4 <= totals.tables;
        if !fits {
            return None;
        }
        *parked = (slots + 1, after);
        Some(Parked {
            pools: pools.clone(),
            footprint: *footprint,
        })
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        let mut parked = self.pools.parked.lock().unwrap_or_else(|p| p.into_inner());
        parked.0 -= 1;
        parked.1.core_instances -= self.footprint.core_instances;
        parked.1.memories -= self.footprint.memories;
        parked.1.tables -= self.footprint.tables;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EngineOptions, PolicyEngine};

    fn maker(concurrency: u32) -> Maker {
        let engine = PolicyEngine::new(EngineOptions {
            concurrency,
            ..EngineOptions::default()
        })
        .unwrap();
        engine.maker().clone()
    }

    const SMALL: Footprint = Footprint {
        core_instances: 2,
        memories: 1,
        tables: 1,
    };

    #[test]
    fn parked_sandboxes_hold_at_most_a_quarter_of_the_pools() {
        let m = maker(8);
        let a = m.park(&SMALL, 1 << 20).expect("a first parked sandbox");
        let b = m.park(&SMALL, 1 << 20).expect("a second");
        assert!(m.park(&SMALL, 1 << 20).is_none(), "a third is past 2 of 8 slots");
        drop(a);
        let c = m.park(&SMALL, 1 << 20).expect("one dropped, one more parks");
        // Taken for a decision, a sandbox no longer counts as parked.
        let mut taken = Held::unpark(c.into_held());
        m.arm(&mut taken, Duration::from_secs(1));
        let _d = m.park(&SMALL, 1 << 20).expect("a taken one leaves the share");
        drop(b);
    }

    #[test]
    fn a_module_larger_than_the_parked_share_is_never_parked() {
        let m = maker(8);
        let large = Footprint {
            core_instances: 8 * CORE_INSTANCES_PER_SLOT / 4 + 1,
            ..SMALL
        };
        assert!(m.park(&large, 1 << 20).is_none());
        // Too few slots for a quarter of them: nothing parks at all.
        assert!(maker(3).park(&SMALL, 1 << 20).is_none());
    }
}
