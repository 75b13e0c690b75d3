//! `berth volume explain`: the decisions that shaped a volume, as its record
//! keeps them.

use std::time::{Duration, UNIX_EPOCH};

use anyhow::Context;
use berth::model::{DecisionNote, Explanation};
use berth_proto::berth::v1 as api;
use serde::Serialize;

use crate::output::{Output, say};

#[derive(Serialize)]
struct Explained<'a> {
    volume: &'a str,
    state: &'a str,
    /// Where the volume was asked to be accessible from, which placement
    /// and the plugin worked within.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    requisite_topology: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    preferred_topology: Vec<String>,
    #[serde(flatten)]
    explanation: &'a Explanation,
}

pub fn print(v: &api::Volume, output: Output) -> anyhow::Result<()> {
    let explanation: Explanation = if v.explanation.is_empty() {
        Explanation::default()
    } else {
        serde_json::from_str(&v.explanation).context("the server's explanation does not read")?
    };
    let spec = v.spec.clone().unwrap_or_default();
    let explained = Explained {
        volume: &spec.name,
        state: &v.state,
        requisite_topology: spec.requisite_topology.iter().map(segment).collect(),
        preferred_topology: spec.preferred_topology.iter().map(segment).collect(),
        explanation: &explanation,
    };
    match output {
        Output::Json => crate::output::print_json(&explained)?,
        Output::Text => text(&explained),
    }
    Ok(())
}

/// `zone=a,rack=1`
fn segment(t: &api::Topology) -> String {
    let mut pairs: Vec<String> = t.segments.iter().map(|(k, v)| format!("{k}={v}")).collect();
    pairs.sort();
    pairs.join(",")
}

fn by(n: &DecisionNote) -> String {
    let when = humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(n.at_ms));
    match &n.digest {
        Some(d) => format!("by {} {d} at {when}", n.module),
        None => format!("by {} at {when}", n.module),
    }
}

fn text(x: &Explained) {
    let e = x.explanation;
    say!("volume {} ({})", x.volume, x.state);
    for t in &x.requisite_topology {
        say!("asked      requisite {t}");
    }
    for t in &x.preferred_topology {
        say!("asked      preferred {t}");
    }
    if e.is_empty() {
        say!("no decision recorded yet (volumes from before the decision log have none)");
        return;
    }
    if let Some(n) = &e.admission {
        say!("admission  {}", n.answer);
        say!("           {}", by(n));
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
