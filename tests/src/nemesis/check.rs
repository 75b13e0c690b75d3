//! The nemesis's checker, in the manner of Jepsen's: what must never happen, read from
//! the plugins' journal (what they did, when), the workload's history (what
//! Berth acknowledged), Berth's volumes once the faults healed, and the
//! plugins and mount table after the final drain.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use berth_proto::berth::v1 as api;
use serde_json::Value;

use super::{Op, Outcome, Record};

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
/// NodeUnpublishVolume of the same target (one the plugin lied about
/// leaves the target mounted: what follows from it is the plugin's doing,
/// counted in [`Lies`], not here).
pub fn single_node(journal: &[Value]) -> Vec<Violation> {
    single_node_judged(journal).0
}

/// [`single_node`]'s violations, and those a plugin's lie caused.
fn single_node_judged(journal: &[Value]) -> (Vec<Violation>, Vec<String>) {
    // (volume, node, path) → (since, mode, left mounted by a lie)
    let mut open: BTreeMap<(String, String, String), (u64, String, bool)> = BTreeMap::new();
    let mut found = Vec::new();
    let mut lied = Vec::new();
    for e in journal {
        let (volume, node, path) = (text(e, "volume"), text(e, "node"), text(e, "path"));
        let key = (volume.to_string(), node.to_string(), path.to_string());
        let ms = e["ms"].as_u64().unwrap_or_default();
        match text(e, "call") {
            "NodePublishVolume" => {
                let mode = text(e, "mode").to_string();
                if mode.starts_with("SINGLE_NODE") {
                    for ((v, n, p), (since, _, by_lie)) in &open {
                        let other_node = n != node;
                        let other_target = p != path && mode == "SINGLE_NODE_SINGLE_WRITER";
                        if v == volume && (other_node || other_target) {
                            let what = format!(
                                "volume {volume} ({mode}) published at {path} on {node} while published at {p} on {n} since {since}"
                            );
                            match by_lie {
                                true => lied.push(format!("{what} (its unpublish there was a lie)")),
                                false => found.push(Violation {
                                    rule: "a single-node volume is published in one place at a time",
                                    what,
                                    at_ms: Some(ms),
                                }),
                            }
                        }
                    }
                }
                open.entry(key).or_insert((ms, mode, false));
            }
            "NodeUnpublishVolume" if e["lied"] == true => {
                if let Some(o) = open.get_mut(&key) {
                    o.2 = true;
                }
            }
            "NodeUnpublishVolume" => {
                open.remove(&key);
            }
            _ => {}
        }
    }
    (found, lied)
}

/// What the plugins answered OK without doing (`--lie-rate`), read from the
/// journal: the volumes a DeleteVolume left and the targets a
/// NodeUnpublishVolume left mounted (until a later call did it truly), and
/// what followed from them. Not Berth's violations: a CO cannot tell.
#[derive(Debug, Default)]
pub struct Lies {
    pub calls: usize,
    volumes: BTreeSet<String>,
    targets: BTreeSet<String>,
    /// What the lies caused, each said once.
    pub consequences: Vec<String>,
}

/// [`single_node`]'s violations and the plugins' [`Lies`], in one pass
/// over the journal for both.
pub fn single_node_and_lies(journal: &[Value]) -> (Vec<Violation>, Lies) {
    let (found, consequences) = single_node_judged(journal);
    (found, Lies::with(journal, consequences))
}

impl Lies {
    /// Whether `target`'s last NodeUnpublishVolume was a lie (so it may
    /// still be mounted, unknown to its agent).
    pub fn left_mounted(&self, target: &str) -> bool {
        self.targets.contains(target)
    }

    pub fn read(journal: &[Value]) -> Lies {
        Lies::with(journal, single_node_judged(journal).1)
    }

    /// The lies of `journal`, with what [`single_node_judged`] found they caused.
    fn with(journal: &[Value], caused: Vec<String>) -> Lies {
        let mut lies = Lies::default();
        for e in journal {
            let lied = e["lied"] == true;
            lies.calls += usize::from(lied);
            let set = match text(e, "call") {
                "DeleteVolume" => (&mut lies.volumes, text(e, "volume")),
                "NodeUnpublishVolume" => (&mut lies.targets, text(e, "path")),
                _ => continue,
            };
            match lied {
                true => set.0.insert(set.1.to_string()),
                false => set.0.remove(set.1),
            };
        }
        let mut said = BTreeSet::new();
        lies.consequences = caused.into_iter().filter(|c| said.insert(c.clone())).collect();
        lies
    }
}

