//! Built-in placement: healthy, topology-compatible, below the volume limit;
//! the emptiest nodes first, with a bonus for the first preferred topology.

use std::fmt::Write;

use crate::policy::{Candidate, Candidates, Health, Pairs, PlacementRequest, Purpose, Verdict};

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

fn get<'a>(pairs: &'a Pairs, key: &str) -> Option<&'a str> {
    pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// Whether every segment of `required` is in `topology` with the same value.
pub fn satisfies(topology: &Pairs, required: &Pairs) -> bool {
    required.iter().all(|(k, v)| get(topology, k) == Some(v.as_str()))
}

/// Whether a node with `topology` reaches any of `accessible` (empty: everywhere).
pub fn reachable(topology: &Pairs, accessible: &[Pairs]) -> bool {
    accessible.is_empty() || accessible.iter().any(|t| satisfies(topology, t))
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
    outside: Option<String>,
}

impl BuiltinPlacement {
    pub fn place(&self, request: &PlacementRequest, candidates: &Candidates) -> Vec<Verdict> {
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
        let topologies: Vec<TopologyVerdict> = candidates
            .topologies
            .iter()
            .map(|t| {
                let reach = reachable(t, required);
                TopologyVerdict {
                    preferred: preferred.is_some_and(|p| satisfies(t, p)),
                    outside: (!reach).then(|| {
                        let mut reason = String::from("topology ");
                        show(&mut reason, t);
                        reason.push_str(" is outside ");
                        reason.push_str(&wanted);
                        reason
                    }),
                }
            })
            .collect();
        candidates
            .nodes
            .iter()
            .map(|n| self.judge(n, &topologies[n.topology as usize]))
            .collect()
    }

    fn judge(&self, node: &Candidate, topology: &TopologyVerdict) -> Verdict {
        let no = |reason: String| Verdict {
            eligible: false,
            score: 0,
            reason,
        };
        match node.health {
            Health::Healthy => {}
            Health::Unhealthy => return no("node plugin is unhealthy".into()),
            Health::Unknown => return no("node plugin health is unknown".into()),
        }
        if let Some(outside) = &topology.outside {
            return no(outside.clone());
        }
        if let Some(max) = node.max_volumes
            && node.published_volumes >= max
        {
            return no(format!("full: {} of {max} volumes", node.published_volumes));
        }
        let (mut score, mut reason) = match node.max_volumes {
            Some(max) if max > 0 => (
                ((max - node.published_volumes) * 100 / max) as i32,
                format!("{} of {max} volumes used", node.published_volumes),
            ),
            _ => (
                100 - node.published_volumes.min(100) as i32,
                format!("{} volumes, no limit", node.published_volumes),
            ),
        };
        if topology.preferred {
            score += self.preferred_bonus;
            reason.push_str(", preferred topology");
        }
        Verdict {
            eligible: true,
            score,
            reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::candidates;
    use crate::policy::samples::{node, pairs, volume};

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
        assert!(v[0].eligible && v[1].eligible);
        assert_eq!(v[1].score, v[0].score + 50);
        assert_eq!(v[2].reason, "topology zone=b is outside zone=a");
        assert_eq!(v[3].reason, "full: 1 of 1 volumes");
        assert!(!v[4].eligible);
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
        assert!(!v[0].eligible && v[1].eligible);
    }
}
