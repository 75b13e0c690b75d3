//! The candidate set placement decides over: nodes, with their topologies and
//! label sets sent once each and referred to by index.

use std::collections::HashMap;

use super::{Candidate, Candidates, Health, Pairs, Verdict};

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

/// Builds the candidate set, sharing equal topologies and label sets.
pub fn candidates<'a>(nodes: impl IntoIterator<Item = &'a PlacementNode>) -> Candidates {
    let mut topologies = Interner::default();
    let mut label_sets = Interner::default();
    let nodes = nodes
        .into_iter()
        .map(|n| Candidate {
            name: n.name.clone(),
            topology: topologies.index(&n.topology),
            labels: label_sets.index(&n.labels),
            max_volumes: n.max_volumes,
            published_volumes: n.published_volumes,
            health: n.health,
        })
        .collect();
    Candidates {
        topologies: topologies.values,
        label_sets: label_sets.values,
        nodes,
    }
}

/// The eligible candidates' indexes, best first: highest score, ties in
/// candidate order. The one ranking every placement use shares.
pub fn ranked(verdicts: &[Verdict]) -> Vec<usize> {
    let mut eligible: Vec<usize> = (0..verdicts.len()).filter(|&i| verdicts[i].eligible).collect();
    eligible.sort_by_key(|&i| std::cmp::Reverse(verdicts[i].score));
    eligible
}

/// Each node with placement's reason for it: `a: full; b: wrong zone`.
pub fn refusals(nodes: &[PlacementNode], verdicts: &[Verdict]) -> String {
    let why: Vec<String> = nodes
        .iter()
        .zip(verdicts)
        .map(|(n, v)| format!("{}: {}", n.name, v.reason))
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

impl Candidates {
    /// The topology segments of a candidate.
    pub fn topology_of(&self, c: &Candidate) -> &Pairs {
        &self.topologies[c.topology as usize]
    }

    /// The labels of a candidate.
    pub fn labels_of(&self, c: &Candidate) -> &Pairs {
        &self.label_sets[c.labels as usize]
    }

    /// Whether every index points into the tables.
    pub(crate) fn check(&self) -> Result<(), String> {
        match self.nodes.iter().find(|n| {
            n.topology as usize >= self.topologies.len() || n.labels as usize >= self.label_sets.len()
        }) {
            Some(n) => Err(format!(
                "candidate {:?} refers past the topology or label tables",
                n.name
            )),
            None => Ok(()),
        }
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
        let nodes = [node("a", &[("zone", "z1")]), b, node("c", &[("zone", "z2")])];
        let c = candidates(&nodes);
        assert_eq!(c.topologies.len(), 2);
        assert_eq!(c.label_sets.len(), 2);
        assert_eq!(c.nodes[0].topology, c.nodes[1].topology);
        assert_eq!(c.topology_of(&c.nodes[2]), &pairs(&[("zone", "z2")]));
        assert_eq!(c.labels_of(&c.nodes[1]), &pairs(&[("disk", "ssd")]));
        assert!(c.check().is_ok());
    }

    #[test]
    fn ranking_puts_the_best_first_and_keeps_ties_in_order() {
        let v = |eligible, score| Verdict {
            eligible,
            score,
            reason: String::new(),
        };
        let verdicts = [v(true, 1), v(false, 9), v(true, 5), v(true, 5), v(true, -2)];
        assert_eq!(ranked(&verdicts), vec![2, 3, 0, 4]);
        assert!(ranked(&[v(false, 1)]).is_empty());
    }
}
