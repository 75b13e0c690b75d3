//! One policy module: compiled once, checked at load, pre-instantiated, and
//! run in a fresh instance for every decision.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use wasmtime::component::{ComponentExportIndex, ComponentNamedList, Instance, Lift, Lower, TypedFunc};
use wasmtime::{Store, Trap};

use crate::answer::{validate_retry, validate_verdicts, validate_volume_name};
use crate::bindings::{Contract, PACKAGE, v0_1, v0_2};
use crate::component::{block_on, check_imports, find_exports, footprint};
use crate::engine::{Footprint, GuestState, MemoryLimitExceeded, PolicyEngine, Sandbox};
use crate::error::{GuestFailure, PolicyError, bytes};
use crate::memory::memory_warning;
pub use crate::module_config::{Limits, ModuleConfig, OnError};
use crate::warm::{Recipe, Warm};
use crate::{
    CandidateColumns, Candidates, Decision, Failure, NamingRequest, PlacementRequest, RetryDecision, Verdicts,
};

/// Counters for one module, for status output, the promotion guard and tests.
#[derive(Debug, Default)]
pub struct Counters {
    pub decisions: AtomicU64,
    pub failures: AtomicU64,
    pub fallbacks: AtomicU64,
    /// Decisions that ran in an instance made ahead of need.
    pub made_ahead: AtomicU64,
    /// The distinct inputs decided, and those that failed: one volume whose
    /// naming fails, retried a hundred times, is one failing input.
    pub inputs: DistinctInputs,
    pub failing_inputs: DistinctInputs,
}

/// How many distinct inputs were seen (by a hash of what identifies one),
/// counted exactly up to [`DistinctInputs::MAX`], then no further.
#[derive(Debug, Default)]
pub struct DistinctInputs(std::sync::Mutex<std::collections::HashSet<u64>>);

impl DistinctInputs {
    pub const MAX: usize = 1 << 16;

    pub fn note(&self, key: u64) {
        let mut seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if seen.len() < Self::MAX {
            seen.insert(key);
        }
    }

    pub fn count(&self) -> u64 {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).len() as u64
    }
}

