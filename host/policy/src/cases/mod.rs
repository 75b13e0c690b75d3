//! Case files for `berth policy test`: inputs and expected outputs, run
//! against a module so guest authors can check a policy in their CI.
//!
//! ```toml
//! [settings]                      # module settings for every case
//! prefix = "team-a"
//!
//! [[case]]
//! name = "prefix, name and hash"
//! volume = { name = "Postgres Data" }
//! expect = { name_prefix = "team-a-postgres-data-", max_length = 128 }
//!
//! [[case]]
//! name = "zone b is out"
//! decision = "placement"
//! volume = { name = "v", requisite_topology = [{ zone = "a" }] }
//! nodes = [{ name = "n1", topology = { zone = "a" } }, { name = "n2", topology = { zone = "b" } }]
//! expect = { eligible = ["n1"], best = "n1", reasons = { n2 = "outside" } }
//!
//! [[case]]
//! name = "unavailable backs off"
//! failure = { operation = "create-volume", code = "UNAVAILABLE", attempt = 2 }
//! expect = { retry_after_ms = { min = 900, max = 1100 } }
//!
//! [[case]]
//! name = "team-a's volumes carry an owner"
//! volume = { name = "team-a/data" }
//! admission = { call = "create-volume", namespace = "team-a", caller = "token:0123" }
//! expect = { changes = ["label owner=team-a"] }
//! ```
//!
//! Omitted inputs take the values of [`crate::samples`].

pub mod admission;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::samples;
use crate::{
    AccessMode, AccessType, Code, Decision, Failure, Health, NamingRequest, Operation, Pairs, PlacementNode,
    PlacementRequest, PolicyEngine, PolicyModule, Purpose, RetryDecision, Volume,
};

