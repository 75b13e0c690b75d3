//! The decisions as the rest of Berth asks for them: each served by its
//! configured module, or by the built-in policy when none is configured (or,
//! with `on_error = "builtin"`, when the module fails).

use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use serde::Serialize;

use crate::builtin::Builtins;
use crate::logged::{Answer, Input, Logged};
use crate::module::{ModuleConfig, OnError, PolicyModule};
use crate::shadow::Shadows;
use crate::{
    Candidates, Decision, Failure, NamingRequest, Pairs, PlacementRequest, PolicyEngine, PolicyError,
    Purpose, RetryDecision, Verdicts, Volume,
};
use berth_metrics::{self as metrics, Outcome, Text};

/// What naming decided for a volume.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NamingOutcome {
    /// The name to send as `CreateVolumeRequest.name` (already validated).
    Named(String),
    /// The policy refused to name the volume, with its reason.
    Refused(String),
}

/// One module's counters, for status output.
#[derive(Clone, Debug, Serialize)]
pub struct PolicyStats {
    pub module: String,
    pub decisions: Vec<Decision>,
    pub on_error: OnError,
    pub calls: u64,
    pub failures: u64,
    pub fallbacks: u64,
    /// Calls that found an instance made ahead of need (`instances_made_ahead`).
    pub made_ahead: u64,
    /// `sha256:…` of the module's bytes: what `volume explain` names it by.
    pub digest: String,
    /// The trusted key's file whose signature it passed (empty: none checked).
    pub signed_by: String,
}

pub struct Policies {
    engine: Arc<PolicyEngine>,
    slots: [RwLock<Option<Arc<PolicyModule>>>; Decision::ALL.len()],
    /// Modules deciding beside the live ones, their answers compared, never used.
    shadow_slots: [RwLock<Option<Arc<PolicyModule>>>; Decision::ALL.len()],
    shadows: std::sync::OnceLock<Shadows>,
    /// Shadow modules run on an engine of their own: their instances never
    /// take the live modules' warm pool slots.
    shadow_engine: std::sync::OnceLock<Arc<PolicyEngine>>,
    builtins: Builtins,
}

/// Why a set of modules was not put in service (the set before stays).
#[derive(Debug, thiserror::Error)]
pub enum SetError {
    #[error("policy[{index}]: {error}")]
    Load { index: usize, error: PolicyError },
    #[error("policy[{index}]: {} does not export {decision}", .path.display())]
    NotExported {
        index: usize,
        path: std::path::PathBuf,
        decision: Decision,
    },
    #[error(
        "policy[{index}]: {} serves {decision}, and so does policy[{other}] ({}); give each decision one module (decisions = [...])",
        .path.display(),
        .other_path.display()
    )]
    Twice {
        index: usize,
        path: std::path::PathBuf,
        decision: Decision,
        other: usize,
        other_path: std::path::PathBuf,
    },
}

impl Policies {
    pub fn new(engine: Arc<PolicyEngine>, builtins: Builtins) -> Self {
        Policies {
            engine,
            slots: Default::default(),
            shadow_slots: Default::default(),
            shadows: std::sync::OnceLock::new(),
            shadow_engine: std::sync::OnceLock::new(),
            builtins,
        }
    }

    pub fn engine(&self) -> &Arc<PolicyEngine> {
        &self.engine
    }

    pub fn builtins(&self) -> &Builtins {
        &self.builtins
    }

    fn slot(&self, decision: Decision) -> &RwLock<Option<Arc<PolicyModule>>> {
        &self.slots[decision as usize]
    }

