//! One policy module: compiled once, checked at load, pre-instantiated, and
//! run in a fresh instance for every decision.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use wasmtime::component::{
    Component, ComponentExportIndex, ComponentNamedList, Instance, InstancePre, Lift, Lower, TypedFunc,
};
use wasmtime::{Store, Trap};

use super::answer::{validate_retry, validate_verdicts, validate_volume_name};
use super::bindings::{Contract, PACKAGE, PACKAGE_VERSION, v0_1};
use super::memory::initial_memory;

/// An initial memory past this is more than a policy's stack and data need.
const LARGE_INITIAL_MEMORY: u64 = 1 << 20;

fn bytes_shown(n: u64) -> String {
    crate::units::format_bytes(usize::try_from(n).unwrap_or(usize::MAX))
}
use super::engine::{GuestState, MemoryLimitExceeded, PolicyEngine};
use super::error::{GuestFailure, PolicyError, bytes};
use super::{Candidates, Decision, Failure, NamingRequest, PlacementRequest, RetryDecision, Verdict};

/// Interfaces a policy module may never import, whatever its context grants.
const FORBIDDEN_IMPORTS: [(&str, &str); 2] = [
    ("wasi:sockets/", "policy modules may not use the network"),
    ("wasi:http/", "policy modules may not use the network"),
];

/// What to do when a module fails to decide.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnError {
    /// The decision fails; the operation waits and is retried later.
    #[default]
    Fail,
    /// Berth decides with its built-in policy instead.
    Builtin,
}

/// Hard limits on one module's decisions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Linear memory a decision may use.
    pub memory_bytes: usize,
    /// Wall-clock time a decision may take, instantiation included.
    pub deadline: Duration,
    /// Size of an answer (strings and lists, in bytes).
    pub max_answer_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_bytes: 32 << 20,
            deadline: Duration::from_millis(100),
            max_answer_bytes: 1 << 20,
        }
    }
}

/// Everything the operator configures for one module.
#[derive(Clone, Debug, Default)]
pub struct ModuleConfig {
    /// The operator's name for the module (logs, errors, metrics).
    pub name: String,
    pub path: PathBuf,
    /// Settings passed to the guest with every decision.
    pub settings: BTreeMap<String, String>,
    pub limits: Limits,
    pub on_error: OnError,
}

impl ModuleConfig {
    /// A module with default limits, named after its file.
    pub fn from_path(path: &Path) -> Self {
        ModuleConfig {
            name: path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "module".into()),
            path: path.to_path_buf(),
            ..Default::default()
        }
    }
}

/// Counters for one module, for status output and tests.
#[derive(Debug, Default)]
pub struct Counters {
    pub decisions: AtomicU64,
    pub failures: AtomicU64,
    pub fallbacks: AtomicU64,
}

