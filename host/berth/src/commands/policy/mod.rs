//! `berth policy ...`: check and test policy modules, the tools guest authors
//! use locally and in their CI.

pub mod component;
pub mod diff;
pub mod new;
pub mod oci;
pub mod replay;
pub mod sdk;
pub mod set;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use berth::policy::cases::{self, CaseResult};
use berth::policy::samples::{self, node, volume};
use berth::policy::{
    Code, Decision, EngineOptions, Limits, ModuleConfig, NamingRequest, Operation, PlacementRequest,
    PolicyEngine, PolicyModule, Purpose, RetryDecision,
};
use clap::{Args, Subcommand};
use serde::Serialize;

use crate::output::{Output, say};

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Load a module under its limits: which decisions it serves, what it
    /// imports, and whether it decides a sample input.
    #[command(
        after_help = "Example:\n  berth policy check target/wasm32-wasip2/release/my_policy.wasm --setting prefix=team-a"
    )]
    Check(CheckArgs),
    /// Run a file of cases (inputs and expected answers) against a module and
    /// report each pass or failure. Exits 1 when any case fails.
    #[command(
        after_help = "The case file format is documented in the Berth book (Writing a policy); \
the sample guests' case files are in guests/*/cases.toml.\n\nExample:\n  berth policy test my_policy.wasm cases.toml"
    )]
    Test(TestArgs),
    /// Make a policy project of its own, in Rust, Python, JavaScript,
    /// TypeScript or Go, that builds and passes its cases as generated; its
    /// README says how.
    #[command(
        after_help = "Examples:\n  berth policy new team-naming --lang python --decisions naming\n  \
berth policy new site-policy --lang rust --dir ~/src/site-policy\n  \
berth policy new edge-placement --lang ts --decisions placement   # then: npm install && npm run build && npm test\n  \
berth policy new team-naming --lang go --decisions naming          # then: make && make test"
    )]
    New(crate::commands::policy::new::NewArgs),
    /// Make a core WebAssembly module (Go's GOOS=wasip1, C with wasi-libc)
    /// a component Berth loads: Berth's WIT embedded for the world it
    /// implements, its WASI preview 1 imports adapted.
    #[command(
        after_help = "Example:\n  GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o core.wasm .\n  \
berth policy component core.wasm --world naming-policy --to naming.wasm"
    )]
    Component(crate::commands::policy::component::ComponentArgs),
    /// Load the [[policy]] modules of the server's config file again and swap
    /// them in, all at once (as SIGHUP does); if any fails, the modules in
    /// service stay and the error says why.
    Reload {
        #[command(flatten)]
        api: crate::client::ApiArgs,
    },
    /// Publish a module to an OCI registry, as the WebAssembly artifact
    /// (config application/vnd.wasm.config.v0+json, one application/wasm
    /// layer); prints the reference pinned by digest, for [[policy]] module.
    #[command(
        after_help = "Example:\n  berth policy push naming.wasm oci://registry.example.com/policies/naming:v1"
    )]
    Push(crate::commands::policy::oci::PushArgs),
    /// Put a policy set file ([[policy]] tables, as in berth.toml) in service
    /// on every server: each module pinned by digest (a registry tag resolved,
    /// a file hashed), loaded, then stored as the set's next version. If any
    /// module fails, nothing changes.
    #[command(after_help = "Example:\n  berth policy apply policies.toml")]
    Apply {
        /// The set file.
        file: PathBuf,
        #[command(flatten)]
        api: crate::client::ApiArgs,
    },
    /// The cluster's policy set: its version, every module's digest, and the
    /// modules' counters.
    Status {
        #[command(flatten)]
        api: crate::client::ApiArgs,
    },
    /// Fetch a module from an OCI registry, checking every byte against its
    /// digest: into a file, or an OCI image layout directory for sites
    /// without a registry.
    #[command(
        after_help = "Examples:\n  berth policy pull oci://registry.example.com/policies/naming:v1 --to naming.wasm\n  \
berth policy pull oci://registry.example.com/policies/naming@sha256:… --to ./policies/"
    )]
    Pull(crate::commands::policy::oci::PullArgs),
    /// Sign a module in a registry with an ECDSA P-256 key, as `cosign sign
    /// --key` does (a simple-signing payload naming its digest, stored under
    /// the tag sha256-<digest>.sig); `cosign verify --key` accepts it.
    #[command(
        after_help = "Example:\n  berth policy sign oci://registry.example.com/policies/naming:v1 --key team.key"
    )]
    Sign(crate::commands::policy::oci::SignArgs),
    /// Check a module's signatures against trusted public keys (cosign's
    /// format); exits 1 unless one of the keys signed this very digest.
    #[command(
        after_help = "Example:\n  berth policy verify oci://registry.example.com/policies/naming:v1 --key cosign.pub"
    )]
    Verify(crate::commands::policy::oci::VerifyArgs),
    /// Make a signing key pair in cosign's format (as `cosign generate-key-pair`):
    /// PREFIX.key, encrypted with the password in COSIGN_PASSWORD, and PREFIX.pub.
    #[command(
        after_help = "Example:\n  COSIGN_PASSWORD=… berth policy generate-key team\n  \
berth policy sign oci://registry.example.com/policies/naming:v1 --key team.key"
    )]
    GenerateKey(crate::commands::policy::oci::GenerateKeyArgs),
    /// Ask a candidate module every decision in the decision log, as a live
    /// decision would (same sandbox and limits), and report what it would
    /// change: names, eligible and best nodes, retry verdicts and delays.
    /// Nothing changes on the cluster.
    #[command(
        after_help = "Examples:\n  berth policy replay naming-v2.wasm --since 24h\n  \
berth policy replay oci://registry.example.com/policies/placement@sha256:… --decision placement -o json"
    )]
    Replay(Box<crate::commands::policy::replay::ReplayArgs>),
    /// What the shadow modules (`mode = "shadow"` in the policy set) decided
    /// beside the live ones: per module, how many decisions were the same,
    /// different, failed or dropped, and the latest differences with their inputs.
    Diff(crate::commands::policy::diff::DiffArgs),
    /// Add a module to the policy set in service, shadowing decisions: it
    /// decides beside the live module on every live decision, and its answers
    /// are compared (`policy diff`), never used. Stored as the set's next version.
    #[command(
        after_help = "Example:\n  berth policy shadow naming-v2.wasm --decision naming\n  berth policy diff"
    )]
    Shadow(ShadowArgs),
    /// Make the module shadowing a decision live in its place, on every
    /// server, as the set's next version. For the guard's window
    /// ([policy_guard]) Berth rolls back by itself if the promoted module
    /// fails too many of its decisions.
    #[command(after_help = "Example:\n  berth policy promote --decision naming")]
    Promote {
        /// The decision (default: every decision a module shadows).
        #[arg(long)]
        decision: Option<Decision>,
        #[command(flatten)]
        api: crate::client::ApiArgs,
    },
    /// Return to an earlier version of the policy set (the one before by
    /// default), stored as the next version; `policy status` lists the kept ones.
    #[command(after_help = "Examples:\n  berth policy rollback\n  berth policy rollback --to 3")]
    Rollback {
        /// The version to return to.
        #[arg(long)]
        to: Option<u64>,
        #[command(flatten)]
        api: crate::client::ApiArgs,
    },
}