/// A backend volume or snapshot made twice for one name (the workload
/// never reuses a name, so a second make is one brought back after its
/// delete).
pub fn created_twice(journal: &[Value]) -> Vec<Violation> {
    let mut made: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    let mut found = Vec::new();
    for e in journal {
        let call = text(e, "call");
        if !matches!(call, "CreateVolume" | "CreateSnapshot") || e["created"] != true {
            continue;
        }
        let name = text(e, "name");
        let ms = e["ms"].as_u64().unwrap_or_default();
        if let Some(first) = made.insert((call, name), ms) {
            found.push(Violation {
                rule: "no backend volume or snapshot is made twice for one of Berth's",
                what: format!("{call} made {name} at {first} and again"),
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
            (Outcome::Ok, Op::Expand { .. } | Op::Get) => {}
        }
    }
    Some(exists.then_some(state))
}

/// Every acknowledged request is there once the faults healed: each
/// volume whose every answer was certain is as they say. Returns the
/// violations and how many volumes were held to it (and how many were not).
/// `record` tells more of a volume found otherwise (its latest events, say).
pub fn acknowledged(
    history: &[Record],
    volumes: &[api::Volume],
    snapshots: &[api::Snapshot],
    record: &dyn Fn(&str) -> String,
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
            let state = there.map_or(String::new(), |v| {
                format!("; Berth's record: {} {:?}", v.state, v.failure)
            });
            found.push(Violation {
                rule: "every acknowledged request is there after the faults heal",
                what: format!(
                    "volume {name}: acknowledged {wanted:?}, Berth has {seen:?}{state}; its last requests:\n    {}{}",
                    last.join("\n    "),
                    record(name)
                ),
                at_ms: None,
            });
        }
    }
    (found, held, uncertain)
}

/// Nothing left after the final drain: no volume or snapshot on the
/// plugins, nothing mounted below the run's directory; but what a plugin's
/// lie left (said in `lies`).
pub fn drained(plugin_state: &Path, dir: &Path, lies: &mut Lies) -> Vec<Violation> {
    let mut found = Vec::new();
    for kind in ["volumes", "snapshots"] {
        let (left, lied): (Vec<String>, Vec<String>) = std::fs::read_dir(plugin_state.join(kind))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().to_string())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
            .into_iter()
            .partition(|name| !lies.volumes.contains(name.trim_end_matches(".json")));
        for name in lied {
            lies.consequences.push(format!(
                "volume {name} left on the plugin (its DeleteVolume was a lie)"
            ));
        }
        if !left.is_empty() {
            found.push(Violation {
                rule: "after the final drain nothing is left on the plugins",
                what: format!("{} {kind} left: {left:?}", left.len()),
                at_ms: None,
            });
        }
    }
    // What the lies left at their targets (a mount in the plugin's own
    // namespace is not seen from here; the path it was made at is).
    let left: Vec<String> = lies
        .targets
        .iter()
        .filter(|t| std::fs::symlink_metadata(t).is_ok())
        .map(|t| format!("{t} left in place (its NodeUnpublishVolume was a lie)"))
        .collect();
    lies.consequences.extend(left);
    for point in mounts_below(dir) {
        if lies.targets.contains(&point) {
            lies.consequences.push(format!(
                "{point} left mounted (its NodeUnpublishVolume was a lie)"
            ));
            continue;
        }
        found.push(Violation {
            rule: "after the final drain nothing is mounted",
            what: format!("{point} is still mounted"),
            at_ms: None,
        });
    }
    found
}

