//! The candidate set placement decides over, and the verdicts it gives: both
//! as columns, one entry per node, with topologies and label sets sent once
//! each and referred to by index.

use std::collections::HashMap;
use std::fmt;
use std::hash::BuildHasherDefault;
use std::ops::Range;

use crate::shared::Fnv;
use crate::{CandidateColumns, Health, Pairs, Verdicts};

/// One node as placement sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct PlacementNode {
    pub name: String,
    pub topology: Pairs,
    pub labels: Pairs,
    pub max_volumes: Option<u64>,
    pub published_volumes: u64,
    pub health: Health,
}

/// The nodes to judge: the columns a guest receives, and the nodes' names,
/// which stay in the host (0.1.0 guests, which take names, get them here).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Candidates {
    pub names: Vec<String>,
    pub columns: CandidateColumns,
}

/// Builds the candidate set, sending each string, topology and label set once.
pub fn candidates<'a>(nodes: impl IntoIterator<Item = &'a PlacementNode>) -> Candidates {
    let nodes: Vec<&PlacementNode> = nodes.into_iter().collect();
    let mut tables = Tables::default();
    // Topologies first, then label sets: each kind's ranges are contiguous.
    let (topologies, topology) = tables.sets(nodes.iter().map(|n| &n.topology));
    let (label_sets, labels) = tables.sets(nodes.iter().map(|n| &n.labels));
    Candidates {
        names: nodes.iter().map(|n| n.name.clone()).collect(),
        columns: CandidateColumns {
            strings: tables.strings,
            pair_keys: tables.keys,
            pair_values: tables.values,
            topologies,
            label_sets,
            topology,
            labels,
            // CSI's own convention: 0 is no limit.
            max_volumes: nodes.iter().map(|n| n.max_volumes.unwrap_or(0)).collect(),
            published_volumes: nodes.iter().map(|n| n.published_volumes).collect(),
            health: nodes.iter().map(|n| health_byte(n.health)).collect(),
        },
    }
}

/// A health as the candidates' `health` column carries it.
pub fn health_byte(h: Health) -> u8 {
    match h {
        Health::Healthy => 0,
        Health::Unhealthy => 1,
        Health::Unknown => 2,
    }
}

impl Candidates {
    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Whether every column has one entry per node and every index and range
    /// points into its table: the columns' accessors rely on it.
    pub fn check(&self) -> Result<(), ColumnsError> {
        let c = &self.columns;
        let n = self.names.len();
        let lengths = [
            c.topology.len(),
            c.labels.len(),
            c.max_volumes.len(),
            c.published_volumes.len(),
            c.health.len(),
        ];
        if lengths.iter().any(|l| *l != n) {
            return Err(ColumnsError::Lengths { lengths, nodes: n });
        }
        let pairs = c.pair_keys.len();
        if c.pair_values.len() != pairs {
            return Err(ColumnsError::Pairs {
                keys: pairs,
                values: c.pair_values.len(),
            });
        }
        // `max` first: one vectorised pass per column in the common case.
        let below = |col: &[u32], len: usize| col.iter().copied().max().is_none_or(|m| (m as usize) < len);
        let strings = c.strings.len();
        if !below(&c.pair_keys, strings) || !below(&c.pair_values, strings) {
            return Err(ColumnsError::PastStrings);
        }
        let ranges_ok = |offsets: &[u32]| {
            !offsets.is_empty()
                && offsets.windows(2).all(|w| w[0] <= w[1])
                && offsets.last().is_some_and(|end| *end as usize <= pairs)
        };
        if !ranges_ok(&c.topologies) || !ranges_ok(&c.label_sets) {
            return Err(ColumnsError::Ranges);
        }
        if !below(&c.topology, c.topology_count()) || !below(&c.labels, c.label_set_count()) {
            let past = |col: &[u32], len: usize| col.iter().position(|i| *i as usize >= len);
            let i = past(&c.topology, c.topology_count())
                .or(past(&c.labels, c.label_set_count()))
                .unwrap_or_default();
            return Err(ColumnsError::PastTables(self.names[i].clone()));
        }
        if c.health.iter().copied().max().is_some_and(|h| h > 2) {
            let i = c.health.iter().position(|h| *h > 2).unwrap_or_default();
            return Err(ColumnsError::Health {
                candidate: self.names[i].clone(),
                health: c.health[i],
            });
        }
        Ok(())
    }
}

/// How a candidate set's columns do not fit together (the host's own bug,
/// caught before a guest reads them).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ColumnsError {
    #[error("the candidate columns have lengths {lengths:?} for {nodes} nodes")]
    Lengths { lengths: [usize; 5], nodes: usize },
    #[error("{keys} pair keys but {values} pair values")]
    Pairs { keys: usize, values: usize },
    #[error("a pair refers past the strings")]
    PastStrings,
    #[error("the topology or label set ranges are not ascending within the pairs")]
    Ranges,
    #[error("candidate {0:?} refers past the topology or label tables")]
    PastTables(String),
    #[error("candidate {candidate:?} has health {health}")]
    Health { candidate: String, health: u8 },
}

