//! `berth volume explain`: the decisions that shaped a volume, as its record
//! keeps them.

use std::time::{Duration, UNIX_EPOCH};

use anyhow::Context;
use berth::model::{DecisionNote, Explanation};
use berth_proto::berth::v1 as api;
use serde::Serialize;

use super::{Output, say};

#[derive(Serialize)]
struct Explained<'a> {
    volume: &'a str,
    state: &'a str,
    #[serde(flatten)]
    explanation: &'a Explanation,
}

pub fn print(v: &api::Volume, output: Output) -> anyhow::Result<()> {
    let explanation: Explanation = if v.explanation.is_empty() {
        Explanation::default()
    } else {
        serde_json::from_str(&v.explanation).context("the server's explanation does not read")?
    };
    let name = v.spec.as_ref().map_or("", |s| s.name.as_str());
    match output {
        Output::Json => super::print_json(&Explained {
            volume: name,
            state: &v.state,
            explanation: &explanation,
        })?,
        Output::Text => text(name, &v.state, &explanation),
    }
    Ok(())
}

fn by(n: &DecisionNote) -> String {
    let when = humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(n.at_ms));
    match &n.digest {
        Some(d) => format!("by {} {d} at {when}", n.module),
        None => format!("by {} at {when}", n.module),
    }
}

fn text(name: &str, state: &str, e: &Explanation) {
    say!("volume {name} ({state})");
    if e.is_empty() {
        say!("no decision recorded yet (volumes from before the decision log have none)");
        return;
    }
    if let Some(n) = &e.naming {
        say!("naming     {}", n.answer);
        say!("           {}", by(n));
    }
    if let Some(n) = &e.placement {
        say!("placement  {}", n.answer);
        say!("           {}", by(n));
        for v in &n.nodes {
            if v.eligible {
                say!("  {:<20} eligible  score {}", v.node, v.score);
            } else {
                say!("  {:<20} refused   {}", v.node, v.reason);
            }
        }
        let shown = n.nodes.len() as u64;
        if n.nodes_judged > shown {
            say!("  … and {} more nodes", n.nodes_judged - shown);
        }
    }
    if !e.retries.is_empty() {
        say!("retries (latest last)");
        for n in &e.retries {
            say!("  {} → {}", n.about, n.answer);
            say!("    {}", by(n));
        }
    }
}