/// What is mounted below `dir`, but the run's own faulty disks.
pub fn mounts_below(dir: &Path) -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.contains(" berth-faultfs "))
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|p| Path::new(p).starts_with(dir))
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn publish(volume: &str, node: &str, path: &str, mode: &str) -> Value {
        json!({"call": "NodePublishVolume", "volume": volume, "node": node, "path": path, "mode": mode, "ms": 1})
    }

    fn unpublish(volume: &str, node: &str, path: &str) -> Value {
        json!({"call": "NodeUnpublishVolume", "volume": volume, "node": node, "path": path, "ms": 2})
    }

    #[test]
    fn a_single_node_volume_on_two_nodes_at_once_is_seen_and_one_after_the_other_is_not() {
        let moved = [
            publish("v", "a", "/a/t", "SINGLE_NODE_WRITER"),
            unpublish("v", "a", "/a/t"),
            publish("v", "b", "/b/t", "SINGLE_NODE_WRITER"),
        ];
        assert!(single_node(&moved).is_empty());
        let both = [
            publish("v", "a", "/a/t", "SINGLE_NODE_WRITER"),
            publish("v", "b", "/b/t", "SINGLE_NODE_WRITER"),
            unpublish("v", "a", "/a/t"),
        ];
        let found = single_node(&both);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].what.contains("on b while published at /a/t on a"),
            "{found:?}"
        );
        // Many nodes may hold a multi-node volume; one node two targets of a
        // single-node writer, but not of a single writer.
        let multi = [
            publish("m", "a", "/a/t", "MULTI_NODE_MULTI_WRITER"),
            publish("m", "b", "/b/t", "MULTI_NODE_MULTI_WRITER"),
            publish("w", "a", "/a/1", "SINGLE_NODE_WRITER"),
            publish("w", "a", "/a/2", "SINGLE_NODE_WRITER"),
        ];
        assert!(single_node(&multi).is_empty());
        let single_writer = [
            publish("s", "a", "/a/1", "SINGLE_NODE_SINGLE_WRITER"),
            publish("s", "a", "/a/2", "SINGLE_NODE_SINGLE_WRITER"),
        ];
        assert_eq!(single_node(&single_writer).len(), 1);
    }

    #[test]
    fn what_a_plugins_lie_caused_is_the_plugins_and_what_a_true_call_undid_is_forgotten() {
        let mut lied = unpublish("v", "a", "/a/t");
        lied["lied"] = true.into();
        let journal = [
            publish("v", "a", "/a/t", "SINGLE_NODE_WRITER"),
            lied,
            publish("v", "b", "/b/t", "SINGLE_NODE_WRITER"),
            json!({"call": "DeleteVolume", "volume": "hp-1", "lied": true, "ms": 3}),
            json!({"call": "DeleteVolume", "volume": "hp-2", "lied": true, "ms": 3}),
            json!({"call": "DeleteVolume", "volume": "hp-2", "ms": 4}),
        ];
        assert!(
            single_node(&journal).is_empty(),
            "the plugin's doing, not Berth's"
        );
        let lies = Lies::read(&journal);
        assert_eq!(lies.calls, 3);
        assert_eq!(lies.consequences.len(), 1, "{:?}", lies.consequences);
        assert!(lies.consequences[0].contains("was a lie"));
        assert!(lies.volumes.contains("hp-1") && !lies.volumes.contains("hp-2"));
        assert!(lies.left_mounted("/a/t") && !lies.left_mounted("/b/t"));
        // The same journal without the lie: a violation of Berth's.
        let truthful = [
            publish("v", "a", "/a/t", "SINGLE_NODE_WRITER"),
            publish("v", "b", "/b/t", "SINGLE_NODE_WRITER"),
        ];
        assert_eq!(single_node(&truthful).len(), 1);
    }

    #[test]
    fn a_volume_or_snapshot_made_again_is_seen_and_answered_again_is_not() {
        let make = |call: &str, name: &str, created: bool| json!({"call": call, "name": name, "created": created, "ms": 1});
        let fine = [
            make("CreateVolume", "v", true),
            make("CreateVolume", "v", false),
            make("CreateSnapshot", "v", true),
        ];
        assert!(created_twice(&fine).is_empty());
        let again = [
            make("CreateSnapshot", "s", true),
            make("CreateSnapshot", "s", true),
        ];
        assert_eq!(created_twice(&again).len(), 1);
    }

    fn record(volume: &str, op: Op, outcome: Outcome) -> Record {
        Record {
            volume: volume.into(),
            op,
            invoked: 0,
            completed: 0,
            outcome,
            seen: None,
        }
    }

    fn volume(name: &str, nodes: &[&str]) -> api::Volume {
        api::Volume {
            spec: Some(api::VolumeSpec {
                name: name.into(),
                ..Default::default()
            }),
            publications: nodes
                .iter()
                .map(|n| api::Publication {
                    node: n.to_string(),
                    state: "published".into(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn an_acknowledged_request_missing_after_the_faults_is_seen_and_an_uncertain_one_is_not_held() {
        let create = Op::Create {
            mode: "single-node-writer",
        };
        let publish = |n: &str| Op::Publish { node: n.into() };
        let history = [
            record("kept", create.clone(), Outcome::Ok),
            record("kept", publish("a"), Outcome::Ok),
            record("lost", create.clone(), Outcome::Ok),
            record("moved", create.clone(), Outcome::Ok),
            record("moved", publish("a"), Outcome::Ok),
            record("moved", Op::Unpublish { node: "a".into() }, Outcome::Ok),
            record(
                "moved",
                publish("b"),
                Outcome::Refused(tonic::Code::FailedPrecondition),
            ),
            record("unsure", create, Outcome::Unknown),
        ];
        let volumes = [volume("kept", &["a"]), volume("moved", &["b"])];
        let (found, held, uncertain) = acknowledged(&history, &volumes, &[], &|_| String::new());
        assert_eq!((held, uncertain), (3, 1));
        let named: Vec<&str> = found.iter().map(|v| v.what.split(':').next().unwrap()).collect();
        // "lost" was acknowledged and is gone; "moved" has a publication
        // whose request was refused.
        assert_eq!(named, ["volume lost", "volume moved"], "{found:?}");
    }
}