crate::shared::segments!(CandidateColumns);

impl CandidateColumns {
    fn range(&self, offsets: &[u32], i: usize) -> Segments<'_> {
        Segments::of(self, offsets, i)
    }

    pub fn topology_count(&self) -> usize {
        self.topologies.len().saturating_sub(1)
    }

    pub fn label_set_count(&self) -> usize {
        self.label_sets.len().saturating_sub(1)
    }

    /// Distinct topology `t`.
    pub fn topology(&self, t: usize) -> Segments<'_> {
        self.range(&self.topologies, t)
    }

    /// Distinct label set `s`.
    pub fn label_set(&self, s: usize) -> Segments<'_> {
        self.range(&self.label_sets, s)
    }
}

impl Verdicts {
    /// Every node eligible with score 0: the start a policy fills in.
    pub fn new(nodes: usize) -> Self {
        Verdicts {
            refusals: vec![0; nodes],
            scores: vec![0; nodes],
            reasons: vec![],
        }
    }

    pub fn len(&self) -> usize {
        self.refusals.len()
    }

    pub fn is_empty(&self) -> bool {
        self.refusals.is_empty()
    }

    pub fn is_eligible(&self, i: usize) -> bool {
        self.refusals[i] == 0
    }

    /// Why node `i` was refused; `None` when it is eligible.
    pub fn reason(&self, i: usize) -> Option<&str> {
        let r = self.refusals[i] as usize;
        (r > 0).then(|| self.reasons[r - 1].as_str())
    }

    /// Refuses node `i`, with a reason of its own (not shared with others).
    pub fn refuse(&mut self, i: usize, reason: String) {
        self.reasons.push(reason);
        self.refusals[i] = self.reasons.len() as u32;
    }
}

/// Builds verdicts with each distinct reason sent once.
pub struct VerdictsBuilder {
    verdicts: Verdicts,
    seen: HashMap<String, u32, BuildHasherDefault<Fnv>>,
}

impl VerdictsBuilder {
    pub fn new(nodes: usize) -> Self {
        VerdictsBuilder {
            verdicts: Verdicts::new(nodes),
            seen: HashMap::default(),
        }
    }

    pub fn score(&mut self, i: usize, score: i32) {
        self.verdicts.scores[i] = score;
    }

    /// Adds a reason to refuse any number of nodes for with [`Self::refuse_for`].
    pub fn reason(&mut self, text: String) -> u32 {
        self.verdicts.reasons.push(text);
        self.verdicts.reasons.len() as u32
    }

    pub fn refuse_for(&mut self, i: usize, reason: u32) {
        self.verdicts.refusals[i] = reason;
    }

    /// Refuses node `i` for `reason`, shared with every node refused for the same.
    pub fn refuse(&mut self, i: usize, reason: &str) {
        let r = match self.seen.get(reason) {
            Some(r) => *r,
            None => {
                let r = self.reason(reason.to_string());
                self.seen.insert(reason.to_string(), r);
                r
            }
        };
        self.refuse_for(i, r);
    }

    pub fn finish(self) -> Verdicts {
        self.verdicts
    }
}

/// The eligible candidates' indexes, best first: highest score, ties in
/// candidate order. The one ranking every placement use shares.
pub fn ranked(verdicts: &Verdicts) -> Vec<usize> {
    let mut eligible: Vec<usize> = (0..verdicts.len()).filter(|&i| verdicts.is_eligible(i)).collect();
    eligible.sort_by_key(|&i| std::cmp::Reverse(verdicts.scores[i]));
    eligible
}

/// Each node with placement's verdict on it: `a: full; b: eligible`.
pub fn refusals(nodes: &[PlacementNode], verdicts: &Verdicts) -> String {
    let why: Vec<String> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| format!("{}: {}", n.name, verdicts.reason(i).unwrap_or("eligible")))
        .collect();
    why.join("; ")
}

/// The shared tables the candidates' columns index.
#[derive(Default)]
struct Tables<'a> {
    seen: HashMap<&'a str, u32>,
    strings: Vec<String>,
    keys: Vec<u32>,
    values: Vec<u32>,
}

impl<'a> Tables<'a> {
    fn string(&mut self, s: &'a str) -> u32 {
        *self.seen.entry(s).or_insert_with(|| {
            self.strings.push(s.to_string());
            (self.strings.len() - 1) as u32
        })
    }

