//! `berth policy diff`: what the shadow modules decided beside the live ones.

use std::process::ExitCode;

use berth_proto::berth::v1 as api;
use clap::Args;
use serde_json::Value;

use super::{Output, say};

#[derive(Debug, Args)]
pub struct DiffArgs {
    #[command(flatten)]
    pub api: super::client::ApiArgs,
}

pub async fn diff(args: DiffArgs, output: Output) -> anyhow::Result<ExitCode> {
    let mut client = super::client::connect(&args.api.api).await?;
    let answer = client
        .policy_diff(api::PolicyDiffRequest {})
        .await
        .map_err(super::client::grpc)?
        .into_inner();
    let parse =
        |all: &[String]| -> Vec<Value> { all.iter().filter_map(|j| serde_json::from_str(j).ok()).collect() };
    let (counts, diffs) = (parse(&answer.counts), parse(&answer.diffs));
    match output {
        Output::Json => super::print_json(&serde_json::json!({ "shadows": counts, "differences": diffs }))?,
        Output::Text => {
            if counts.is_empty() {
                say!("no module is shadowing a decision (mode = \"shadow\" in the policy set)");
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
                say!(
                    "{} {} for {}: live {} answered {}; {} answered {}",
                    live["at_ms"],
                    live["input"]
                        .as_object()
                        .and_then(|o| o.keys().next())
                        .map_or("", |k| k.as_str()),
                    live["volume"].as_str().unwrap_or_default(),
                    live["module"].as_str().unwrap_or_default(),
                    live["answer"],
                    d["shadow"].as_str().unwrap_or_default(),
                    d["shadow_answer"]
                );
                if !d["difference"].is_null() {
                    say!("  difference: {}", d["difference"]);
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
