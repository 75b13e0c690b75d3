//! Linearizability of the API's history, volume by volume (linearizability
//! is local: a history is linearizable when each object's is): is there an
//! order of each volume's requests, each taking effect at one instant
//! between its sending and its answer, that a model of a volume answers as
//! Berth did? A request answered for certain must fit; one with no certain
//! answer may have taken effect at any instant after it was sent, or
//! never. The search is Wing and Gong's, remembering the states it has
//! been in; a violation is shrunk to a smallest history that still shows
//! it (no request of it can be left out).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use tonic::Code;

use super::check::Violation;
use super::{Op, Outcome, Record, Seen};

/// A volume as the API promises it.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq)]
struct Model {
    exists: bool,
    deleted: bool,
    single_node: bool,
    nodes: BTreeSet<String>,
    snapshots: BTreeSet<String>,
}

impl Model {
    /// The volume after `op` took effect and was answered OK; `None` when
    /// no volume in this state answers it so.
    fn ok(&self, op: &Op, seen: Option<&Seen>) -> Option<Model> {
        let mut m = self.clone();
        match op {
            Op::Create { mode } => {
                if m.deleted {
                    return None;
                }
                if !m.exists {
                    m.exists = true;
                    m.single_node = mode.starts_with("single-node");
                }
            }
            Op::Delete => {
                m = Model {
                    deleted: true,
                    ..Model::default()
                };
            }
            Op::Publish { node } => {
                let elsewhere = m.single_node && m.nodes.iter().any(|n| n != node);
                if !m.exists || elsewhere {
                    return None;
                }
                m.nodes.insert(node.clone());
            }
            Op::Unpublish { node } => {
                m.nodes.remove(node);
            }
            Op::Snapshot { snapshot } => {
                if !m.exists {
                    return None;
                }
                m.snapshots.insert(snapshot.clone());
            }
            Op::DeleteSnapshot { snapshot } => {
                m.snapshots.remove(snapshot);
            }
            Op::Expand { .. } => {
                if !m.exists {
                    return None;
                }
            }
            Op::Get => {
                let fits = match seen? {
                    Seen::Missing => !m.exists,
                    Seen::Deleting => m.deleted,
                    Seen::Nodes(nodes) => m.exists && *nodes == m.nodes,
                };
                if !fits {
                    return None;
                }
            }
        }
        Some(m)
    }

    /// Whether this volume may refuse `op` with `code` (a refusal changes
    /// nothing). NOT_FOUND is judged; other refusals depend on more than a
    /// volume (nodes, quotas, policies) and any fits.
    fn refuses(&self, op: &Op, code: Code) -> bool {
        if code != Code::NotFound {
            return true;
        }
        match op {
            Op::DeleteSnapshot { snapshot } => !self.snapshots.contains(snapshot),
            Op::Create { .. } | Op::Get => true,
            _ => !self.exists,
        }
    }
}

/// A request as the search sees it: when it was sent and answered (an
/// uncertain one: never, so it constrains nothing).
struct Call<'a> {
    record: &'a Record,
    answered: u64,
}

fn certain(r: &Record) -> bool {
    r.outcome != Outcome::Unknown
}

/// Whether some order of `calls` fits the model.
fn fits(calls: &[Call]) -> bool {
    let mut seen: HashSet<(Vec<bool>, Model)> = HashSet::new();
    search(calls, &mut vec![false; calls.len()], Model::default(), &mut seen)
}

fn search(
    calls: &[Call],
    done: &mut Vec<bool>,
    model: Model,
    seen: &mut HashSet<(Vec<bool>, Model)>,
) -> bool {
    let pending = || calls.iter().zip(done.iter()).filter(|(_, d)| !**d);
    if pending().all(|(c, _)| !certain(c.record)) {
        // What is left had no certain answer: it may never have happened.
        return true;
    }
    if !seen.insert((done.clone(), model.clone())) {
        return false;
    }
    // Next may be any request sent before every pending one was answered.
    let frontier = pending().map(|(c, _)| c.answered).min().unwrap_or(u64::MAX);
    for i in 0..calls.len() {
        let r = calls[i].record;
        if done[i] || r.invoked > frontier {
            continue;
        }
        let next = match r.outcome {
            Outcome::Ok | Outcome::Unknown => model.ok(&r.op, r.seen.as_ref()),
            Outcome::Refused(code) => model.refuses(&r.op, code).then(|| model.clone()),
        };
        let Some(next) = next else {
            continue;
        };
        done[i] = true;
        let found = search(calls, done, next, seen);
        done[i] = false;
        if found {
            return true;
        }
    }
    false
}