#[derive(Debug, Args)]
pub struct ShadowArgs {
    /// The module: a .wasm file, or oci://HOST/REPOSITORY@sha256:….
    pub module: String,
    /// A decision it shadows; repeatable.
    #[arg(long = "decision", required = true)]
    pub decisions: Vec<Decision>,
    /// Its name in logs, metrics and `policy diff` (default: the file's or repository's).
    #[arg(long)]
    pub name: Option<String>,
    /// A setting passed to it, KEY=VALUE; repeatable.
    #[arg(long = "setting", value_parser = parse_setting)]
    pub settings: Vec<(String, String)>,
    #[command(flatten)]
    pub api: crate::client::ApiArgs,
}

#[derive(Debug, Args)]
pub struct LimitArgs {
    /// Linear memory a decision may use (e.g. 32MiB).
    #[arg(long, default_value = "32MiB", value_parser = berth::model::units::parse_size_flag)]
    pub memory: usize,
    /// Time a decision may take, instantiation included (e.g. 100ms).
    #[arg(long, default_value = "100ms", value_parser = humantime::parse_duration)]
    pub deadline: Duration,
    /// Largest answer the host accepts (e.g. 1MiB).
    #[arg(long, default_value = "1MiB", value_parser = berth::model::units::parse_size_flag)]
    pub max_answer: usize,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The module: a WebAssembly component (.wasm).
    pub module: PathBuf,
    /// A setting passed to the module, KEY=VALUE; repeatable.
    #[arg(long = "setting", value_parser = parse_setting)]
    pub settings: Vec<(String, String)>,
    #[command(flatten)]
    pub limits: LimitArgs,
}

