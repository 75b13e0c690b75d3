//! Start-up done once: a core module that exports `_initialize` (Go's
//! runtime, wasi-libc's constructors) runs it here, when `berth policy
//! component` builds the component, and the memory and globals it leaves
//! become the module's initial state (wasmtime-wizer's snapshot). Each
//! decision then starts from that state instead of starting the runtime
//! again.
//!
//! During initialisation the module's WASI preview 1 calls are answered as
//! the sealed preview 1 (`sealed_wasi`) answers them in the component, and
//! where its clock and random source stood at the end is where the
//! component's sealed preview 1 starts, so the module never sees its clock
//! go back or a random draw repeat.

use std::sync::mpsc;
use std::time::Duration;

use anyhow::Context;
use wasmtime::{Caller, Config, Engine, Extern, Instance, Linker, Module, ResourceLimiter, Store, Val};
use wasmtime_wizer::{InstanceState, SnapshotVal, ValType, Wizer};

use crate::sealed_wasi::{self, Sealed};

const INITIALIZE: &str = "_initialize";
const WASI: &str = "wasi_snapshot_preview1";

/// What a module's initialisation may use: it is code from whoever wrote
/// the module, run on the operator's machine.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// How long `_initialize` may run.
    pub deadline: Duration,
    /// The most linear memory (and table elements) it may grow to, in bytes.
    pub memory: usize,
    /// The most data segments the snapshot may keep, after merging.
    pub segments: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            deadline: Duration::from_secs(10),
            memory: 256 << 20,
            segments: 4096,
        }
    }
}

/// What the store holds while the module initialises.
struct Init {
    sealed: Sealed,
    limits: Limits,
}

impl ResourceLimiter for Init {
    fn memory_growing(&mut self, _: usize, desired: usize, _: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.limits.memory {
            wasmtime::bail!(
                "the module's _initialize grew its memory to {desired} bytes, past {} (--init-memory), and was stopped",
                self.limits.memory
            );
        }
        Ok(true)
    }

    fn table_growing(&mut self, _: usize, desired: usize, _: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.limits.memory / 8 {
            wasmtime::bail!("the module's _initialize grew a table to {desired} elements and was stopped");
        }
        Ok(true)
    }
}

/// The module pre-initialised and where its sealed preview 1 stands, or
/// `None` when it has nothing to run at start. Initialisation runs under
/// `limits`: past its deadline or its memory it is stopped with an error
/// that says which.
pub fn preinitialize(core: &[u8], limits: Limits) -> anyhow::Result<Option<(Vec<u8>, Sealed)>> {
    let mut config = Config::new();
    config.epoch_interruption(true);
    let engine = Engine::new(&config)?;
    let plain = Module::new(&engine, core)
        .map_err(|e| anyhow::Error::from(e).context("compiling the core module"))?;
    if plain.get_export(INITIALIZE).is_none() {
        return Ok(None);
    }
    let mut wizer = Wizer::new();
    wizer.init_func(INITIALIZE).keep_init_func(false);
    let (cx, instrumented) = wizer.instrument(core)?;
    let module = Module::new(&engine, &instrumented)
        .map_err(|e| anyhow::Error::from(e).context("compiling the instrumented module"))?;
    let init = Init {
        sealed: Sealed::default(),
        limits,
    };
    let mut store = Store::new(&engine, init);
    store.limiter(|init| init);
    store.set_epoch_deadline(1);
    let mut linker = Linker::new(&engine);
    // A module may import one function twice (Go imports fd_write twice).
    linker.allow_shadowing(true);
    for import in module.imports() {
        if import.module() != WASI {
            anyhow::bail!(
                "the module imports {}::{}; a policy module may import WASI preview 1 only",
                import.module(),
                import.name()
            );
        }
        let Some(ty) = import.ty().func().cloned() else {
            anyhow::bail!(
                "the module imports {} as something other than a function",
                import.name()
            );
        };
        let name = import.name().to_string();
        linker.func_new(WASI, import.name(), ty, move |caller, params, results| {
            answer(&name, caller, params, results)
        })?;
    }
    // The deadline: a thread that ends the epoch once it passes, or goes
    // as soon as initialisation is over.
    let (done, finished) = mpsc::channel::<()>();
    let timer = {
        let engine = engine.clone();
        std::thread::spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = finished.recv_timeout(limits.deadline) {
                engine.increment_epoch();
            }
        })
    };
    let ran = linker.instantiate(&mut store, &module).and_then(|instance| {
        instance
            .get_typed_func::<(), ()>(&mut store, INITIALIZE)?
            .call(&mut store, ())
            .map(|()| instance)
    });
    let _ = done.send(());
    let _ = timer.join();
    let instance = ran.map_err(|e| match e.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::Interrupt) => anyhow::Error::from(e).context(format!(
            "the module's _initialize ran longer than {:?} (--init-deadline) and was stopped",
            limits.deadline
        )),
        _ => anyhow::Error::from(e).context("running the module's _initialize"),
    })?;
    let sealed = store.data().sealed;
    let mut state = Snapshot {
        store: &mut store,
        instance,
    };
    let snapshot = ready(wizer.snapshot(&cx, &mut state))?;
    let snapshot = crate::data_segments::merge(&snapshot)
        .context("merging the snapshot's data segments")?
        .unwrap_or(snapshot);
    let segments = crate::data_segments::count(&snapshot)?;
    anyhow::ensure!(
        segments <= limits.segments,
        "the module's memory after _initialize makes {segments} data segments, more than {} \
         (--init-segments)",
        limits.segments
    );
    Ok(Some((snapshot, sealed)))
}