/// A loaded, validated, pre-instantiated policy module.
pub struct PolicyModule {
    config: ModuleConfig,
    imports: Vec<String>,
    settings: Vec<(String, String)>,
    pre: InstancePre<GuestState>,
    naming: Option<ComponentExportIndex>,
    placement: Option<ComponentExportIndex>,
    retry: Option<ComponentExportIndex>,
    /// The package release the module was built against.
    contract: Contract,
    pub(crate) counters: Counters,
    /// The largest initial memory its core modules declare.
    initial_memory: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
#[error("answer too large")]
struct TooLarge {
    bytes: usize,
}

impl PolicyModule {
    /// Reads, compiles and validates a module, then instantiates it once under
    /// its limits to prove every exported decision has the right signature.
    pub fn load(engine: &PolicyEngine, config: ModuleConfig) -> Result<Self, PolicyError> {
        let fail = |failure: GuestFailure| PolicyError {
            module: config.name.clone(),
            decision: Decision::Naming,
            failure,
        };
        if config.limits.memory_bytes > engine.options().max_module_memory {
            return Err(fail(GuestFailure::Load(format!(
                "memory limit {} is above the engine's maximum of {}",
                bytes(config.limits.memory_bytes),
                bytes(engine.options().max_module_memory)
            ))));
        }
        let wasm = std::fs::read(&config.path).map_err(|e| {
            fail(GuestFailure::Load(format!(
                "reading {}: {e}",
                config.path.display()
            )))
        })?;
        // The engine also reads the text format (tests write guests in it);
        // anything else is refused before a parser says something obscure.
        let text = wasm.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'(');
        if !wasm.starts_with(b"\0asm") && !text {
            return Err(fail(GuestFailure::Load(format!(
                "{} is not a WebAssembly component (it does not start with the \\0asm header)",
                config.path.display()
            ))));
        }
        let initial_memory = initial_memory(&wasm);
        let component = Component::new(engine.engine(), &wasm).map_err(|e| {
            let hint = if wasm.starts_with(b"\0asm\x01\0\0\0") {
                " (this is a core module; build a component, e.g. with --target wasm32-wasip2)"
            } else {
                ""
            };
            fail(GuestFailure::Load(format!("not a valid component{hint}: {e:#}")))
        })?;
        check_imports(engine, &component).map_err(|e| fail(GuestFailure::Load(e)))?;
        let (exports, contract) =
            find_exports(engine, &component).map_err(|e| fail(GuestFailure::Load(e)))?;
        let pre = engine
            .linker()
            .instantiate_pre(&component)
            .map_err(|e| fail(GuestFailure::Load(format!("{e:#}"))))?;
        let imports = component
            .component_type()
            .imports(engine.engine())
            .map(|(name, _)| name.to_string())
            .collect();
        let module = PolicyModule {
            imports,
            settings: config
                .settings
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            config,
            pre,
            naming: exports[0],
            placement: exports[1],
            retry: exports[2],
            contract,
            counters: Counters::default(),
            initial_memory,
        };
        module.check_signatures(engine)?;
        Ok(module)
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// Something about the module worth fixing, though it loads: today, an
    /// initial memory larger than a policy needs (each decision resets it).
    pub fn warning(&self) -> Option<String> {
        let bytes = self.initial_memory.filter(|b| *b > LARGE_INITIAL_MEMORY)?;
        Some(format!(
            "{} starts with {} of linear memory, which every decision resets; a Rust guest built \
             without the SDK's stack setting (-zstack-size=131072, see guests/README.md) reserves a 1 MiB stack",
            self.config.name,
            bytes_shown(bytes)
        ))
    }

    pub fn config(&self) -> &ModuleConfig {
        &self.config
    }

    /// The package release the module was built against.
    pub fn contract(&self) -> Contract {
        self.contract
    }

    /// The interfaces the module imports (all WASI, or the shared types).
    pub fn imports(&self) -> &[String] {
        &self.imports
    }

    pub fn settings(&self) -> &[(String, String)] {
        &self.settings
    }

    /// The decisions this module exports.
    pub fn decisions(&self) -> Vec<Decision> {
        Decision::ALL
            .into_iter()
            .filter(|d| self.export(*d).is_some())
            .collect()
    }

    pub fn serves(&self, decision: Decision) -> bool {
        self.export(decision).is_some()
    }

    fn export(&self, decision: Decision) -> Option<&ComponentExportIndex> {
        match decision {
            Decision::Naming => self.naming.as_ref(),
            Decision::Placement => self.placement.as_ref(),
            Decision::Retry => self.retry.as_ref(),
        }
    }

