//! Instances made ahead of need: a few per module, parked until a decision
//! takes one, and refilled in the background on the async runtime, which
//! also drops the sandboxes decisions are done with. A parked instance has
//! run nothing but its own instantiation, so a decision that takes it still
//! runs in an instance of its own; its deadline starts when it is taken.
//!
//! Bounds: at most [`EngineOptions::warm_instances`] parked per module, all
//! parked sandboxes together at most a quarter of the engine's pools (see
//! `sandbox.rs`), and at most [`USED_KEPT`] used ones waiting to be dropped
//! (past that a decision drops its own). Parking never waits for the pools,
//! so decisions come first.
//!
//! [`EngineOptions::warm_instances`]: crate::EngineOptions::warm_instances

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use wasmtime::component::{Instance, InstancePre};

use crate::module_config::Limits;
use crate::sandbox::{Footprint, GuestState, Held, Maker, Recycle, Sandbox};

/// Used sandboxes waiting for the background to drop them.
const USED_KEPT: usize = 4;

/// What a module's instances are made from.
pub(crate) struct Recipe {
    pub pre: InstancePre<GuestState>,
    pub footprint: Footprint,
    pub limits: Limits,
}

/// One module's parked instances, and its used sandboxes to drop.
pub(crate) struct Warm {
    maker: Maker,
    recipe: Recipe,
    ready: Mutex<Vec<(Held, Instance)>>,
    used: Mutex<Vec<Held>>,
    /// A refill is under way: one at a time per module.
    filling: AtomicBool,
    /// An instantiation ahead of need failed: the module is instantiated on
    /// each decision's path from then on, where the failure is reported.
    broken: AtomicBool,
}

impl Warm {
    pub(crate) fn new(maker: Maker, recipe: Recipe) -> Arc<Self> {
        Arc::new(Warm {
            maker,
            recipe,
            ready: Mutex::default(),
            used: Mutex::default(),
            filling: AtomicBool::new(false),
            broken: AtomicBool::new(false),
        })
    }

    /// Whether instances are made with `maker` (the engine's).
    pub(crate) fn runs_on(&self, maker: &Maker) -> bool {
        self.maker.same(maker)
    }

    pub(crate) fn recipe(&self) -> &Recipe {
        &self.recipe
    }

    /// Whether instances are made ahead of need at all.
    fn enabled(&self) -> bool {
        self.maker.warm_per_module() > 0
    }

    /// How many instances are parked now.
    pub(crate) fn ready(&self) -> usize {
        lock(&self.ready).len()
    }

    /// A parked instance, armed with `deadline` from now, if there is one;
    /// otherwise a fresh sandbox to instantiate in, once the pools admit it.
    /// Either goes to the background when dropped, and a refill starts.
    pub(crate) async fn sandbox(self: &Arc<Self>, deadline: Duration) -> (Sandbox, Option<Instance>) {
        let parked = lock(&self.ready).pop();
        let (mut sandbox, instance) = match parked {
            Some((held, instance)) => {
                let mut sandbox = held.unpark();
                self.maker.arm(&mut sandbox, deadline);
                (sandbox, Some(instance))
            }
            None => {
                let r = &self.recipe;
                let sandbox = self
                    .maker
                    .store(&r.footprint, r.limits.memory_bytes, deadline)
                    .await;
                (sandbox, None)
            }
        };
        if self.enabled() {
            sandbox.recycle_to(self.clone());
            self.refill();
        }
        (sandbox, instance)
    }

    /// Starts a refill on the current async runtime unless one is under way.
    /// Without a runtime (a module loading on a plain thread) it does nothing.
    fn refill(self: &Arc<Self>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.filling.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut filling = Filling {
            warm: self.clone(),
            holds_flag: true,
        };
        runtime.spawn(async move {
            loop {
                let warm = &filling.warm;
                warm.fill().await;
                warm.filling.store(false, Ordering::Release);
                filling.holds_flag = false;
                // A sandbox recycled while this refill ended found it under
                // way: drop it now, not at some later decision.
                if lock(&warm.used).is_empty() || warm.filling.swap(true, Ordering::AcqRel) {
                    break;
                }
                filling.holds_flag = true;
            }
        });
    }

    /// Drops the used sandboxes (freeing their slots for reuse), then parks
    /// instances until the module has its number.
    async fn fill(&self) {
        let want = self.maker.warm_per_module();
        loop {
            let used = std::mem::take(&mut *lock(&self.used));
            drop(used);
            if self.ready() >= want || self.broken.load(Ordering::Relaxed) || !self.maker.running() {
                return;
            }
            let r = &self.recipe;
            let Some(mut sandbox) = self.maker.park(&r.footprint, r.limits.memory_bytes) else {
                return;
            };
            // Instantiation runs the guest's start code: under its deadline.
            self.maker.arm(&mut sandbox, r.limits.deadline);
            match r.pre.instantiate_async(&mut sandbox.store).await {
                Ok(instance) => {
                    let mut held = sandbox.into_held();
                    held.disarm();
                    lock(&self.ready).push((held, instance));
                }
                Err(error) => {
                    tracing::debug!(%error, "instantiating ahead of need failed; instantiating on each decision's path");
                    self.broken.store(true, Ordering::Relaxed);
                    return;
                }
            }
        }
    }
}

/// A refill under way. Dropped unfinished (its runtime shut down), it lets
/// the next decision start another.
struct Filling {
    warm: Arc<Warm>,
    holds_flag: bool,
}

impl Drop for Filling {
    fn drop(&mut self) {
        if self.holds_flag {
            self.warm.filling.store(false, Ordering::Release);
        }
    }
}

impl Recycle for Warm {
    fn recycle(self: Arc<Self>, mut used: Held) {
        used.disarm();
        let mut kept = lock(&self.used);
        if kept.len() >= USED_KEPT || tokio::runtime::Handle::try_current().is_err() {
            drop(kept);
            drop(used);
            return;
        }
        kept.push(used);
        drop(kept);
        self.refill();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