/// The value of a future that never waits (the snapshot reads the instance
/// through `Snapshot`, whose reads are immediate), without starting a
/// runtime inside the command's own.
fn ready<T>(future: impl std::future::Future<Output = T>) -> T {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(value) = future.as_mut().poll(&mut cx) {
            return value;
        }
    }
}

/// One WASI preview 1 call during initialisation, as `sealed_wasi` answers
/// it in the component.
fn answer(
    name: &str,
    mut caller: Caller<'_, Init>,
    params: &[Val],
    results: &mut [Val],
) -> wasmtime::Result<()> {
    let arg = |i: usize| params.get(i).and_then(Val::i32).unwrap_or_default() as u32 as usize;
    let Some(Extern::Memory(memory)) = caller.get_export("memory") else {
        wasmtime::bail!("the module exports no memory");
    };
    let errno = match sealed_wasi::behaviour(name) {
        None | Some(sealed_wasi::Body::Trap) => {
            wasmtime::bail!("the module called {name} while initialising")
        }
        Some(body) => {
            let (data, state) = memory.data_and_store_mut(&mut caller);
            sealed_wasi::answer(body, data, &mut state.sealed, [arg(0), arg(1), arg(2), arg(3)])
                .map_err(|at| wasmtime::format_err!("{name} wrote outside memory at {at}"))?
        }
    };
    if let Some(result) = results.first_mut() {
        *result = Val::I32(errno as i32);
    }
    Ok(())
}

/// The instance's state as wasmtime-wizer reads it.
struct Snapshot<'a> {
    store: &'a mut Store<Init>,
    instance: Instance,
}

impl InstanceState for Snapshot<'_> {
    async fn global_get(&mut self, name: &str, _: ValType) -> SnapshotVal {
        let global = self.instance.get_global(&mut *self.store, name);
        match global.map(|g| g.get(&mut *self.store)) {
            Some(Val::I32(x)) => SnapshotVal::I32(x),
            Some(Val::I64(x)) => SnapshotVal::I64(x),
            Some(Val::F32(x)) => SnapshotVal::F32(x),
            Some(Val::F64(x)) => SnapshotVal::F64(x),
            Some(Val::V128(x)) => SnapshotVal::V128(x.as_u128()),
            _ => SnapshotVal::I32(0),
        }
    }

    async fn memory_contents(&mut self, name: &str, contents: impl FnOnce(&[u8]) + Send) {
        match self.instance.get_memory(&mut *self.store, name) {
            Some(memory) => contents(memory.data(&*self.store)),
            None => contents(&[]),
        }
    }
}