#[derive(Debug, Args)]
pub struct TestArgs {
    /// The module: a WebAssembly component (.wasm).
    pub module: PathBuf,
    /// The case file (TOML).
    pub cases: PathBuf,
    #[command(flatten)]
    pub limits: LimitArgs,
}

impl Default for LimitArgs {
    /// The limits a module gets when none are given, as in `[[policy]]`.
    fn default() -> Self {
        let limits = berth::policy::Limits::default();
        LimitArgs {
            memory: limits.memory_bytes,
            deadline: limits.deadline,
            max_answer: limits.max_answer_bytes,
        }
    }
}

pub(super) fn parse_setting(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("{text:?} is not KEY=VALUE")),
    }
}

/// `berth policy reload`, through the API.
async fn reload(api: crate::client::ApiArgs, output: Output) -> anyhow::Result<ExitCode> {
    let mut client = crate::client::connect(&api).await?;
    let answer = client
        .reload_policies(berth_proto::berth::v1::ReloadPoliciesRequest {})
        .await
        .map_err(crate::client::grpc)?
        .into_inner();
    let views = crate::commands::status::policy_views(answer.policies);
    match output {
        Output::Json => crate::output::print_json(&views)?,
        Output::Text => {
            say!("reloaded");
            crate::commands::status::print_policies(&views);
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn run(cmd: PolicyCommand, output: Output) -> anyhow::Result<ExitCode> {
    match cmd {
        PolicyCommand::Check(args) => check(args, output).await,
        PolicyCommand::Test(args) => test(args, output).await,
        PolicyCommand::New(args) => crate::commands::policy::new::run(args).map(|()| ExitCode::SUCCESS),
        PolicyCommand::Component(args) => {
            crate::commands::policy::component::run(args).map(|()| ExitCode::SUCCESS)
        }
        PolicyCommand::Reload { api } => reload(api, output).await,
        PolicyCommand::Push(args) => crate::commands::policy::oci::push(args, output).await,
        PolicyCommand::Apply { file, api } => crate::commands::policy::set::apply(file, api, output).await,
        PolicyCommand::Status { api } => crate::commands::policy::set::status(api, output).await,
        PolicyCommand::Pull(args) => crate::commands::policy::oci::pull(args, output).await,
        PolicyCommand::Sign(args) => crate::commands::policy::oci::sign(args, output).await,
        PolicyCommand::Verify(args) => crate::commands::policy::oci::verify(args, output).await,
        PolicyCommand::GenerateKey(args) => crate::commands::policy::oci::generate_key(args, output),
        PolicyCommand::Replay(args) => crate::commands::policy::replay::replay(*args, output).await,
        PolicyCommand::Diff(args) => crate::commands::policy::diff::diff(args, output).await,
        PolicyCommand::Shadow(args) => crate::commands::policy::set::shadow(args, output).await,
        PolicyCommand::Promote { decision, api } => {
            crate::commands::policy::set::promote(decision, api, output).await
        }
        PolicyCommand::Rollback { to, api } => crate::commands::policy::set::rollback(to, api, output).await,
    }
}

/// Where the CLI keeps compiled modules: `$XDG_CACHE_HOME/berth/compiled`,
/// else `~/.cache/berth/compiled`; none without either (every run compiles).
fn compiled_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("berth").join("compiled"))
}

pub(super) fn load(
    path: &Path,
    limits: &LimitArgs,
    settings: BTreeMap<String, String>,
) -> anyhow::Result<(PolicyEngine, PolicyModule, Duration)> {
    let options = EngineOptions {
        concurrency: 4,
        max_module_memory: limits.memory.max(EngineOptions::default().max_module_memory),
        pooling: true,
        compiled_dir: compiled_dir(),
        shadow_share: None,
        warm_instances: EngineOptions::default().warm_instances,
    };
    let engine = PolicyEngine::new(options).context("starting the WebAssembly engine")?;
    // A large module (Python's, JavaScript's) takes a while to compile the
    // first time: say so, and that it is kept for the next runs.
    if let Ok(wasm) = std::fs::read(path)
        && !engine.compiled_before(&wasm)
        && wasm.len() > 1 << 20
    {
        eprintln!(
            "compiling {} ({}) once; later runs load it compiled{}",
            path.display(),
            berth::model::units::format_bytes(wasm.len()),
            compiled_dir().map_or(String::new(), |d| format!(" from {}", d.display()))
        );
    }
    let mut config = ModuleConfig::from_path(path);
    config.settings = settings;
    config.limits = Limits {
        memory_bytes: limits.memory,
        deadline: limits.deadline,
        max_answer_bytes: limits.max_answer,
    };
    let started = Instant::now();
    let module = PolicyModule::load(&engine, config)?;
    Ok((engine, module, started.elapsed()))
}

#[derive(Serialize)]
struct CheckReport {
    module: String,
    path: String,
    decisions: Vec<Decision>,
    /// The release of the WIT package the module was built against.
    contract: String,
    imports: Vec<String>,
    /// What one decision takes from the engine's instance pools.
    core_instances: u32,
    memories: u32,
    tables: u32,
    memory_bytes: usize,
    deadline_ms: u128,
    max_answer_bytes: usize,
    load_ms: u128,
    warning: Option<String>,
    samples: Vec<SampleResult>,
}

#[derive(Serialize)]
struct SampleResult {
    decision: Decision,
    ok: bool,
    answer: String,
    micros: u128,
}

async fn check(args: CheckArgs, output: Output) -> anyhow::Result<ExitCode> {
    let settings: BTreeMap<String, String> = args.settings.into_iter().collect();
    let (engine, module, load_time) = load(&args.module, &args.limits, settings)?;
    let mut samples = Vec::new();
    for d in module.decisions() {
        samples.push(sample(&engine, &module, d).await);
    }
    let report = CheckReport {
        module: module.name().to_string(),
        path: args.module.display().to_string(),
        decisions: module.decisions(),
        contract: module.contract().to_string(),
        imports: module.imports().to_vec(),
        core_instances: module.footprint().core_instances,
        memories: module.footprint().memories,
        tables: module.footprint().tables,
        memory_bytes: args.limits.memory,
        deadline_ms: args.limits.deadline.as_millis(),
        max_answer_bytes: args.limits.max_answer,
        load_ms: load_time.as_millis(),
        warning: module.warning(),
        samples,
    };
    match output {
        Output::Json => crate::output::print_json(&report)?,
        Output::Text => {
            let names = |d: &[Decision]| d.iter().map(Decision::to_string).collect::<Vec<_>>().join(", ");
            say!("{:<12}{}", "module", report.path);
            say!("{:<12}{}", "decisions", names(&report.decisions));
            say!("{:<12}{}", "contract", report.contract);
            say!("{:<12}{}", "imports", report.imports.join(", "));
            say!(
                "{:<12}{} core instances, {} memories, {} tables per decision",
                "footprint",
                report.core_instances,
                report.memories,
                report.tables
            );
            say!(
                "{:<12}memory {}, deadline {} ms, answers up to {}",
                "limits",
                berth::model::units::format_bytes(report.memory_bytes),
                report.deadline_ms,
                berth::model::units::format_bytes(report.max_answer_bytes)
            );
            say!("{:<12}loaded in {} ms", "load", report.load_ms);
            if let Some(w) = &report.warning {
                say!("{:<12}{w}", "warning");
            }
            for s in &report.samples {
                let verdict = if s.ok { "ok" } else { "FAILED" };
                say!(
                    "{:<12}{verdict}: {} ({} µs, sample input)",
                    s.decision.to_string(),
                    s.answer,
                    s.micros
                );
            }
        }
    }
    Ok(if report.samples.iter().all(|s| s.ok) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// One decision on the sample inputs, with the module's own settings.
async fn sample(engine: &PolicyEngine, module: &PolicyModule, decision: Decision) -> SampleResult {
    let settings = module.settings().to_vec();
    let started = Instant::now();
    let outcome: Result<String, String> = match decision {
        Decision::Naming => module
            .volume_name(
                engine,
                &NamingRequest {
                    volume: volume("example"),
                    settings,
                },
            )
            .await
            .map(|r| match r {
                Ok(name) => format!("named {name:?}"),
                Err(reason) => format!("refused: {reason}"),
            })
            .map_err(|e| e.failure.to_string()),
        Decision::Placement => {
            let nodes = [node("node-a", &[("zone", "a")]), node("node-b", &[("zone", "b")])];
            let request = PlacementRequest {
                volume: volume("example"),
                purpose: Purpose::Create,
                accessible_topology: vec![],
                settings,
            };
            module
                .place(engine, &request, &berth::policy::candidates(&nodes))
                .await
                .map(|v| {
                    let eligible: Vec<&str> = nodes
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| v.is_eligible(*i))
                        .map(|(_, n)| n.name.as_str())
                        .collect();
                    format!("eligible {eligible:?} of 2 nodes")
                })
                .map_err(|e| e.failure.to_string())
        }
        Decision::Retry => {
            let mut failure = samples::failure(Operation::CreateVolume, Code::Unavailable, 1);
            failure.settings = settings;
            module
                .classify(engine, &failure)
                .await
                .map(|d| match d {
                    RetryDecision::RetryAfter(ms) => format!("UNAVAILABLE → retry after {ms} ms"),
                    RetryDecision::GiveUp(r) => format!("UNAVAILABLE → give up: {r}"),
                    RetryDecision::Done => "UNAVAILABLE → done".to_string(),
                })
                .map_err(|e| e.failure.to_string())
        }
        Decision::Admission => {
            match berth::policy::cases::admission::request(None, volume("example"), settings) {
                Ok(request) => module
                    .admit(engine, &request)
                    .await
                    .map(|verdict| {
                        let answer = berth::policy::logged::Answer::Admission(verdict);
                        format!(
                            "create-volume → {}",
                            berth::policy::logged::admission_text(Some(&answer))
                        )
                    })
                    .map_err(|e| e.failure.to_string()),
                Err(e) => Err(e.0),
            }
        }
    };
    SampleResult {
        decision,
        ok: outcome.is_ok(),
        answer: outcome.unwrap_or_else(|e| e),
        micros: started.elapsed().as_micros(),
    }
}

#[derive(Serialize)]
struct TestReport {
    module: String,
    passed: usize,
    failed: usize,
    cases: Vec<CaseResult>,
}

async fn test(args: TestArgs, output: Output) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&args.cases)
        .with_context(|| format!("reading the case file {}", args.cases.display()))?;
    let file = cases::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", args.cases.display()))?;
    let (engine, module, _) = load(&args.module, &args.limits, BTreeMap::new())?;
    let results = cases::run(&engine, &module, &file).await;
    let failed = results.iter().filter(|r| !r.passed).count();
    let report = TestReport {
        module: args.module.display().to_string(),
        passed: results.len() - failed,
        failed,
        cases: results,
    };
    match output {
        Output::Json => crate::output::print_json(&report)?,
        Output::Text => {
            for r in &report.cases {
                let mark = if r.passed { "PASS" } else { "FAIL" };
                let decision = r.decision.map(|d| d.to_string()).unwrap_or_else(|| "?".into());
                say!("{mark}  {} ({decision}): {}", r.name, r.detail);
            }
            say!("{} passed, {} failed", report.passed, report.failed);
        }
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