type Map = BTreeMap<String, String>;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaseFile {
    #[serde(default)]
    pub settings: Map,
    #[serde(rename = "case", default)]
    pub cases: Vec<Case>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    pub name: String,
    /// Needed only when the module serves more than one decision.
    pub decision: Option<Decision>,
    /// Merged over the file's settings.
    #[serde(default)]
    pub settings: Map,
    pub volume: Option<VolumeInput>,
    pub purpose: Option<String>,
    #[serde(default)]
    pub accessible_topology: Vec<Map>,
    #[serde(default)]
    pub nodes: Vec<NodeInput>,
    pub failure: Option<FailureInput>,
    /// An admission case's request beyond its volume.
    pub admission: Option<admission::AdmissionInput>,
    pub expect: Expect,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VolumeInput {
    name: Option<String>,
    id: Option<String>,
    driver: Option<String>,
    required_bytes: Option<u64>,
    limit_bytes: Option<u64>,
    access_mode: Option<String>,
    access_type: Option<String>,
    #[serde(default)]
    parameters: Map,
    #[serde(default)]
    labels: Map,
    #[serde(default)]
    requisite_topology: Vec<Map>,
    #[serde(default)]
    preferred_topology: Vec<Map>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeInput {
    name: String,
    #[serde(default)]
    topology: Map,
    max_volumes: Option<u64>,
    #[serde(default)]
    published: u64,
    #[serde(default)]
    labels: Map,
    health: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailureInput {
    operation: String,
    code: String,
    message: Option<String>,
    #[serde(default = "one")]
    attempt: u32,
    #[serde(default)]
    elapsed_ms: u64,
    driver: Option<String>,
}

fn one() -> u32 {
    1
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    // naming
    name: Option<String>,
    name_prefix: Option<String>,
    max_length: Option<usize>,
    refused: Option<bool>,
    refusal_contains: Option<String>,
    // placement
    eligible: Option<Vec<String>>,
    best: Option<String>,
    #[serde(default)]
    reasons: Map,
    // retry
    retry_after_ms: Option<Range>,
    give_up: Option<bool>,
    give_up_contains: Option<String>,
    done: Option<bool>,
    // admission
    pub(crate) admitted: Option<bool>,
    pub(crate) denial_contains: Option<String>,
    /// Each change as `volume explain` shows it, e.g. `label owner=team-a`.
    pub(crate) changes: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Range {
    Exact(u64),
    Between { min: u64, max: u64 },
}

/// The outcome of one case.
#[derive(Debug, Serialize)]
pub struct CaseResult {
    pub name: String,
    pub decision: Option<Decision>,
    pub passed: bool,
    /// What went wrong, or what the module answered.
    pub detail: String,
    pub micros: u64,
}

/// Why a case file was refused.
#[derive(Debug, thiserror::Error)]
pub enum CaseFileError {
    /// Not TOML, or fields a case file does not have (the message names the line).
    #[error("{0}")]
    Syntax(#[from] toml::de::Error),
    #[error("the file has no [[case]] entries")]
    Empty,
}

/// Why a case failed: it could not run, or the answer was not the one expected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failed(pub String);

impl From<String> for Failed {
    fn from(why: String) -> Self {
        Failed(why)
    }
}

impl From<&str> for Failed {
    fn from(why: &str) -> Self {
        Failed(why.to_string())
    }
}

/// Parses a case file; errors name the line and the field.
pub fn parse(text: &str) -> Result<CaseFile, CaseFileError> {
    let file: CaseFile = toml::from_str(text)?;
    if file.cases.is_empty() {
        return Err(CaseFileError::Empty);
    }
    Ok(file)
}

/// Runs every case against `module`; a case that cannot run fails with the reason.
pub async fn run(engine: &PolicyEngine, module: &PolicyModule, file: &CaseFile) -> Vec<CaseResult> {
    let mut results = Vec::with_capacity(file.cases.len());
    for case in &file.cases {
        let started = Instant::now();
        let outcome = match pick_decision(module, case) {
            Ok(d) => run_one(engine, module, file, case, d).await,
            Err(why) => Err(why),
        };
        let (passed, detail) = match outcome {
            Ok(answer) => (true, answer),
            Err(why) => (false, why.0),
        };
        results.push(CaseResult {
            name: case.name.clone(),
            decision: pick_decision(module, case).ok(),
            passed,
            detail,
            micros: Duration::as_micros(&started.elapsed()) as u64,
        });
    }
    results
}

fn pick_decision(module: &PolicyModule, case: &Case) -> Result<Decision, Failed> {
    if let Some(d) = case.decision {
        return if module.serves(d) {
            Ok(d)
        } else {
            Err(Failed::from(format!("the module does not serve {d}")))
        };
    }
    match module.decisions().as_slice() {
        [only] => Ok(*only),
        many => Err(Failed::from(format!(
            "the module serves {}; say which with `decision = \"...\"`",
            many.iter()
                .map(Decision::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

impl Expect {
    /// The expectations set, by decision.
    fn keys(&self) -> [(Decision, Vec<&'static str>); 4] {
        let set =
            |pairs: &[(&'static str, bool)]| pairs.iter().filter(|(_, s)| *s).map(|(k, _)| *k).collect();
        [
            (
                Decision::Naming,
                set(&[
                    ("name", self.name.is_some()),
                    ("name_prefix", self.name_prefix.is_some()),
                    ("max_length", self.max_length.is_some()),
                    ("refused", self.refused.is_some()),
                    ("refusal_contains", self.refusal_contains.is_some()),
                ]),
            ),
            (
                Decision::Placement,
                set(&[
                    ("eligible", self.eligible.is_some()),
                    ("best", self.best.is_some()),
                    ("reasons", !self.reasons.is_empty()),
                ]),
            ),
            (
                Decision::Retry,
                set(&[
                    ("retry_after_ms", self.retry_after_ms.is_some()),
                    ("give_up", self.give_up.is_some()),
                    ("give_up_contains", self.give_up_contains.is_some()),
                    ("done", self.done.is_some()),
                ]),
            ),
            (
                Decision::Admission,
                set(&[
                    ("admitted", self.admitted.is_some()),
                    ("denial_contains", self.denial_contains.is_some()),
                    ("changes", self.changes.is_some()),
                ]),
            ),
        ]
    }

    /// Refuses expectations of another decision, and expectations no answer
    /// could meet (a name and a refusal, a give-up and a retry...).
    fn check(&self, decision: Decision) -> Result<(), Failed> {
        for (d, keys) in self.keys() {
            if d != decision && !keys.is_empty() {
                return Err(Failed::from(format!(
                    "expect.{} is for {d} cases; this case is a {decision} case",
                    keys.join(", expect.")
                )));
            }
        }
        let named = self.name.is_some() || self.name_prefix.is_some() || self.max_length.is_some();
        let refused = self.refused == Some(true) || self.refusal_contains.is_some();
        if named && refused {
            return Err(Failed::from(
                "expect asks for a name and for a refusal; an answer is one or the other",
            ));
        }
        if self.refused == Some(false) && self.refusal_contains.is_some() {
            return Err(Failed::from(
                "expect.refused = false contradicts expect.refusal_contains",
            ));
        }
        let gives_up = self.give_up == Some(true) || self.give_up_contains.is_some();
        let retries = self.retry_after_ms.is_some();
        let done = self.done == Some(true);
        if [gives_up, retries, done].iter().filter(|x| **x).count() > 1 {
            return Err(Failed::from(
                "expect asks for more than one of retry_after_ms, give_up and done; a decision is one of them",
            ));
        }
        if self.give_up == Some(false) && self.give_up_contains.is_some() {
            return Err(Failed::from(
                "expect.give_up = false contradicts expect.give_up_contains",
            ));
        }
        if let Some(Range::Between { min, max }) = &self.retry_after_ms
            && min > max
        {
            return Err(Failed::from(format!(
                "expect.retry_after_ms: min {min} is more than max {max}"
            )));
        }
        Ok(())
    }
}

async fn run_one(
    engine: &PolicyEngine,
    module: &PolicyModule,
    file: &CaseFile,
    case: &Case,
    decision: Decision,
) -> Result<String, Failed> {
    let mut settings = file.settings.clone();
    settings.extend(case.settings.clone());
    let settings = to_pairs(&settings);
    let volume = volume(case.volume.as_ref())?;
    let e = &case.expect;
    e.check(decision)?;
    match decision {
        Decision::Naming => {
            let answer = module
                .volume_name(engine, &NamingRequest { volume, settings })
                .await
                .map_err(|e| e.failure.to_string())?;
            check_naming(e, answer)
        }
        Decision::Placement => {
            let nodes = case.nodes.iter().map(node).collect::<Result<Vec<_>, _>>()?;
            let purpose = Purpose::from_wit_name(case.purpose.as_deref().unwrap_or("create"))
                .map_err(|e| e.to_string())?;
            let request = PlacementRequest {
                volume,
                purpose,
                accessible_topology: case.accessible_topology.iter().map(to_pairs).collect(),
                settings,
            };
            let verdicts = module
                .place(engine, &request, &crate::candidates(&nodes))
                .await
                .map_err(|e| e.failure.to_string())?;
            check_placement(e, &nodes, &verdicts)
        }
        Decision::Retry => {
            let input = case
                .failure
                .as_ref()
                .ok_or("a retry case needs `failure = { operation = ..., code = ... }`")?;
            let mut failure = samples::failure(
                Operation::from_wit_name(&input.operation).map_err(|e| e.to_string())?,
                Code::from_name(&input.code).map_err(|e| e.to_string())?,
                input.attempt,
            );
            failure.elapsed_ms = input.elapsed_ms;
            failure.settings = settings;
            if let Some(m) = &input.message {
                failure.message = m.clone();
            }
            if let Some(d) = &input.driver {
                failure.driver = d.clone();
            }
            let decision = module
                .classify(engine, &failure)
                .await
                .map_err(|e| e.failure.to_string())?;
            check_retry(e, &failure, decision)
        }
        Decision::Admission => {
            let request = admission::request(case.admission.as_ref(), volume, settings)?;
            let verdict = module
                .admit(engine, &request)
                .await
                .map_err(|e| e.failure.to_string())?;
            admission::check(e, &verdict)
        }
    }
}

fn check_naming(e: &Expect, answer: Result<String, String>) -> Result<String, Failed> {
    match answer {
        Ok(name) => {
            if e.refused == Some(true) || e.refusal_contains.is_some() {
                return Err(Failed::from(format!("expected a refusal, got the name {name:?}")));
            }
            if let Some(want) = &e.name
                && &name != want
            {
                return Err(Failed::from(format!("expected the name {want:?}, got {name:?}")));
            }
            if let Some(prefix) = &e.name_prefix
                && !name.starts_with(prefix.as_str())
            {
                return Err(Failed::from(format!(
                    "expected a name starting {prefix:?}, got {name:?}"
                )));
            }
            if let Some(max) = e.max_length
                && name.len() > max
            {
                return Err(Failed::from(format!(
                    "expected at most {max} bytes, got {} ({name:?})",
                    name.len()
                )));
            }
            Ok(format!("named {name:?}"))
        }
        Err(reason) => {
            if e.refused == Some(true) || e.refusal_contains.is_some() {
                if let Some(part) = &e.refusal_contains
                    && !reason.contains(part.as_str())
                {
                    return Err(Failed::from(format!(
                        "expected a refusal containing {part:?}, got {reason:?}"
                    )));
                }
                return Ok(format!("refused: {reason}"));
            }
            Err(Failed::from(format!("expected a name, got a refusal: {reason}")))
        }
    }
}

fn check_placement(
    e: &Expect,
    nodes: &[PlacementNode],
    verdicts: &crate::Verdicts,
) -> Result<String, Failed> {
    let eligible: Vec<&str> = nodes
        .iter()
        .enumerate()
        .filter(|(i, _)| verdicts.is_eligible(*i))
        .map(|(_, n)| n.name.as_str())
        .collect();
    if let Some(want) = &e.eligible {
        let mut got = eligible.clone();
        got.sort_unstable();
        let mut want: Vec<&str> = want.iter().map(String::as_str).collect();
        want.sort_unstable();
        if got != want {
            return Err(Failed::from(format!("expected eligible {want:?}, got {got:?}")));
        }
    }
    let best = crate::ranked(verdicts).first().map(|&i| nodes[i].name.as_str());
    if let Some(want) = &e.best
        && best != Some(want.as_str())
    {
        let got = best.map_or("no eligible node".into(), |b| format!("{b:?}"));
        return Err(Failed::from(format!(
            "expected {want:?} to score best, got {got}"
        )));
    }
    for (name, part) in &e.reasons {
        let i = nodes
            .iter()
            .position(|n| &n.name == name)
            .ok_or_else(|| format!("expect.reasons names {name:?}, which is not a node of this case"))?;
        match verdicts.reason(i) {
            Some(reason) if reason.contains(part.as_str()) => {}
            Some(reason) => {
                return Err(Failed::from(format!(
                    "expected the reason for {name} to contain {part:?}, got {reason:?}"
                )));
            }
            None => {
                return Err(Failed::from(format!(
                    "expected {name} refused for a reason containing {part:?}; it is eligible"
                )));
            }
        }
    }
    match best {
        Some(best) => Ok(format!("eligible {eligible:?}, best {best:?}")),
        None => Ok("none eligible".into()),
    }
}

fn check_retry(e: &Expect, failure: &Failure, decision: RetryDecision) -> Result<String, Failed> {
    let shown = match &decision {
        RetryDecision::RetryAfter(ms) => format!("retry after {ms} ms"),
        RetryDecision::GiveUp(r) => format!("give up: {r}"),
        RetryDecision::Done => "done".to_string(),
    };
    let wrong = |want: &str| {
        Err(Failed::from(format!(
            "expected {want} for attempt {}, got {shown}",
            failure.attempt
        )))
    };
    match (&decision, &e.retry_after_ms) {
        (RetryDecision::RetryAfter(ms), Some(Range::Exact(want))) if ms != want => {
            return wrong(&format!("{want} ms"));
        }
        (RetryDecision::RetryAfter(ms), Some(Range::Between { min, max })) if ms < min || ms > max => {
            return wrong(&format!("{min} to {max} ms"));
        }
        (RetryDecision::RetryAfter(_), _) => {}
        (_, Some(_)) => return wrong("a retry"),
        _ => {}
    }
    let gave_up = matches!(decision, RetryDecision::GiveUp(_));
    if e.give_up == Some(true) && !gave_up || e.give_up == Some(false) && gave_up {
        return wrong(if gave_up { "no give-up" } else { "a give-up" });
    }
    if let Some(part) = &e.give_up_contains {
        match &decision {
            RetryDecision::GiveUp(r) if r.contains(part.as_str()) => {}
            _ => return wrong(&format!("a give-up containing {part:?}")),
        }
    }
    if e.done == Some(true) && decision != RetryDecision::Done {
        return wrong("done");
    }
    Ok(shown)
}

fn to_pairs(map: &Map) -> Pairs {
    map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

pub(crate) fn volume(input: Option<&VolumeInput>) -> Result<Volume, Failed> {
    let default = VolumeInput::default();
    let i = input.unwrap_or(&default);
    let mut v = samples::volume(i.name.as_deref().unwrap_or("example"));
    if let Some(id) = &i.id {
        v.id = id.clone();
    }
    if let Some(d) = &i.driver {
        v.driver = d.clone();
    }
    if let Some(b) = i.required_bytes {
        v.capacity.required_bytes = b;
    }
    if let Some(b) = i.limit_bytes {
        v.capacity.limit_bytes = b;
    }
    if let Some(m) = &i.access_mode {
        v.access_mode = AccessMode::from_wit_name(m).map_err(|e| e.to_string())?;
    }
    if let Some(t) = &i.access_type {
        v.access_type = AccessType::from_wit_name(t).map_err(|e| e.to_string())?;
    }
    v.parameters = to_pairs(&i.parameters);
    v.labels = to_pairs(&i.labels);
    v.requisite_topology = i.requisite_topology.iter().map(to_pairs).collect();
    v.preferred_topology = i.preferred_topology.iter().map(to_pairs).collect();
    Ok(v)
}

fn node(i: &NodeInput) -> Result<PlacementNode, Failed> {
    let mut n = samples::node(&i.name, &[]);
    n.topology = to_pairs(&i.topology);
    n.max_volumes = i.max_volumes;
    n.published_volumes = i.published;
    n.labels = to_pairs(&i.labels);
    n.health = Health::from_wit_name(i.health.as_deref().unwrap_or("healthy")).map_err(|e| e.to_string())?;
    Ok(n)
}