/// A loaded, validated, pre-instantiated policy module.
pub struct PolicyModule {
    config: ModuleConfig,
    /// `sha256:…` of the module's bytes: what the decision log names it by.
    digest: String,
    imports: Vec<String>,
    settings: Vec<(String, String)>,
    /// How an instance is made, and instances made ahead of need.
    warm: Arc<Warm>,
    naming: Option<ComponentExportIndex>,
    placement: Option<ComponentExportIndex>,
    retry: Option<ComponentExportIndex>,
    admission: Option<ComponentExportIndex>,
    /// The package release the module was built against.
    contract: Contract,
    pub counters: Counters,
    /// Why its initial memory is more than its language needs, if it is.
    memory_warning: Option<String>,
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
        let memory_warning = memory_warning(&wasm);
        let sha256 = crate::compiled::sha256_hex(&wasm);
        if let Some(expected) = config.sha256.as_deref().filter(|e| *e != sha256) {
            return Err(fail(GuestFailure::Load(format!(
                "{} is not the module pinned: its SHA-256 is {sha256}, not {expected}",
                config.path.display()
            ))));
        }
        let component = engine.compile_known(&wasm, &sha256).map_err(|e| {
            let hint = if wasm.starts_with(b"\0asm\x01\0\0\0") {
                " (this is a core module; build a component, e.g. with --target wasm32-wasip2)"
            } else {
                ""
            };
            fail(GuestFailure::Load(format!("not a valid component{hint}: {e:#}")))
        })?;
        check_imports(engine, &component).map_err(|e| fail(GuestFailure::Load(e.to_string())))?;
        let footprint = footprint(&component, &wasm);
        engine
            .fits(&footprint)
            .map_err(|e| fail(GuestFailure::Load(e.to_string())))?;
        let (exports, contract) =
            find_exports(engine, &component).map_err(|e| fail(GuestFailure::Load(e.to_string())))?;
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
            digest: format!("sha256:{sha256}"),
            imports,
            settings: config
                .settings
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            warm: Warm::new(
                engine.maker().clone(),
                Recipe {
                    pre,
                    footprint,
                    limits: config.limits,
                },
            ),
            config,
            naming: exports[0],
            placement: exports[1],
            retry: exports[2],
            admission: exports[3],
            contract,
            counters: Counters::default(),
            memory_warning,
        };
        block_on(module.check_signatures(engine))?;
        Ok(module)
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// Something about the module worth fixing, though it loads: today, an
    /// initial memory larger than its language needs (each decision resets it).
    pub fn warning(&self) -> Option<String> {
        let why = self.memory_warning.as_ref()?;
        Some(format!("{} {why}", self.config.name))
    }

    pub fn config(&self) -> &ModuleConfig {
        &self.config
    }

    /// `sha256:…` of the module's bytes.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// What one of its decisions takes from the engine's instance pools.
    pub fn footprint(&self) -> Footprint {
        self.warm.recipe().footprint
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
            Decision::Admission => self.admission.as_ref(),
        }
    }

    /// Instantiates the module once and types each exported decision against
    /// the signature of the release it was built for.
    async fn check_signatures(&self, engine: &PolicyEngine) -> Result<(), PolicyError> {
        for decision in self.decisions() {
            let (mut sandbox, instance, index) = self.instantiate(engine, decision).await?;
            let store = &mut sandbox.store;
            let v0_1 = self.contract == Contract::V0_1;
            let result = match decision {
                Decision::Naming => instance
                    .get_typed_func::<(&NamingRequest,), (Result<String, String>,)>(store, index)
                    .map(drop),
                Decision::Placement if v0_1 => instance
                    .get_typed_func::<(&PlacementRequest, &v0_1::Candidates), (Vec<v0_1::Verdict>,)>(
                        store, index,
                    )
                    .map(drop),
                Decision::Placement => instance
                    .get_typed_func::<(&PlacementRequest, &CandidateColumns), (Verdicts,)>(store, index)
                    .map(drop),
                Decision::Retry if v0_1 => instance
                    .get_typed_func::<(&v0_1::Failure,), (RetryDecision,)>(store, index)
                    .map(drop),
                Decision::Retry if self.contract == Contract::V0_2 => instance
                    .get_typed_func::<(&v0_2::Failure,), (RetryDecision,)>(store, index)
                    .map(drop),
                Decision::Retry => instance
                    .get_typed_func::<(&Failure,), (RetryDecision,)>(store, index)
                    .map(drop),
                Decision::Admission => instance
                    .get_typed_func::<(&crate::AdmissionRequest,), (crate::AdmissionVerdict,)>(store, index)
                    .map(drop),
            };
            result.map_err(|e| {
                self.error(
                    decision,
                    GuestFailure::Load(format!(
                        "{PACKAGE}/{}.{} does not have the signature of {}: {e:#}",
                        decision.interface(),
                        decision.function(),
                        self.contract
                    )),
                )
            })?;
        }
        Ok(())
    }

    fn error(&self, decision: Decision, failure: GuestFailure) -> PolicyError {
        PolicyError {
            module: self.config.name.clone(),
            decision,
            failure,
        }
    }

    /// A fresh instance of the module in its own sandbox, and the decision's
    /// exported function in it.
    async fn instantiate(
        &self,
        engine: &PolicyEngine,
        decision: Decision,
    ) -> Result<(Sandbox, Instance, &ComponentExportIndex), PolicyError> {
        let index = self
            .export(decision)
            .ok_or_else(|| self.error(decision, GuestFailure::NotServed))?;
        let limits = self.config.limits;
        debug_assert!(
            self.warm.runs_on(engine.maker()),
            "a module decides on the engine it was loaded on"
        );
        let (mut sandbox, parked) = self.warm.sandbox(limits.deadline).await;
        if let Some(instance) = parked {
            self.counters
                .made_ahead
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Ok((sandbox, instance, index));
        }
        match self.warm.recipe().pre.instantiate_async(&mut sandbox.store).await {
            Ok(instance) => Ok((sandbox, instance, index)),
            Err(e) => Err(self.error(
                decision,
                match classify(&e, &sandbox.store, &limits) {
                    GuestFailure::Trap(why) => GuestFailure::Instantiate(why),
                    other => other,
                },
            )),
        }
    }

    /// How many instances of the module are parked, made ahead of need.
    pub fn warm_instances(&self) -> usize {
        self.warm.ready()
    }

    /// A fresh instance's function for `decision`, typed as `P -> R`.
    pub(crate) async fn prepare<P, R>(
        &self,
        engine: &PolicyEngine,
        decision: Decision,
    ) -> Result<(Sandbox, TypedFunc<P, R>), PolicyError>
    where
        P: ComponentNamedList + Lower,
        R: ComponentNamedList + Lift,
    {
        let (mut sandbox, instance, index) = self.instantiate(engine, decision).await?;
        let func = instance
            .get_func(&mut sandbox.store, index)
            .ok_or_else(|| self.error(decision, GuestFailure::Trap("exported function missing".into())))?;
        // SAFETY: `check_signatures` type-checked this export of this component
        // against the parameter and result types of the module's release when
        // it loaded, every caller passes those types for that release, and
        // every instance comes from the same `InstancePre`.
        Ok((sandbox, unsafe { TypedFunc::new_unchecked(func) }))
    }

    /// The typed error for a decision's call that failed.
    pub(crate) fn failed(&self, decision: Decision, e: &wasmtime::Error, sandbox: &Sandbox) -> PolicyError {
        self.error(decision, classify(e, &sandbox.store, &self.config.limits))
    }

    /// `naming.volume-name`: the guest's name, or its refusal (`Err`).
    pub async fn volume_name(
        &self,
        engine: &PolicyEngine,
        request: &NamingRequest,
    ) -> Result<Result<String, String>, PolicyError> {
        let max = self.config.limits.max_answer_bytes;
        let (mut sandbox, func) = self
            .prepare::<(&NamingRequest,), (Result<String, String>,)>(engine, Decision::Naming)
            .await?;
        let answer = async {
            let (answer,) = func.call_async(&mut sandbox.store, (request,)).await?;
            let (Ok(text) | Err(text)) = &answer;
            within(text.len(), max)?;
            Ok(answer)
        }
        .await
        .map_err(|e| self.failed(Decision::Naming, &e, &sandbox))?;
        if let Ok(name) = &answer {
            validate_volume_name(name).map_err(|why| self.invalid(Decision::Naming, why))?;
        }
        Ok(answer)
    }

    /// `placement.place`: a verdict on every candidate.
    pub async fn place(
        &self,
        engine: &PolicyEngine,
        request: &PlacementRequest,
        candidates: &Candidates,
    ) -> Result<Verdicts, PolicyError> {
        let decision = Decision::Placement;
        candidates
            .check()
            .map_err(|why| self.invalid(decision, why.into()))?;
        let max = self.config.limits.max_answer_bytes;
        let verdicts = match self.contract {
            Contract::V0_1 => {
                let old = v0_1::candidates(candidates);
                let (mut sandbox, func) = self
                    .prepare::<(&PlacementRequest, &v0_1::Candidates), (Vec<v0_1::Verdict>,)>(
                        engine, decision,
                    )
                    .await?;
                let verdicts = async {
                    let (verdicts,) = func.call_async(&mut sandbox.store, (request, &old)).await?;
                    let reasons: usize = verdicts.iter().map(|v| v.reason.len()).sum();
                    within(
                        verdicts.len() * std::mem::size_of::<v0_1::Verdict>() + reasons,
                        max,
                    )?;
                    Ok(verdicts)
                }
                .await
                .map_err(|e| self.failed(decision, &e, &sandbox))?;
                if verdicts.len() != candidates.len() {
                    return Err(self.invalid(
                        decision,
                        crate::AnswerError::VerdictCount {
                            verdicts: verdicts.len(),
                            candidates: candidates.len(),
                        },
                    ));
                }
                v0_1::verdicts(&verdicts)
            }
            Contract::V0_2 | Contract::V0_3 | Contract::V0_4 => {
                let (mut sandbox, func) = self
                    .prepare::<(&PlacementRequest, &CandidateColumns), (Verdicts,)>(engine, decision)
                    .await?;
                async {
                    let (verdicts,) = func
                        .call_async(&mut sandbox.store, (request, &candidates.columns))
                        .await?;
                    let reasons: usize = verdicts.reasons.iter().map(|r| r.len() + 16).sum();
                    within(
                        verdicts.refusals.len() * 4 + verdicts.scores.len() * 4 + reasons,
                        max,
                    )?;
                    Ok(verdicts)
                }
                .await
                .map_err(|e| self.failed(decision, &e, &sandbox))?
            }
        };
        validate_verdicts(&verdicts, candidates.len()).map_err(|why| self.invalid(decision, why))?;
        Ok(verdicts)
    }

    /// `retry.classify`: what to do after a failed CSI call.
    pub async fn classify(
        &self,
        engine: &PolicyEngine,
        failure: &Failure,
    ) -> Result<RetryDecision, PolicyError> {
        let decision = Decision::Retry;
        let max = self.config.limits.max_answer_bytes;
        let answer = match self.contract {
            Contract::V0_1 => {
                let old =
                    v0_1::failure(failure).ok_or_else(|| self.error(decision, GuestFailure::NotServed))?;
                let (mut sandbox, func) = self
                    .prepare::<(&v0_1::Failure,), (RetryDecision,)>(engine, decision)
                    .await?;
                let answer = func.call_async(&mut sandbox.store, (&old,)).await;
                answer.map_err(|e| self.failed(decision, &e, &sandbox))?.0
            }
            Contract::V0_2 => {
                let old =
                    v0_2::failure(failure).ok_or_else(|| self.error(decision, GuestFailure::NotServed))?;
                let (mut sandbox, func) = self
                    .prepare::<(&v0_2::Failure,), (RetryDecision,)>(engine, decision)
                    .await?;
                let answer = func.call_async(&mut sandbox.store, (&old,)).await;
                answer.map_err(|e| self.failed(decision, &e, &sandbox))?.0
            }
            Contract::V0_3 | Contract::V0_4 => {
                let (mut sandbox, func) = self
                    .prepare::<(&Failure,), (RetryDecision,)>(engine, decision)
                    .await?;
                let answer = func.call_async(&mut sandbox.store, (failure,)).await;
                answer.map_err(|e| self.failed(decision, &e, &sandbox))?.0
            }
        };
        if let RetryDecision::GiveUp(reason) = &answer
            && reason.len() > max
        {
            return Err(self.error(
                decision,
                GuestFailure::AnswerTooLarge {
                    bytes: reason.len(),
                    limit: max,
                },
            ));
        }
        validate_retry(&answer).map_err(|why| self.invalid(decision, why))?;
        Ok(answer)
    }

    pub(crate) fn invalid(&self, decision: Decision, why: crate::answer::AnswerError) -> PolicyError {
        PolicyError {
            module: self.config.name.clone(),
            decision,
            failure: GuestFailure::InvalidAnswer(why),
        }
    }
}

/// Checks an answer's size against the module's bound. The copy out of the
/// guest has already happened by then (wasmtime frees the guest's answer as
/// the call returns), so the copy itself is bounded by the memory limit.
pub(crate) fn within(bytes: usize, max: usize) -> wasmtime::Result<()> {
    if bytes > max {
        return Err(wasmtime::Error::new(TooLarge { bytes }));
    }
    Ok(())
}

fn classify(e: &wasmtime::Error, store: &Store<GuestState>, limits: &Limits) -> GuestFailure {
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
