//! Built-in placement: healthy, topology-compatible, below the volume limit;
//! the emptiest nodes first, with a bonus for the first preferred topology.

use std::fmt::Write;

use crate::{Candidates, Health, Pairs, PlacementRequest, Purpose, Verdicts, VerdictsBuilder};

#[derive(Clone, Debug)]
pub struct BuiltinPlacement {
    /// Score added to nodes in the volume's first preferred topology.
    pub preferred_bonus: i32,
}

impl Default for BuiltinPlacement {
    fn default() -> Self {
        BuiltinPlacement { preferred_bonus: 50 }
    }
}

fn show(out: &mut String, pairs: &Pairs) {
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{k}={v}");
    }
}

/// What is decided once per distinct topology: in the preferred topology, and
/// the reason when the volume cannot be reached from it.
struct TopologyVerdict {
    preferred: bool,
    outside: Option<u32>,
}

impl BuiltinPlacement {
    pub fn place(&self, request: &PlacementRequest, candidates: &Candidates) -> Verdicts {
        let required = match request.purpose {
            Purpose::Create => &request.volume.requisite_topology,
            Purpose::Publish => &request.accessible_topology,
        };
        let preferred = request.volume.preferred_topology.first();
        let mut wanted = String::new();
        for (i, t) in required.iter().enumerate() {
            if i > 0 {
                wanted.push_str(" or ");
            }
            show(&mut wanted, t);
        }
        let cols = &candidates.columns;
        let mut verdicts = VerdictsBuilder::new(candidates.len());
        let reach = cols.reaching(required);
        let prefer = preferred.map(|p| cols.satisfying(p));
        let topologies: Vec<TopologyVerdict> = (0..cols.topology_count())
            .map(|t| TopologyVerdict {
                preferred: prefer.as_ref().is_some_and(|p| p[t]),
                outside: (!reach[t]).then(|| {
                    let reason = format!("topology {} is outside {wanted}", cols.topology(t));
                    verdicts.reason(reason)
                }),
            })
            .collect();
        let mut full = String::new();
        for i in 0..candidates.len() {
            let topology = &topologies[cols.topology[i] as usize];
            match cols.health_of(i) {
                Health::Healthy => {}
                Health::Unhealthy => {
                    verdicts.refuse(i, "node plugin is unhealthy");
                    continue;
                }
                Health::Unknown => {
                    verdicts.refuse(i, "node plugin health is unknown");
                    continue;
                }
            }
            if let Some(outside) = topology.outside {
                verdicts.refuse_for(i, outside);
                continue;
            }
            let published = cols.published_volumes[i];
            let score = match cols.max_volumes_of(i) {
                Some(max) if published >= max => {
                    full.clear();
                    let _ = write!(full, "full: {published} of {max} volumes");
                    verdicts.refuse(i, &full);
                    continue;
                }
                // Emptiest first: free share of the limit, or fewer volumes when unlimited.
                Some(max) => ((max - published) * 100 / max) as i32,
                None => 100 - published.min(100) as i32,
            };
            let bonus = if topology.preferred {
                self.preferred_bonus
            } else {
                0
            };
            verdicts.score(i, score + bonus);
        }
        verdicts.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::candidates;
    use crate::samples::{node, pairs, volume};

    #[test]
    fn filters_and_ranks() {
        let mut v = volume("data");
        v.requisite_topology = vec![pairs(&[("zone", "a")])];
        v.preferred_topology = vec![pairs(&[("zone", "a"), ("rack", "2")])];
        let request = PlacementRequest {
            volume: v,
            purpose: Purpose::Create,
            accessible_topology: vec![],
            settings: vec![],
        };
        let mut full = node("full", &[("zone", "a")]);
        full.max_volumes = Some(1);
        full.published_volumes = 1;
        let mut sick = node("sick", &[("zone", "a")]);
        sick.health = Health::Unknown;
        let nodes = [
            node("a1", &[("zone", "a"), ("rack", "1")]),
            node("a2", &[("zone", "a"), ("rack", "2")]),
            node("b", &[("zone", "b")]),
            full,
            sick,
        ];
        let v = BuiltinPlacement::default().place(&request, &candidates(&nodes));
        assert!(v.is_eligible(0) && v.is_eligible(1));
        assert_eq!(v.scores[1], v.scores[0] + 50);
        assert_eq!(v.reason(2), Some("topology zone=b is outside zone=a"));
        assert_eq!(v.reason(3), Some("full: 1 of 1 volumes"));
        assert_eq!(v.reason(4), Some("node plugin health is unknown"));
    }

    #[test]
    fn publish_uses_the_accessible_topology() {
        let request = PlacementRequest {
            volume: volume("data"),
            purpose: Purpose::Publish,
            accessible_topology: vec![pairs(&[("zone", "b")])],
            settings: vec![],
        };
        let v = BuiltinPlacement::default().place(
            &request,
            &candidates(&[node("a", &[("zone", "a")]), node("b", &[("zone", "b")])]),
        );
        assert!(!v.is_eligible(0) && v.is_eligible(1));
    }
}