    /// The distinct sets as ranges of pairs, and each item's set.
    fn sets(&mut self, items: impl Iterator<Item = &'a Pairs>) -> (Vec<u32>, Vec<u32>) {
        let mut offsets = vec![self.keys.len() as u32];
        let mut seen: HashMap<&Pairs, u32> = HashMap::new();
        let index = items
            .map(|set| {
                *seen.entry(set).or_insert_with(|| {
                    for (k, v) in set {
                        let (k, v) = (self.string(k), self.string(v));
                        self.keys.push(k);
                        self.values.push(v);
                    }
                    offsets.push(self.keys.len() as u32);
                    (offsets.len() - 2) as u32
                })
            })
            .collect();
        (offsets, index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::samples::{node, pairs};

    #[test]
    fn equal_topologies_and_labels_are_sent_once() {
        let mut b = node("b", &[("zone", "z1")]);
        b.labels = pairs(&[("disk", "ssd")]);
        b.max_volumes = Some(8);
        let nodes = [node("a", &[("zone", "z1")]), b, node("c", &[("zone", "z2")])];
        let c = candidates(&nodes);
        let cols = &c.columns;
        assert_eq!((cols.topology_count(), cols.label_set_count()), (2, 2));
        // zone, z1, z2, disk, ssd: each string once.
        assert_eq!(cols.strings.len(), 5);
        assert_eq!(cols.topology[0], cols.topology[1]);
        assert_eq!(cols.topology_of(2).to_pairs(), pairs(&[("zone", "z2")]));
        assert_eq!(cols.labels_of(1).to_pairs(), pairs(&[("disk", "ssd")]));
        assert!(cols.labels_of(0).to_pairs().is_empty());
        assert_eq!(cols.topology_of(0).to_string(), "zone=z1");
        assert_eq!(cols.max_volumes, vec![0, 8, 0]);
        assert_eq!((cols.max_volumes_of(0), cols.max_volumes_of(1)), (None, Some(8)));
        assert_eq!(cols.health_of(2), Health::Healthy);
        assert!(c.check().is_ok());
    }

    #[test]
    fn topologies_are_matched_by_index() {
        let nodes = [
            node("a", &[("zone", "a"), ("rack", "1")]),
            node("b", &[("zone", "b")]),
            node("c", &[("rack", "1")]),
        ];
        let cols = candidates(&nodes).columns;
        assert_eq!(
            cols.satisfying(&pairs(&[("zone", "a")])),
            vec![true, false, false]
        );
        assert_eq!(cols.satisfying(&pairs(&[("rack", "1")])), vec![true, false, true]);
        assert_eq!(cols.satisfying(&pairs(&[])), vec![true; 3]);
        // A string no node has, and known strings paired differently.
        assert_eq!(cols.satisfying(&pairs(&[("zone", "c")])), vec![false; 3]);
        assert_eq!(cols.satisfying(&pairs(&[("zone", "1")])), vec![false; 3]);
        assert_eq!(cols.reaching(&[]), vec![true; 3]);
        let either = [pairs(&[("zone", "b")]), pairs(&[("rack", "1")])];
        assert_eq!(cols.reaching(&either), vec![true, true, true]);
        assert_eq!(cols.reaching(&either[..1]), vec![false, true, false]);
    }

    #[test]
    fn a_short_column_or_an_index_past_its_table_is_caught() {
        let mut c = candidates(&[node("a", &[]), node("b", &[])]);
        c.columns.health.pop();
        assert!(c.check().unwrap_err().to_string().contains("lengths"));
        let mut c = candidates(&[node("a", &[]), node("b", &[])]);
        c.columns.labels[1] = 7;
        assert!(c.check().unwrap_err().to_string().contains("\"b\""));
        let mut c = candidates(&[node("a", &[("zone", "z1")])]);
        c.columns.pair_values[0] = 9;
        assert!(c.check().unwrap_err().to_string().contains("strings"));
        let mut c = candidates(&[node("a", &[("zone", "z1")])]);
        c.columns.topologies = vec![1, 0];
        assert!(c.check().unwrap_err().to_string().contains("ascending"));
        let mut c = candidates(&[node("a", &[])]);
        c.columns.health[0] = 3;
        assert!(c.check().unwrap_err().to_string().contains("health 3"));
    }

    #[test]
    fn ranking_puts_the_best_first_and_keeps_ties_in_order() {
        let mut v = VerdictsBuilder::new(5);
        for (i, s) in [1, 9, 5, 5, -2].into_iter().enumerate() {
            v.score(i, s);
        }
        v.refuse(1, "full");
        let v = v.finish();
        assert_eq!(ranked(&v), vec![2, 3, 0, 4]);
        let mut none = Verdicts::new(1);
        none.refuse(0, "full".into());
        assert!(ranked(&none).is_empty());
    }

    #[test]
    fn equal_reasons_are_sent_once() {
        let mut v = VerdictsBuilder::new(3);
        v.refuse(0, "full");
        v.refuse(2, "full");
        v.refuse(1, "sick");
        let v = v.finish();
        assert_eq!(v.reasons, vec!["full", "sick"]);
        assert_eq!(v.refusals, vec![1, 2, 1]);
        assert_eq!((v.reason(2), v.reason(1)), (Some("full"), Some("sick")));
        let nodes = [node("a", &[]), node("b", &[]), node("c", &[])];
        assert_eq!(refusals(&nodes, &v), "a: full; b: sick; c: full");
    }
}