fn calls<'a>(records: &[&'a Record]) -> Vec<Call<'a>> {
    records
        .iter()
        .map(|r| Call {
            record: r,
            answered: if certain(r) { r.completed } else { u64::MAX },
        })
        .collect()
}

/// A smallest history showing why `records` fit no order: the shortest
/// prefix (by when requests were sent) that fits none, its last request the
/// culprit; then each other request left out in turn, and kept out while
/// the rest fits without the culprit and not with it.
fn shrink(mut records: Vec<&Record>) -> Vec<&Record> {
    records.sort_by_key(|r| r.invoked);
    if let Some(k) = (1..=records.len()).find(|k| !fits(&calls(&records[..*k]))) {
        records.truncate(k);
    }
    let mut i = 0;
    while i + 1 < records.len() {
        let mut without = records.clone();
        without.remove(i);
        let (before, _) = without.split_at(without.len() - 1);
        if !fits(&calls(&without)) && fits(&calls(before)) {
            records = without;
        } else {
            i += 1;
        }
    }
    records
}

fn shown(r: &Record) -> String {
    let seen = r
        .seen
        .as_ref()
        .map(|s| format!(", saw {s:?}"))
        .unwrap_or_default();
    format!(
        "{:?} {}–{} ms: {:?}{seen}",
        r.op, r.invoked, r.completed, r.outcome
    )
}

