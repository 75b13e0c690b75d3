//! Reading placement's candidates: node `i`'s entry in each column, and the
//! shared tables of strings, topologies and label sets they index.

use std::fmt;
use std::ops::Range;

use crate::{Candidates, Health, Lookup, Pairs};

crate::shared::segments!(Candidates);

impl Lookup for Segments<'_> {
    fn value(&self, key: &str) -> Option<&str> {
        self.get(key)
    }
}

impl Candidates {
    /// How many nodes there are to judge.
    pub fn len(&self) -> usize {
        self.topology.len()
    }

    pub fn is_empty(&self) -> bool {
        self.topology.is_empty()
    }

    fn range(&self, offsets: &[u32], i: usize) -> Segments<'_> {
        Segments::of(self, offsets, i)
    }

    /// The distinct topologies, in the order `topology` indexes them: judge
    /// each once, then each node by its index.
    pub fn topologies(&self) -> impl Iterator<Item = Segments<'_>> {
        (0..self.topologies.len().saturating_sub(1)).map(|t| self.range(&self.topologies, t))
    }

    /// The distinct label sets, in the order `labels` indexes them.
    pub fn label_sets(&self) -> impl Iterator<Item = Segments<'_>> {
        (0..self.label_sets.len().saturating_sub(1)).map(|s| self.range(&self.label_sets, s))
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::{candidates, node, pairs};
    use crate::{Health, reachable, satisfies};

    #[test]
    fn nodes_read_through_the_shared_tables() {
        let mut b = node("b", &[("zone", "a"), ("rack", "1")]);
        b.labels = pairs(&[("disk", "ssd")]);
        b.health = Some(Health::Unhealthy);
        b.max_volumes = Some(4);
        let c = candidates(&[node("a", &[("zone", "a")]), b, node("c", &[("zone", "a")])]);
        assert_eq!(c.len(), 3);
        assert_eq!(c.topologies().count(), 2);
        assert_eq!(c.topology_of(1).to_string(), "zone=a,rack=1");
        assert_eq!(c.topology_of(2).to_pairs(), pairs(&[("zone", "a")]));
        assert_eq!(c.labels_of(1).get("disk"), Some("ssd"));
        assert_eq!(c.labels_of(0).get("disk"), None);
        assert_eq!(
            (c.health_of(0), c.health_of(1)),
            (Health::Healthy, Health::Unhealthy)
        );
        assert_eq!((c.max_volumes_of(0), c.max_volumes_of(1)), (None, Some(4)));
        // "a" is both a value of zone and shared: every string once.
        assert_eq!(c.strings.len(), 6);
        let t = c.topology_of(1);
        assert!(satisfies(&t, &pairs(&[("zone", "a")])));
        assert!(!satisfies(&t, &pairs(&[("zone", "b")])));
        assert!(reachable(&t, &[pairs(&[("zone", "b")]), pairs(&[("rack", "1")])]));
        // The same judgement per distinct topology, by index.
        assert_eq!(c.satisfying(&pairs(&[("rack", "1")])), vec![false, true]);
        assert_eq!(c.satisfying(&pairs(&[("zone", "1")])), vec![false, false]);
        assert_eq!(c.reaching(&[]), vec![true, true]);
        assert_eq!(
            c.reaching(&[pairs(&[("zone", "b")]), pairs(&[("zone", "a")])]),
            vec![true, true]
        );
    }
}
