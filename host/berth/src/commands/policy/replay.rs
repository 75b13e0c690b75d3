//! `berth policy replay`: a candidate module asked every logged question, in
//! this process, under the limits a live decision has, and what it would
//! have changed.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use berth::policy::Decision;
use berth::policy::logged::{Difference, Logged};
use berth::policy::replay::{self, Report};
use berth_proto::berth::v1 as api;
use clap::Args;

use crate::output::{Output, say};

/// Logged decisions asked for at a time.
const PAGE: u32 = 500;

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The candidate: a .wasm file, or oci://HOST/REPOSITORY@sha256:… (pulled
    /// and checked against its digest).
    pub module: String,
    /// Only this decision (default: every decision the module serves).
    #[arg(long)]
    pub decision: Option<Decision>,
    /// Only decisions logged within this long (e.g. 24h; default: all kept).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub since: Option<Duration>,
    /// A setting for the candidate, KEY=VALUE; repeatable. Without any, each
    /// decision is replayed with the settings it was made with.
    #[arg(long = "setting", value_parser = crate::commands::policy::parse_setting)]
    pub settings: Vec<(String, String)>,
    #[command(flatten)]
    pub limits: crate::commands::policy::LimitArgs,
    #[command(flatten)]
    pub registry: crate::commands::policy::oci::RegistryArgs,
    #[command(flatten)]
    pub api: crate::client::ApiArgs,
}

pub async fn replay(args: ReplayArgs, output: Output) -> anyhow::Result<ExitCode> {
    let (engine, module, _) = match args.module.strip_prefix("oci://") {
        Some(_) => {
            let path = pull(&args).await?;
            let loaded = crate::commands::policy::load(&path, &args.limits, BTreeMap::new());
            let _ = std::fs::remove_file(&path);
            loaded?
        }
        None => crate::commands::policy::load(&PathBuf::from(&args.module), &args.limits, BTreeMap::new())?,
    };
    let decisions = match args.decision {
        Some(d) if !module.serves(d) => anyhow::bail!("{} does not serve {d}", args.module),
        Some(d) => vec![d],
        None => module.decisions(),
    };
    let next = next_step(&args.module, &decisions);
    let since_ms = args
        .since
        .map(|d| berth::model::clock::now_ms().saturating_sub(d.as_millis() as u64));
    let mut client = crate::client::connect(&args.api).await?;
    let mut report = Report::default();
    let mut unreadable = 0u64;
    for decision in decisions {
        // Keys start with the time: the first page starts at `since`.
        let mut after = since_ms.map(|ms| format!("{ms:013}")).unwrap_or_default();
        loop {
            let page = client
                .list_decisions(api::ListDecisionsRequest {
                    decision: decision.interface().into(),
                    after: after.clone(),
                    limit: PAGE,
                })
                .await
                .map_err(crate::client::grpc)?
                .into_inner();
            let Some(last) = page.decisions.last() else {
                break;
            };
            after = last.key.clone();
            for d in page.decisions {
                let Ok(entry) = serde_json::from_str::<Logged>(&d.json) else {
                    unreadable += 1;
                    continue;
                };
                let input = if args.settings.is_empty() {
                    entry.input.clone()
                } else {
                    entry.input.clone().with_settings(&args.settings)
                };
                let answer = replay::ask(&engine, &module, &input).await;
                report.add(&entry, &answer);
            }
        }
    }
    match output {
        Output::Json => crate::output::print_json(&report)?,
        Output::Text => {
            print(&report, unreadable);
            say!("{next}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What to do after a replay: put the candidate beside the live module.
fn next_step(module: &str, decisions: &[Decision]) -> String {
    let flags: Vec<String> = decisions.iter().map(|d| format!("--decision {d}")).collect();
    format!(
        "next: `berth policy shadow {} {}` decides beside the live module; `berth policy diff` compares, `berth policy promote` puts it live",
        berth::model::text::shell_word(module),
        flags.join(" ")
    )
}

/// The module a reference names, checked against its digest, in a file of
/// this process's own (the caller removes it once loaded).
async fn pull(args: &ReplayArgs) -> anyhow::Result<PathBuf> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let reference = berth::oci::Reference::parse(&args.module)?;
    let registry = berth::oci::Registry::new(&reference, &args.registry.access())?;
    let pulled = registry.pull(&reference, berth::oci::MODULE_MAX).await?;
    let path = std::env::temp_dir().join(format!("berth-replay-{}.wasm", std::process::id()));
    let _ = std::fs::remove_file(&path);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut f| f.write_all(&pulled.module))
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

fn print(r: &Report, unreadable: u64) {
    let when = |ms: u64| {
        humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_millis(ms)).to_string()
    };
    if r.naming.names_changed > 0 {
        say!("naming: {} names would change", r.naming.names_changed);
        for e in &r.naming.examples {
            if let Difference::Naming { before, after } = &e.detail {
                say!("  {} ({}): {before} → {after}", e.volume, when(e.at_ms));
            }
        }
    }
    let p = &r.placement;
    if !p.examples.is_empty() {
        let nodes = |m: &BTreeMap<String, u64>| {
            m.iter()
                .map(|(n, c)| format!("{n} ({c})"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        say!("placement: the best node changes in {} decisions", p.best_changed);
        if !p.became_eligible.is_empty() {
            say!("  becomes eligible: {}", nodes(&p.became_eligible));
        }
        if !p.became_ineligible.is_empty() {
            say!("  becomes ineligible: {}", nodes(&p.became_ineligible));
        }
        for e in &p.examples {
            if let Difference::Placement {
                became_eligible,
                became_ineligible,
                best_before,
                best_after,
            } = &e.detail
            {
                let mut parts = Vec::new();
                if best_before != best_after {
                    let show = |n: &Option<String>| n.clone().unwrap_or_else(|| "none".into());
                    parts.push(format!("best {} → {}", show(best_before), show(best_after)));
                }
                if !became_eligible.is_empty() {
                    parts.push(format!("+{}", became_eligible.join(",")));
                }
                if !became_ineligible.is_empty() {
                    parts.push(format!("-{}", became_ineligible.join(",")));
                }
                say!("  {} ({}): {}", e.volume, when(e.at_ms), parts.join("; "));
            }
        }
    }
    let t = &r.retry;
    if !t.examples.is_empty() {
        let changes: Vec<String> = t.changes.iter().map(|(c, n)| format!("{c} {n}")).collect();
        say!(
            "retry: {}{}delays changed {}",
            changes.join(", "),
            if changes.is_empty() { "" } else { "; " },
            t.delays_changed
        );
        for e in &t.examples {
            if let Difference::Retry {
                before,
                after,
                before_ms,
                after_ms,
            } = &e.detail
            {
                let delay = |ms: &Option<u64>| ms.map(|m| format!(" {m}ms")).unwrap_or_default();
                say!(
                    "  {} ({}): {before}{} → {after}{}",
                    e.volume,
                    when(e.at_ms),
                    delay(before_ms),
                    delay(after_ms)
                );
            }
        }
    }
    for e in &r.failures {
        say!("failed: {} ({}): {}", e.volume, when(e.at_ms), e.detail);
    }
    if unreadable > 0 {
        say!("{unreadable} logged decisions did not read and were left out");
    }
    say!("{}", r.summary());
}
