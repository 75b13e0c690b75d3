//! A volume's health as `volume get` shows it: the condition the plugins
//! report and the usage on each node, or why there is none.

use berth_proto::berth::v1 as api;
use serde::Serialize;

use crate::output::say;

#[derive(Serialize)]
pub struct HealthView {
    /// `ok`, `abnormal: ...`, or why it is not known.
    controller: String,
    nodes: Vec<NodeHealthView>,
}

#[derive(Serialize)]
struct NodeHealthView {
    node: String,
    condition: String,
    used_bytes: Option<i64>,
    total_bytes: Option<i64>,
    available_bytes: Option<i64>,
    error: String,
}

fn condition(c: Option<&api::VolumeCondition>) -> String {
    match c {
        None => "not reported".into(),
        Some(c) if c.abnormal => format!("abnormal: {}", c.message),
        Some(_) => "ok".into(),
    }
}

pub fn view(h: &Result<api::VolumeHealthResponse, String>) -> HealthView {
    match h {
        Err(e) => HealthView {
            controller: format!("unknown: {e}"),
            nodes: vec![],
        },
        Ok(h) => HealthView {
            controller: if h.controller_error.is_empty() {
                condition(h.controller.as_ref())
            } else {
                format!("unknown: {}", h.controller_error)
            },
            nodes: h
                .nodes
                .iter()
                .map(|n| {
                    let bytes = n.usage.iter().find(|u| u.unit == "bytes");
                    NodeHealthView {
                        node: n.node.clone(),
                        condition: if n.error.is_empty() {
                            condition(n.condition.as_ref())
                        } else {
                            format!("unknown: {}", n.error)
                        },
                        used_bytes: bytes.map(|u| u.used),
                        total_bytes: bytes.map(|u| u.total),
                        available_bytes: bytes.map(|u| u.available),
                        error: n.error.clone(),
                    }
                })
                .collect(),
        },
    }
}

pub fn print(h: &Result<api::VolumeHealthResponse, String>) {
    let v = view(h);
    say!("{:<14}{}", "condition", v.controller);
    for n in &v.nodes {
        let usage = match (n.used_bytes, n.total_bytes) {
            (Some(used), Some(total)) => format!(
                ", {} used of {}",
                berth::model::units::format_bytes(used.max(0) as usize),
                berth::model::units::format_bytes(total.max(0) as usize)
            ),
            _ => String::new(),
        };
        say!("{:<14}{}: {}{usage}", "on node", n.node, n.condition);
    }
}