    fn check_signatures(&self, engine: &PolicyEngine) -> Result<(), PolicyError> {
        for decision in self.decisions() {
            self.run(engine, decision, |store, instance, index| {
                let result = match decision {
                    Decision::Naming => instance
                        .get_typed_func::<(&NamingRequest,), (Result<String, String>,)>(store, index)
                        .map(drop),
                    Decision::Placement => instance
                        .get_typed_func::<(&PlacementRequest, &Candidates), (Vec<Verdict>,)>(store, index)
                        .map(drop),
                    Decision::Retry if self.contract == Contract::V0_1 => instance
                        .get_typed_func::<(&v0_1::Failure,), (RetryDecision,)>(store, index)
                        .map(drop),
                    Decision::Retry => instance
                        .get_typed_func::<(&Failure,), (RetryDecision,)>(store, index)
                        .map(drop),
                };
                result.map_err(|e| {
                    GuestFailure::Load(format!(
                        "{PACKAGE}/{}.{} does not have the signature of {}: {e:#}",
                        decision.interface(),
                        decision.function(),
                        self.contract
                    ))
                    .into_wasmtime()
                })
            })?;
        }
        Ok(())
    }

    /// Runs `f` against a fresh instance and maps every way it can fail.
    fn run<R: Send>(
        &self,
        engine: &PolicyEngine,
        decision: Decision,
        f: impl FnOnce(&mut Store<GuestState>, &Instance, &ComponentExportIndex) -> wasmtime::Result<R> + Send,
    ) -> Result<R, PolicyError> {
        outside_async(|| self.run_here(engine, decision, f))
    }

    fn run_here<R>(
        &self,
        engine: &PolicyEngine,
        decision: Decision,
        f: impl FnOnce(&mut Store<GuestState>, &Instance, &ComponentExportIndex) -> wasmtime::Result<R>,
    ) -> Result<R, PolicyError> {
        let error = |failure| PolicyError {
            module: self.config.name.clone(),
            decision,
            failure,
        };
        let index = self
            .export(decision)
            .ok_or_else(|| error(GuestFailure::NotServed))?;
        let limits = self.config.limits;
        let mut sandbox = engine.store(limits.memory_bytes, limits.deadline);
        let store = &mut sandbox.store;
        let instance = self.pre.instantiate(&mut *store).map_err(|e| {
            error(match classify(&e, store, &limits) {
                GuestFailure::Trap(why) => GuestFailure::Instantiate(why),
                other => other,
            })
        })?;
        f(store, &instance, index).map_err(|e| error(classify(&e, store, &limits)))
    }

    /// `naming.volume-name`: the guest's name, or its refusal (`Err`).
    pub fn volume_name(
        &self,
        engine: &PolicyEngine,
        request: &NamingRequest,
    ) -> Result<Result<String, String>, PolicyError> {
        let max = self.config.limits.max_answer_bytes;
        let answer = self.run(engine, Decision::Naming, |store, instance, index| {
            let func = typed::<(&NamingRequest,), (Result<String, String>,)>(store, instance, index)?;
            let (answer,) = func.call(&mut *store, (request,))?;
            let (Ok(text) | Err(text)) = &answer;
            within(text.len(), max)?;
            Ok(answer)
        })?;
        if let Ok(name) = &answer {
            validate_volume_name(name).map_err(|why| self.invalid(Decision::Naming, why))?;
        }
        Ok(answer)
    }

    /// `placement.place`: one verdict per candidate.
    pub fn place(
        &self,
        engine: &PolicyEngine,
        request: &PlacementRequest,
        candidates: &Candidates,
    ) -> Result<Vec<Verdict>, PolicyError> {
        candidates.check().map_err(|why| PolicyError {
            module: self.config.name.clone(),
            decision: Decision::Placement,
            failure: GuestFailure::InvalidAnswer(format!("bad request: {why}")),
        })?;
        let max = self.config.limits.max_answer_bytes;
        let verdicts = self.run(engine, Decision::Placement, |store, instance, index| {
            let func = typed::<(&PlacementRequest, &Candidates), (Vec<Verdict>,)>(store, instance, index)?;
            let (verdicts,) = func.call(&mut *store, (request, candidates))?;
            let reasons: usize = verdicts.iter().map(|v| v.reason.len()).sum();
            within(verdicts.len() * std::mem::size_of::<Verdict>() + reasons, max)?;
            Ok(verdicts)
        })?;
        validate_verdicts(&verdicts, candidates.nodes.len())
            .map_err(|why| self.invalid(Decision::Placement, why))?;
        Ok(verdicts)
    }

