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

use anyhow::Context;
use wasmtime::{Caller, Engine, Extern, Instance, Linker, Module, Store, Val};
use wasmtime_wizer::{InstanceState, SnapshotVal, ValType, Wizer};

use super::sealed_wasi::{self, Sealed};

const INITIALIZE: &str = "_initialize";
const WASI: &str = "wasi_snapshot_preview1";

/// The module pre-initialised and where its sealed preview 1 stands, or
/// `None` when it has nothing to run at start.
pub fn preinitialize(core: &[u8]) -> anyhow::Result<Option<(Vec<u8>, Sealed)>> {
    let engine = Engine::default();
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
    let mut store = Store::new(&engine, Sealed::default());
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
    let instance = linker.instantiate(&mut store, &module)?;
    instance
        .get_typed_func::<(), ()>(&mut store, INITIALIZE)?
        .call(&mut store, ())
        .map_err(|e| anyhow::Error::from(e).context("running the module's _initialize"))?;
    let sealed = *store.data();
    let mut state = Snapshot {
        store: &mut store,
        instance,
    };
    let snapshot = ready(wizer.snapshot(&cx, &mut state))?;
    let snapshot = super::data_segments::merge(&snapshot)
        .context("merging the snapshot's data segments")?
        .unwrap_or(snapshot);
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
    mut caller: Caller<'_, Sealed>,
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
            sealed_wasi::answer(body, data, state, [arg(0), arg(1), arg(2), arg(3)])
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
    store: &'a mut Store<Sealed>,
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