/// Every volume whose history no order fits, with a smallest history that shows it.
pub fn linearizable(history: &[Record]) -> Vec<Violation> {
    let mut by_volume: BTreeMap<&str, Vec<&Record>> = BTreeMap::new();
    for r in history {
        by_volume.entry(&r.volume).or_default().push(r);
    }
    let mut found = Vec::new();
    for (name, records) in by_volume {
        if fits(&calls(&records)) {
            continue;
        }
        let mut sent = records.clone();
        sent.sort_by_key(|r| r.invoked);
        let smallest = shrink(records);
        let lines: Vec<String> = smallest.iter().map(|r| shown(r)).collect();
        // The smallest history may leave out what led there: the requests
        // up to the culprit are shown too.
        let culprit = smallest.last().map_or(0, |r| r.invoked);
        let upto: Vec<&&Record> = sent.iter().filter(|r| r.invoked <= culprit).collect();
        let context: Vec<String> = upto[upto.len().saturating_sub(8)..]
            .iter()
            .map(|r| shown(r))
            .collect();
        found.push(Violation {
            rule: "the API's history is linearizable",
            what: format!(
                "volume {name}: no order of these requests fits a volume:\n    {}\n  the requests up to the last of them:\n    {}",
                lines.join("\n    "),
                context.join("\n    ")
            ),
            at_ms: smallest.last().map(|r| r.completed),
        });
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(op: Op, invoked: u64, completed: u64, outcome: Outcome) -> Record {
        Record {
            volume: "v".into(),
            op,
            invoked,
            completed,
            outcome,
            seen: None,
        }
    }

    fn get(invoked: u64, completed: u64, seen: Seen) -> Record {
        Record {
            seen: Some(seen),
            ..at(Op::Get, invoked, completed, Outcome::Ok)
        }
    }

    fn nodes(list: &[&str]) -> Seen {
        Seen::Nodes(list.iter().map(|n| n.to_string()).collect())
    }

    fn create(mode: &'static str) -> Op {
        Op::Create { mode }
    }

    fn publish(node: &str) -> Op {
        Op::Publish { node: node.into() }
    }

    #[test]
    fn a_history_in_order_fits() {
        let history = [
            at(create("single-node-writer"), 0, 5, Outcome::Ok),
            at(publish("a"), 6, 8, Outcome::Ok),
            get(9, 10, nodes(&["a"])),
            at(publish("b"), 11, 12, Outcome::Refused(Code::FailedPrecondition)),
            at(Op::Unpublish { node: "a".into() }, 13, 14, Outcome::Ok),
            get(15, 16, nodes(&[])),
            at(Op::Delete, 17, 18, Outcome::Ok),
            get(19, 20, Seen::Deleting),
            get(21, 22, Seen::Missing),
        ];
        assert!(linearizable(&history).is_empty());
    }

    #[test]
    fn a_stale_read_is_found_and_shown_in_the_fewest_requests() {
        let history = [
            at(create("multi-node-multi-writer"), 0, 5, Outcome::Ok),
            at(publish("a"), 6, 8, Outcome::Ok),
            at(Op::Expand { bytes: 2 << 20 }, 9, 10, Outcome::Ok),
            at(Op::Unpublish { node: "a".into() }, 11, 14, Outcome::Ok),
            get(15, 16, nodes(&["a"])),
            at(Op::Snapshot { snapshot: "s".into() }, 17, 18, Outcome::Ok),
        ];
        let found = linearizable(&history);
        assert_eq!(found.len(), 1, "{found:?}");
        let what = &found[0].what;
        let (smallest, context) = what.split_once("the requests up to").unwrap();
        let shown: Vec<&str> = smallest
            .lines()
            .skip(1)
            .filter(|l| !l.trim().is_empty())
            .collect();
        // Fewest: the create and a read that saw a node it was never (or
        // no longer) published on; what led there follows it.
        assert_eq!(shown.len(), 2, "{what}");
        assert!(
            shown[0].contains("Create") && shown[1].contains("saw Nodes"),
            "{what}"
        );
        assert!(
            context.contains("Unpublish") && !context.contains("Snapshot"),
            "{what}"
        );
    }

    #[test]
    fn overlapping_requests_may_take_effect_in_either_order() {
        // The read overlaps the unpublish: it may see the node or not.
        for seen in [nodes(&["a"]), nodes(&[])] {
            let history = [
                at(create("single-node-writer"), 0, 5, Outcome::Ok),
                at(publish("a"), 6, 8, Outcome::Ok),
                at(Op::Unpublish { node: "a".into() }, 9, 14, Outcome::Ok),
                get(10, 12, seen),
            ];
            assert!(linearizable(&history).is_empty());
        }
        // Once the unpublish was answered, a later read must not see the node.
        let history = [
            at(create("single-node-writer"), 0, 5, Outcome::Ok),
            at(publish("a"), 6, 8, Outcome::Ok),
            at(Op::Unpublish { node: "a".into() }, 9, 10, Outcome::Ok),
            get(11, 12, nodes(&["a"])),
        ];
        assert_eq!(linearizable(&history).len(), 1);
    }

    #[test]
    fn an_uncertain_request_may_have_happened_or_not_but_a_certain_one_did() {
        for seen in [Seen::Deleting, nodes(&[])] {
            let history = [
                at(create("single-node-writer"), 0, 5, Outcome::Ok),
                at(Op::Delete, 6, 20, Outcome::Unknown),
                get(30, 31, seen),
            ];
            assert!(linearizable(&history).is_empty());
        }
        // An acknowledged create answered NOT_FOUND later: lost.
        let history = [
            at(create("single-node-writer"), 0, 5, Outcome::Ok),
            at(publish("a"), 6, 8, Outcome::Refused(Code::NotFound)),
        ];
        assert_eq!(linearizable(&history).len(), 1);
        // A single-node volume acknowledged on two nodes at once.
        let history = [
            at(create("single-node-writer"), 0, 5, Outcome::Ok),
            at(publish("a"), 6, 8, Outcome::Ok),
            at(publish("b"), 9, 10, Outcome::Ok),
        ];
        assert_eq!(linearizable(&history).len(), 1);
    }
}