    /// `retry.classify`: what to do after a failed CSI call.
    pub fn classify(&self, engine: &PolicyEngine, failure: &Failure) -> Result<RetryDecision, PolicyError> {
        let max = self.config.limits.max_answer_bytes;
        let legacy = match self.contract {
            Contract::V0_1 => Some(v0_1::failure(failure).ok_or_else(|| PolicyError {
                module: self.config.name.clone(),
                decision: Decision::Retry,
                failure: GuestFailure::NotServed,
            })?),
            Contract::V0_2 => None,
        };
        let decision = self.run(engine, Decision::Retry, |store, instance, index| {
            let (decision,) = match &legacy {
                Some(old) => typed::<(&v0_1::Failure,), (RetryDecision,)>(store, instance, index)?
                    .call(&mut *store, (old,))?,
                None => typed::<(&Failure,), (RetryDecision,)>(store, instance, index)?
                    .call(&mut *store, (failure,))?,
            };
            if let RetryDecision::GiveUp(reason) = &decision {
                within(reason.len(), max)?;
            }
            Ok(decision)
        })?;
        validate_retry(&decision).map_err(|why| self.invalid(Decision::Retry, why))?;
        Ok(decision)
    }

    fn invalid(&self, decision: Decision, why: String) -> PolicyError {
        PolicyError {
            module: self.config.name.clone(),
            decision,
            failure: GuestFailure::InvalidAnswer(why),
        }
    }
}

/// Runs `f` where blocking is allowed. wasmtime-wasi's synchronous WASI
/// (a guest writing its panic message, say) blocks on tokio, which panics
/// inside an async task; so a decision asked for from async code leaves the
/// async context first.
fn outside_async<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Err(_) => f(),
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::CurrentThread => {
            std::thread::scope(|s| s.spawn(f).join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
        }
        Ok(_) => tokio::task::block_in_place(f),
    }
}

/// The exported function, typed without checking its signature again.
fn typed<P, R>(
    store: &mut Store<GuestState>,
    instance: &Instance,
    index: &ComponentExportIndex,
) -> wasmtime::Result<TypedFunc<P, R>>
where
    P: ComponentNamedList + Lower,
    R: ComponentNamedList + Lift,
{
    let func = instance
        .get_func(&mut *store, index)
        .ok_or_else(|| wasmtime::Error::msg("exported function missing from the instance"))?;
    // SAFETY: `check_signatures` type-checked this export of this component
    // against exactly these parameter and result types when the module loaded,
    // and every instance comes from the same `InstancePre`.
    Ok(unsafe { TypedFunc::new_unchecked(func) })
}

/// Checks an answer's size against the module's bound. The copy out of the
/// guest has already happened by then (wasmtime frees the guest's answer as
/// the call returns), so the copy itself is bounded by the memory limit.
fn within(bytes: usize, max: usize) -> wasmtime::Result<()> {
    if bytes > max {
        return Err(wasmtime::Error::new(TooLarge { bytes }));
    }
    Ok(())
}

impl GuestFailure {
    fn into_wasmtime(self) -> wasmtime::Error {
        wasmtime::Error::new(Carried(self))
    }
}

/// A `GuestFailure` decided inside a closure, carried out through anyhow.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Carried(GuestFailure);

