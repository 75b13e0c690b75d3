//! The checker, in the manner of Jepsen's: what must never happen, read from
//! the plugins' journal (what they did, when), the workload's history (what
//! Berth acknowledged), Berth's volumes once the faults healed, and the
//! plugins and mount table after the final drain.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use berth_proto::berth::v1 as api;
use serde_json::Value;

use crate::workload::{Op, Outcome, Record};

/// One thing that must never happen, and when (milliseconds since the
/// epoch when known, for the timeline around it).
#[derive(Debug)]
pub struct Violation {
    pub rule: &'static str,
    pub what: String,
    pub at_ms: Option<u64>,
}

pub fn journal(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn text<'a>(e: &'a Value, key: &str) -> &'a str {
    e[key].as_str().unwrap_or_default()
}

/// A single-node volume mounted on two nodes at once, or a single-writer
/// one at two targets: from each NodePublishVolume to the
/// NodeUnpublishVolume of the same target.
pub fn single_node(journal: &[Value]) -> Vec<Violation> {
    let mut open: BTreeMap<(String, String, String), (u64, String)> = BTreeMap::new();
    let mut found = Vec::new();
    for e in journal {
        let (volume, node, path) = (text(e, "volume"), text(e, "node"), text(e, "path"));
        let key = (volume.to_string(), node.to_string(), path.to_string());
        let ms = e["ms"].as_u64().unwrap_or_default();
        match text(e, "call") {
            "NodePublishVolume" => {
                let mode = text(e, "mode").to_string();
                if mode.starts_with("SINGLE_NODE") {
                    for ((v, n, p), (since, _)) in &open {
                        let other_node = n != node;
                        let other_target = p != path && mode == "SINGLE_NODE_SINGLE_WRITER";
                        if v == volume && (other_node || other_target) {
                            found.push(Violation {
                                rule: "a single-node volume is published in one place at a time",
                                what: format!(
                                    "volume {volume} ({mode}) published at {path} on {node} while published at {p} on {n} since {since}"
                                ),
                                at_ms: Some(ms),
                            });
                        }
                    }
                }
                open.entry(key).or_insert((ms, mode));
            }
            "NodeUnpublishVolume" => {
                open.remove(&key);
            }
            _ => {}
        }
    }
    found
}

/// A backend volume made twice for one name (the workload never reuses a
/// name, so a second make is a volume brought back after its delete).
pub fn created_twice(journal: &[Value]) -> Vec<Violation> {
    let mut made: BTreeMap<&str, u64> = BTreeMap::new();
    let mut found = Vec::new();
    for e in journal.iter().filter(|e| text(e, "call") == "CreateVolume") {
        if e["created"] != true {
            continue;
        }
        let name = text(e, "name");
        let ms = e["ms"].as_u64().unwrap_or_default();
        if let Some(first) = made.insert(name, ms) {
            found.push(Violation {
                rule: "no backend volume is made twice for one Berth volume",
                what: format!("{name} made at {first} and again"),
                at_ms: Some(ms),
            });
        }
    }
    found
}

/// What the acknowledged requests say a volume must be after the faults:
/// there or not, its publications' nodes and its snapshots. `None` when an
/// answer was uncertain.
#[derive(Debug, Default, PartialEq, Eq)]
struct State {
    nodes: BTreeSet<String>,
    snapshots: BTreeSet<String>,
}

fn expected(records: &[&Record]) -> Option<Option<State>> {
    let mut exists = false;
    let mut state = State::default();
    for r in records {
        match (&r.outcome, &r.op) {
            (Outcome::Unknown, _) => return None,
            (Outcome::Refused(_), _) => {}
            (Outcome::Ok, Op::Create { .. }) => exists = true,
            (Outcome::Ok, Op::Delete) => {
                exists = false;
                state = State::default();
            }
            (Outcome::Ok, Op::Publish { node }) => {
                state.nodes.insert(node.clone());
            }
            (Outcome::Ok, Op::Unpublish { node }) => {
                state.nodes.remove(node);
            }
            (Outcome::Ok, Op::Snapshot { snapshot }) => {
                state.snapshots.insert(snapshot.clone());
            }
            (Outcome::Ok, Op::DeleteSnapshot { snapshot }) => {
                state.snapshots.remove(snapshot);
            }
            (Outcome::Ok, Op::Expand { .. }) => {}
        }
    }
    Some(exists.then_some(state))
}

/// Every acknowledged request is there once the faults healed: each
/// volume whose every answer was certain is as they say. Returns the
/// violations and how many volumes were held to it (and how many were not).
pub fn acknowledged(
    history: &[Record],
    volumes: &[api::Volume],
    snapshots: &[api::Snapshot],
) -> (Vec<Violation>, usize, usize) {
    let mut by_volume: BTreeMap<&str, Vec<&Record>> = BTreeMap::new();
    for r in history {
        by_volume.entry(&r.volume).or_default().push(r);
    }
    let (mut held, mut uncertain) = (0, 0);
    let mut found = Vec::new();
    for (name, records) in by_volume {
        let Some(wanted) = expected(&records) else {
            uncertain += 1;
            continue;
        };
        held += 1;
        let there = volumes
            .iter()
            .find(|v| v.spec.as_ref().is_some_and(|s| s.name == name));
        let seen = there.map(|v| State {
            nodes: v
                .publications
                .iter()
                .filter(|p| p.state != "unpublishing")
                .map(|p| p.node.clone())
                .collect(),
            snapshots: snapshots
                .iter()
                .filter(|s| s.volume == name && s.state != "deleting")
                .map(|s| s.name.clone())
                .collect(),
        });
        if seen != wanted {
            let last: Vec<String> = records[records.len().saturating_sub(6)..]
                .iter()
                .map(|r| format!("{:?} {}–{} ms: {:?}", r.op, r.invoked, r.completed, r.outcome))
                .collect();
            found.push(Violation {
                rule: "every acknowledged request is there after the faults heal",
                what: format!(
                    "volume {name}: acknowledged {wanted:?}, Berth has {seen:?}; its last requests:\n    {}",
                    last.join("\n    ")
                ),
                at_ms: None,
            });
        }
    }
    (found, held, uncertain)
}

/// Nothing left after the final drain: no volume or snapshot on the
/// plugins, nothing mounted below the run's directory.
pub fn drained(plugin_state: &Path, dir: &Path) -> Vec<Violation> {
    let mut found = Vec::new();
    for kind in ["volumes", "snapshots"] {
        let left: Vec<String> = std::fs::read_dir(plugin_state.join(kind))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().to_string())
                    .collect()
            })
            .unwrap_or_default();
        if !left.is_empty() {
            found.push(Violation {
                rule: "after the final drain nothing is left on the plugins",
                what: format!("{} {kind} left: {left:?}", left.len()),
                at_ms: None,
            });
        }
    }
    for point in mounts_below(dir) {
        found.push(Violation {
            rule: "after the final drain nothing is mounted",
            what: format!("{point} is still mounted"),
            at_ms: None,
        });
    }
    found
}

pub fn mounts_below(dir: &Path) -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|p| Path::new(p).starts_with(dir))
        .map(str::to_string)
        .collect()
}
