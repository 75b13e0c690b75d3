//! `berth policy diff`: what the shadow modules decided beside the live ones.

use std::process::ExitCode;

use berth_proto::berth::v1 as api;
use clap::Args;
use serde_json::Value;

use crate::output::{Output, say};

#[derive(Debug, Args)]
pub struct DiffArgs {
    #[command(flatten)]
    pub api: crate::client::ApiArgs,
}

pub async fn diff(args: DiffArgs, output: Output) -> anyhow::Result<ExitCode> {
    let mut client = crate::client::connect(&args.api).await?;
    let answer = client
        .policy_diff(api::PolicyDiffRequest {})
        .await
        .map_err(crate::client::grpc)?
        .into_inner();
    // The set says which modules shadow, decided yet or not.
    let set = client
        .get_policy_set(api::GetPolicySetRequest {})
        .await
        .map_err(crate::client::grpc)?
        .into_inner();
    let shadows: Vec<String> =
        berth::config::policy_set::SetDraft::parse(&set.text, std::path::Path::new("/"))
            .map(|d| d.tables)
            .unwrap_or_default()
            .iter()
            .filter(|t| !t.mode.is_live())
            .map(|t| {
                t.name().map_or_else(
                    || berth::config::policy_set::default_name(&t.module),
                    str::to_string,
                )
            })
            .collect();
    let parse =
        |all: &[String]| -> Vec<Value> { all.iter().filter_map(|j| serde_json::from_str(j).ok()).collect() };
    let (counts, diffs) = (parse(&answer.counts), parse(&answer.diffs));
    match output {
        Output::Json => {
            crate::output::print_json(&serde_json::json!({ "shadows": counts, "differences": diffs }))?
        }
        Output::Text => {
            if counts.is_empty() && shadows.is_empty() {
                say!("no module is shadowing a decision (mode = \"shadow\" in the policy set)");
            } else if counts.is_empty() {
                say!(
                    "{} shadowing: no shadow decision yet (they run when a CPU is idle, so after the live ones on a busy server; shadow_every_decision = true runs each one)",
                    shadows.join(", ")
                );
            }
            for c in &counts {
                say!(
                    "{} shadowing {}: {} same, {} different, {} failed, {} dropped",
                    c["module"].as_str().unwrap_or_default(),
                    c["decision"].as_str().unwrap_or_default(),
                    c["same"],
                    c["different"],
                    c["failed"],
                    c["dropped"]
                );
            }
            for d in &diffs {
                let live = &d["live"];
                let at = humantime::format_rfc3339_seconds(
                    std::time::UNIX_EPOCH
                        + std::time::Duration::from_millis(live["at_ms"].as_u64().unwrap_or(0)),
                );
                say!(
                    "{at} {} for {}: live {} answered {}; {} answered {}",
                    live["input"]
                        .as_object()
                        .and_then(|o| o.keys().next())
                        .map_or("", |k| k.as_str()),
                    live["volume"].as_str().unwrap_or_default(),
                    live["module"].as_str().unwrap_or_default(),
                    words(&live["answer"]),
                    d["shadow"].as_str().unwrap_or_default(),
                    words(&d["shadow_answer"])
                );
                if !d["difference"].is_null() {
                    say!("  difference: {}", words(&d["difference"]));
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// An answer as words: a text as itself, a record as `key value` pairs, a
/// list comma-separated.
fn words(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "nothing".into(),
        Value::Array(items) => items.iter().map(words).collect::<Vec<_>>().join(", "),
        Value::Object(fields) => fields
            .iter()
            .map(|(k, v)| format!("{k} {}", words(v)))
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    }
}