fn classify(e: &wasmtime::Error, store: &Store<GuestState>, limits: &Limits) -> GuestFailure {
    if let Some(Carried(f)) = e.downcast_ref::<Carried>() {
        return f.clone();
    }
    if let Some(t) = e.downcast_ref::<TooLarge>() {
        return GuestFailure::AnswerTooLarge {
            bytes: t.bytes,
            limit: limits.max_answer_bytes,
        };
    }
    if e.chain()
        .any(|c| c.downcast_ref::<MemoryLimitExceeded>().is_some())
    {
        return GuestFailure::MemoryLimit {
            limit: limits.memory_bytes,
        };
    }
    match e.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => GuestFailure::Deadline(limits.deadline),
        Some(trap) => {
            // Guests keep their stack at the start of linear memory (the
            // SDK's layout, and wasm-ld's with a stack size set): one that
            // overflows wraps below zero, and the access after traps as out
            // of bounds. Safe code has no other way to get there.
            let what = if *trap == Trap::MemoryOutOfBounds {
                format!(
                    "{trap}: a stack overflow (deep recursion, or large locals for the guest's stack), or a stray pointer"
                )
            } else {
                trap.to_string()
            };
            let stderr = store.data().stderr_text();
            if stderr.is_empty() {
                GuestFailure::Trap(what)
            } else {
                GuestFailure::Trap(format!("{what}; the guest said: {stderr}"))
            }
        }
        None => GuestFailure::Trap(format!("{e:#}")),
    }
}

fn check_imports(engine: &PolicyEngine, component: &Component) -> Result<(), String> {
    let ty = component.component_type();
    for (name, _) in ty.imports(engine.engine()) {
        if let Some((_, why)) = FORBIDDEN_IMPORTS
            .iter()
            .find(|(prefix, _)| name.starts_with(prefix))
        {
            return Err(format!("it imports {name}, and {why}"));
        }
        let types = name
            .strip_prefix(PACKAGE)
            .and_then(|rest| rest.strip_prefix("/types@"))
            .and_then(Contract::of_version);
        if !name.starts_with("wasi:") && types.is_none() {
            return Err(format!(
                "it imports {name}, which Berth does not provide (policy modules may import only WASI and {PACKAGE}/types)"
            ));
        }
    }
    Ok(())
}

/// Finds each decision's exported function, and the package release they
/// come from; rejects a module that serves none, exports a release this host
/// does not know, or mixes releases.
fn find_exports(
    engine: &PolicyEngine,
    component: &Component,
) -> Result<([Option<ComponentExportIndex>; 3], Contract), String> {
    let ty = component.component_type();
    let names: Vec<String> = ty.exports(engine.engine()).map(|(n, _)| n.to_string()).collect();
    let mut served: Vec<(usize, Decision, &str, Contract)> = Vec::new();
    let mut incompatible = Vec::new();
    for (slot, decision) in Decision::ALL.into_iter().enumerate() {
        let prefix = format!("{PACKAGE}/{}@", decision.interface());
        let Some(name) = names.iter().find(|n| n.starts_with(&prefix)) else {
            continue;
        };
        match Contract::of_version(&name[prefix.len()..]) {
            Some(contract) => served.push((slot, decision, name, contract)),
            None => incompatible.push(name.clone()),
        }
    }
    if let [(_, _, first, contract), rest @ ..] = served.as_slice()
        && let Some((_, _, other, _)) = rest.iter().find(|s| s.3 != *contract)
    {
        return Err(format!(
            "it exports {first} and {other}: one module implements one release of {PACKAGE}"
        ));
    }
    let mut found = [None, None, None];
    for (slot, decision, name, _) in &served {
        let iface = component
            .get_export_index(None, name)
            .ok_or_else(|| format!("cannot look up export {name}"))?;
        let func = component
            .get_export_index(Some(&iface), decision.function())
            .ok_or_else(|| format!("{name} does not export the function {}", decision.function()))?;
        found[*slot] = Some(func);
    }
    if found.iter().all(Option::is_none) {
        let exported = if names.is_empty() {
            "nothing".to_string()
        } else {
            names.join(", ")
        };
        let known: Vec<String> = Contract::ALL.iter().map(ToString::to_string).collect();
        return Err(if incompatible.is_empty() {
            format!(
                "it exports no policy decision ({PACKAGE}/naming, placement or retry @{PACKAGE_VERSION}); it exports {exported}"
            )
        } else {
            format!(
                "it exports {}, which this host cannot use: it implements {}",
                incompatible.join(", "),
                known.join(" and ")
            )
        });
    }
    Ok((found, served[0].3))
}