    /// The module serving `decision`, if any.
    pub fn module(&self, decision: Decision) -> Option<Arc<PolicyModule>> {
        self.slot(decision)
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Loads a module and makes it serve `decisions` (every decision it
    /// exports, when empty). Atomic: if loading fails, or the module does not
    /// serve a decision asked of it, the modules in place stay.
    pub fn load(
        &self,
        config: ModuleConfig,
        decisions: &[Decision],
    ) -> Result<Arc<PolicyModule>, PolicyError> {
        let module = Arc::new(PolicyModule::load(&self.engine, config)?);
        let wanted = if decisions.is_empty() {
            module.decisions()
        } else {
            decisions.to_vec()
        };
        if let Some(missing) = wanted.iter().find(|d| !module.serves(**d)) {
            return Err(PolicyError {
                module: module.name().to_string(),
                decision: *missing,
                failure: crate::GuestFailure::NotServed,
            });
        }
        for decision in wanted {
            let old = self
                .slot(decision)
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .replace(module.clone());
            tracing::info!(
                module = module.name(),
                %decision,
                replaced = old.as_ref().map(|m| m.name()),
                "policy module installed"
            );
        }
        Ok(module)
    }

    /// Makes `modules` (each with the decisions it is to serve; every one it
    /// exports when empty) the whole set in service, at once. Each is loaded
    /// and checked first; if one fails to load, does not serve what is asked
    /// of it, or two would serve the same decision, nothing changes. Decisions
    /// no module serves go back to the built-in policies.
    pub fn replace_all(&self, modules: &[(ModuleConfig, Vec<Decision>)]) -> Result<(), SetError> {
        self.replace_set(modules, &[])
    }

    /// [`Policies::replace_all`], with `shadows` (each with the decisions it
    /// shadows) deciding beside the live modules. Shadow modules are numbered
    /// after the live ones in errors, as a set file lists them.
    pub fn replace_set(
        &self,
        modules: &[(ModuleConfig, Vec<Decision>)],
        shadows: &[(ModuleConfig, Vec<Decision>)],
    ) -> Result<(), SetError> {
        let serving = self.load_slots(&self.engine, modules, 0)?;
        let shadows = bounded_by_live(modules, shadows);
        let shadows = shadows.as_slice();
        let shadow_engine = match shadows.is_empty() {
            true => self.engine.clone(),
            false => self.shadow_engine().clone(),
        };
        let shadowing = self.load_slots(&shadow_engine, shadows, modules.len())?;
        if shadowing.iter().any(Option::is_some) {
            self.shadows.get_or_init(|| Shadows::start(shadow_engine.clone()));
        }
        for (d, (new, shadow)) in Decision::ALL.into_iter().zip(serving.into_iter().zip(shadowing)) {
            let new = new.map(|(_, m)| m);
            let shadow = shadow.map(|(_, m)| m);
            tracing::info!(
                module = new.as_ref().map(|m| m.name()),
                shadow = shadow.as_ref().map(|m| m.name()),
                decision = %d,
                "policy in service"
            );
            *self.slot(d).write().unwrap_or_else(|p| p.into_inner()) = new;
            *self.shadow_slots[d as usize]
                .write()
                .unwrap_or_else(|p| p.into_inner()) = shadow;
        }
        Ok(())
    }

    /// Each decision's module among `modules` (numbered from `first` in errors).
    #[allow(clippy::type_complexity)]
    fn load_slots(
        &self,
        engine: &PolicyEngine,
        modules: &[(ModuleConfig, Vec<Decision>)],
        first: usize,
    ) -> Result<[Option<(usize, Arc<PolicyModule>)>; Decision::ALL.len()], SetError> {
        let mut serving: [Option<(usize, Arc<PolicyModule>)>; Decision::ALL.len()] = Default::default();
        for (j, (config, decisions)) in modules.iter().enumerate() {
            let i = first + j;
            let module = Arc::new(
                PolicyModule::load(engine, config.clone())
                    .map_err(|error| SetError::Load { index: i, error })?,
            );
            if let Some(w) = module.warning() {
                tracing::warn!(module = module.name(), "{w}");
            }
            let wanted = if decisions.is_empty() {
                module.decisions()
            } else {
                decisions.clone()
            };
            for d in wanted {
                if !module.serves(d) {
                    return Err(SetError::NotExported {
                        index: i,
                        path: config.path.clone(),
                        decision: d,
                    });
                }
                if let Some((j, _)) = &serving[d as usize] {
                    return Err(SetError::Twice {
                        index: i,
                        path: config.path.clone(),
                        decision: d,
                        other: *j,
                        other_path: modules[*j - first].0.path.clone(),
                    });
                }
                serving[d as usize] = Some((i, module.clone()));
            }
        }
        Ok(serving)
    }

    /// The engine shadow modules run on: the live engine's settings with a
    /// quarter of its slots (one worker decides at a time, but a Python
    /// module's footprint takes a dozen slots' share of the pools); the live
    /// engine if it cannot be started.
    fn shadow_engine(&self) -> &Arc<PolicyEngine> {
        self.shadow_engine.get_or_init(|| {
            let live = self.engine.options();
            let options = crate::EngineOptions {
                concurrency: (live.concurrency / 4).max(16),
                // Shadow decisions are off the live path: their latency
                // does not matter, and all their work counts in their share.
                warm_instances: 0,
                ..live.clone()
            };
            match PolicyEngine::new(options) {
                Ok(e) => Arc::new(e),
                Err(error) => {
                    tracing::warn!(%error, "no engine of their own for shadow modules; they share the live one");
                    self.engine.clone()
                }
            }
        })
    }

    /// The module shadowing `decision`, if any.
    pub fn shadow(&self, decision: Decision) -> Option<Arc<PolicyModule>> {
        self.shadow_slots[decision as usize]
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// What the shadows found: their counts and the latest differences.
    pub fn shadows(&self) -> Option<&Shadows> {
        self.shadows.get()
    }

    /// Hands a live decision to its shadow, if one shadows the decision.
    pub(crate) fn to_shadow(&self, live: &Logged) {
        if let (Some(module), Some(shadows)) = (self.shadow(live.input.decision()), self.shadows.get()) {
            shadows.offer(module, live);
        }
    }

    /// Goes back to the built-in policy for `decision`.
    pub fn remove(&self, decision: Decision) {
        self.slot(decision)
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .take();
    }

    /// Runs `wasm` on the decision's module, applying its `on_error`, or the
    /// built-in policy when no module serves the decision; says who answered.
    pub(crate) async fn decide<T>(
        &self,
        decision: Decision,
        input: impl std::hash::Hash,
        wasm: impl AsyncFnOnce(&PolicyModule) -> Result<T, PolicyError>,
        builtin: impl FnOnce() -> T,
    ) -> (Result<T, PolicyError>, Served) {
        let started = metrics::get().map(|_| Instant::now());
        let observe = |module: Text, outcome, trapped| {
            if let Some(started) = started {
                metrics::decision(&module, decision.interface(), outcome, trapped, started.elapsed());
            }
        };
        let Some(module) = self.module(decision) else {
            let answer = builtin();
            observe(Text::from_static("builtin"), Outcome::Ok, false);
            return (Ok(answer), Served::builtin());
        };
        let mut served = Served {
            module: module.name().to_string(),
            digest: Some(module.digest().to_string()),
            error: None,
        };
        let counters = &module.counters;
        counters.decisions.fetch_add(1, Ordering::Relaxed);
        let input = {
            use std::hash::{BuildHasher, BuildHasherDefault};
            BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default().hash_one(input)
        };
        counters.inputs.note(input);
        let answer = wasm(&module).await;
        let name = || Text::from(module.name());
        match answer {
            Ok(answer) => {
                observe(name(), Outcome::Ok, false);
                (Ok(answer), served)
            }
            Err(error) => {
                counters.failures.fetch_add(1, Ordering::Relaxed);
                counters.failing_inputs.note(input);
                let trapped = error.failure.is_trap();
                served.error = Some(error.to_string());
                match module.config().on_error {
                    OnError::Fail => {
                        observe(name(), Outcome::GuestError, trapped);
                        tracing::warn!(%error, "policy decision failed");
                        (Err(error), served)
                    }
                    OnError::Builtin => {
                        counters.fallbacks.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(%error, "policy decision failed; used the built-in policy");
                        let answer = builtin();
                        observe(name(), Outcome::Fallback, trapped);
                        (Ok(answer), served)
                    }
                }
            }
        }
    }

    /// The backend name for a volume.
    pub async fn volume_name(&self, volume: Volume) -> Result<NamingOutcome, PolicyError> {
        self.volume_name_logged(volume).await.0
    }

    /// [`Policies::volume_name`], and the decision as the decision log keeps it.
    pub async fn volume_name_logged(&self, volume: Volume) -> (Result<NamingOutcome, PolicyError>, Logged) {
        let module = self.module(Decision::Naming);
        let request = NamingRequest {
            volume,
            settings: settings_of(module.as_deref()),
        };
        let (answer, served) = self
            .decide(
                Decision::Naming,
                &request.volume.name,
                async |m| {
                    Ok(match m.volume_name(&self.engine, &request).await? {
                        Ok(name) => NamingOutcome::Named(name),
                        Err(reason) => NamingOutcome::Refused(reason),
                    })
                },
                || NamingOutcome::Named(self.builtins.naming.volume_name(&request.volume)),
            )
            .await;
        let logged = served.logged(
            request.volume.name.clone(),
            Input::Naming(request),
            answer.as_ref().ok().cloned().map(Answer::Naming),
        );
        self.to_shadow(&logged);
        (answer, logged)
    }

    /// A verdict on every candidate node (build the set with [`crate::candidates`]).
    pub async fn place(
        &self,
        volume: Volume,
        purpose: Purpose,
        accessible_topology: Vec<Pairs>,
        candidates: &Candidates,
    ) -> Result<Verdicts, PolicyError> {
        self.place_logged(volume, purpose, accessible_topology, candidates)
            .await
            .0
    }

    /// [`Policies::place`], and the decision as the decision log keeps it.
    pub async fn place_logged(
        &self,
        volume: Volume,
        purpose: Purpose,
        accessible_topology: Vec<Pairs>,
        candidates: &Candidates,
    ) -> (Result<Verdicts, PolicyError>, Logged) {
        let module = self.module(Decision::Placement);
        let request = PlacementRequest {
            volume,
            purpose,
            accessible_topology,
            settings: settings_of(module.as_deref()),
        };
        let (answer, served) = self
            .decide(
                Decision::Placement,
                (&request.volume.name, format!("{:?}", request.purpose)),
                async |m| m.place(&self.engine, &request, candidates).await,
                || self.builtins.placement.place(&request, candidates),
            )
            .await;
        let logged = served.logged(
            request.volume.name.clone(),
            Input::Placement {
                request,
                candidates: Box::new(candidates.clone()),
            },
            answer.as_ref().ok().cloned().map(Answer::Placement),
        );
        self.to_shadow(&logged);
        (answer, logged)
    }

    /// What to do after a failed CSI call. `failure.settings` is filled in here.
    pub async fn classify(&self, failure: Failure) -> Result<RetryDecision, PolicyError> {
        self.classify_logged("", failure).await.0
    }

    /// [`Policies::classify`] for a call on `volume`, and the decision as the
    /// decision log keeps it.
    pub async fn classify_logged(
        &self,
        volume: &str,
        mut failure: Failure,
    ) -> (Result<RetryDecision, PolicyError>, Logged) {
        let module = self.module(Decision::Retry);
        let (answer, served) = if module
            .as_ref()
            .is_some_and(|m| !m.contract().knows(failure.operation))
        {
            // Built for a release without this operation: not its question.
            (Ok(self.builtins.retry.classify(&failure)), Served::builtin())
        } else {
            failure.settings = settings_of(module.as_deref());
            self.decide(
                Decision::Retry,
                (volume, format!("{:?}", failure.operation)),
                async |m| m.classify(&self.engine, &failure).await,
                || self.builtins.retry.classify(&failure),
            )
            .await
        };
        let logged = served.logged(
            volume.to_string(),
            Input::Retry(failure),
            answer.as_ref().ok().cloned().map(Answer::Retry),
        );
        self.to_shadow(&logged);
        (answer, logged)
    }

    /// Counters of every installed module.
    pub fn stats(&self) -> Vec<PolicyStats> {
        let mut seen: Vec<Arc<PolicyModule>> = Vec::new();
        for d in Decision::ALL {
            if let Some(m) = self.module(d)
                && !seen.iter().any(|s| Arc::ptr_eq(s, &m))
            {
                seen.push(m);
            }
        }
        seen.iter()
            .map(|m| PolicyStats {
                module: m.name().to_string(),
                decisions: Decision::ALL
                    .into_iter()
                    .filter(|d| self.module(*d).is_some_and(|x| Arc::ptr_eq(&x, m)))
                    .collect(),
                on_error: m.config().on_error,
                calls: m.counters.decisions.load(Ordering::Relaxed),
                failures: m.counters.failures.load(Ordering::Relaxed),
                fallbacks: m.counters.fallbacks.load(Ordering::Relaxed),
                made_ahead: m.counters.made_ahead.load(Ordering::Relaxed),
                digest: m.digest().to_string(),
                signed_by: m
                    .config()
                    .signed_by
                    .as_ref()
                    .map(|k| k.display().to_string())
                    .unwrap_or_default(),
            })
            .collect()
    }
}

/// Who answered a decision, and how a module failed when it did.
pub(crate) struct Served {
    module: String,
    digest: Option<String>,
    error: Option<String>,
}

impl Served {
    fn builtin() -> Served {
        Served {
            module: "builtin".into(),
            digest: None,
            error: None,
        }
    }

    pub(crate) fn logged(self, volume: String, input: Input, answer: Option<Answer>) -> Logged {
        let answer = match (self.error, answer) {
            (None, Some(a)) => a,
            (error, fallback) => Answer::Failed {
                error: error.unwrap_or_default(),
                fallback: fallback.map(Box::new),
            },
        };
        Logged {
            at_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            volume,
            module: self.module,
            digest: self.digest,
            input,
            answer,
        }
    }
}

pub(crate) fn settings_of(module: Option<&PolicyModule>) -> Vec<(String, String)> {
    module.map(|m| m.settings().to_vec()).unwrap_or_default()
}

/// `shadows` with each deadline at most the live one's for the decisions it
/// shadows (the built-in policies' default where no module is live): a
/// shadow runs off the hot path, but never longer than what it shadows.
fn bounded_by_live(
    live: &[(ModuleConfig, Vec<Decision>)],
    shadows: &[(ModuleConfig, Vec<Decision>)],
) -> Vec<(ModuleConfig, Vec<Decision>)> {
    let default = crate::Limits::default().deadline;
    shadows
        .iter()
        .map(|(config, decisions)| {
            let bound = live
                .iter()
                .filter(|(_, d)| {
                    decisions.is_empty() || d.is_empty() || d.iter().any(|d| decisions.contains(d))
                })
                .map(|(c, _)| c.limits.deadline)
                .max()
                .unwrap_or(default);
            let mut config = config.clone();
            if config.limits.deadline > bound {
                tracing::warn!(
                    module = %config.name,
                    asked = ?config.limits.deadline,
                    bound = ?bound,
                    "a shadow's deadline is bounded by the live module's"
                );
                config.limits.deadline = bound;
            }
            (config, decisions.clone())
        })
        .collect()
}
