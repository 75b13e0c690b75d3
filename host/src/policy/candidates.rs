//! The candidate set placement decides over, and the verdicts it gives: both
//! as columns, one entry per node, with topologies and label sets sent once
//! each and referred to by index.

use std::collections::HashMap;

use super::{CandidateColumns, Health, Pairs, Verdicts};

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
#[derive(Clone, Debug, PartialEq)]
pub struct Candidates {
    pub names: Vec<String>,
    pub columns: CandidateColumns,
}

/// Builds the candidate set, sharing equal topologies and label sets.
pub fn candidates<'a>(nodes: impl IntoIterator<Item = &'a PlacementNode>) -> Candidates {
    let nodes = nodes.into_iter();
    let n = nodes.size_hint().0;
    let mut topologies = Interner::default();
    let mut label_sets = Interner::default();
    let mut c = Candidates {
        names: Vec::with_capacity(n),
        columns: CandidateColumns {
            topologies: vec![],
            label_sets: vec![],
            topology: Vec::with_capacity(n),
            labels: Vec::with_capacity(n),
            max_volumes: Vec::with_capacity(n),
            published_volumes: Vec::with_capacity(n),
            health: Vec::with_capacity(n),
        },
    };
    for node in nodes {
        let cols = &mut c.columns;
        c.names.push(node.name.clone());
        cols.topology.push(topologies.index(&node.topology));
        cols.labels.push(label_sets.index(&node.labels));
        // CSI's own convention: 0 is no limit.
        cols.max_volumes.push(node.max_volumes.unwrap_or(0));
        cols.published_volumes.push(node.published_volumes);
        cols.health.push(node.health);
    }
    c.columns.topologies = topologies.values;
    c.columns.label_sets = label_sets.values;
    c
}

impl Candidates {
    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Whether every column has one entry per node and every index points
    /// into its table.
    pub(crate) fn check(&self) -> Result<(), String> {
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
            return Err(format!(
                "the candidate columns have lengths {lengths:?} for {n} nodes"
            ));
        }
        let past = |col: &[u32], len: usize| col.iter().position(|i| *i as usize >= len);
        match past(&c.topology, c.topologies.len()).or(past(&c.labels, c.label_sets.len())) {
            Some(i) => Err(format!(
                "candidate {:?} refers past the topology or label tables",
                self.names[i]
            )),
            None => Ok(()),
        }
    }
}

impl CandidateColumns {
    /// Node `i`'s topology segments.
    pub fn topology_of(&self, i: usize) -> &Pairs {
        &self.topologies[self.topology[i] as usize]
    }

    /// Node `i`'s labels.
    pub fn labels_of(&self, i: usize) -> &Pairs {
        &self.label_sets[self.labels[i] as usize]
    }

    /// Node `i`'s volume limit; `None` for no limit.
    pub fn max_volumes_of(&self, i: usize) -> Option<u64> {
        Some(self.max_volumes[i]).filter(|m| *m > 0)
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
    seen: HashMap<String, u32>,
}

impl VerdictsBuilder {
    pub fn new(nodes: usize) -> Self {
        VerdictsBuilder {
            verdicts: Verdicts::new(nodes),
            seen: HashMap::new(),
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

#[derive(Default)]
struct Interner<'a> {
    seen: HashMap<&'a Pairs, u32>,
    values: Vec<Pairs>,
}

impl<'a> Interner<'a> {
    fn index(&mut self, pairs: &'a Pairs) -> u32 {
        *self.seen.entry(pairs).or_insert_with(|| {
            self.values.push(pairs.clone());
            (self.values.len() - 1) as u32
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::samples::{node, pairs};

    #[test]
    fn equal_topologies_and_labels_are_sent_once() {
        let mut b = node("b", &[("zone", "z1")]);
        b.labels = pairs(&[("disk", "ssd")]);
        b.max_volumes = Some(8);
        let nodes = [node("a", &[("zone", "z1")]), b, node("c", &[("zone", "z2")])];
        let c = candidates(&nodes);
        let cols = &c.columns;
        assert_eq!(cols.topologies.len(), 2);
        assert_eq!(cols.label_sets.len(), 2);
        assert_eq!(cols.topology[0], cols.topology[1]);
        assert_eq!(cols.topology_of(2), &pairs(&[("zone", "z2")]));
        assert_eq!(cols.labels_of(1), &pairs(&[("disk", "ssd")]));
        assert_eq!(cols.max_volumes, vec![0, 8, 0]);
        assert_eq!((cols.max_volumes_of(0), cols.max_volumes_of(1)), (None, Some(8)));
        assert!(c.check().is_ok());
    }

    #[test]
    fn a_short_column_or_an_index_past_its_table_is_caught() {
        let mut c = candidates(&[node("a", &[]), node("b", &[])]);
        c.columns.health.pop();
        assert!(c.check().unwrap_err().contains("lengths"));
        let mut c = candidates(&[node("a", &[]), node("b", &[])]);
        c.columns.labels[1] = 7;
        assert!(c.check().unwrap_err().contains("\"b\""));
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
