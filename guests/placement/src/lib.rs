//! Sample placement policy: topology-, label- and capacity-aware, with reasons.
//!
//! A node is eligible when it is healthy, inside the volume's topology, below
//! its volume limit, and carries every label the volume asks for. Labels are
//! asked for by the `node-selector` setting (`k=v,k2=v2`, for every volume) and
//! by volume labels named `node-selector/<key>`. Among eligible nodes the
//! emptiest scores highest; the volume's first preferred topology adds
//! `preferred-bonus` (default 50).

use std::fmt::Write;

use berth_guest::{
    Candidate, Candidates, Health, Pairs, Placement, PlacementRequest, Purpose, Verdict, get, number_setting,
    parse_pairs, reachable, satisfies,
};

pub struct SamplePlacement;

const SELECTOR_LABEL: &str = "node-selector/";

fn ineligible(reason: String) -> Verdict {
    Verdict {
        eligible: false,
        score: 0,
        reason,
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

/// What is decided once per distinct topology or label set.
struct Shared<'a> {
    /// Per topology: in the preferred topology, and the reason when not reachable.
    topology: Vec<(bool, Option<String>)>,
    /// Per label set: the first selector label it lacks.
    missing_label: Vec<Option<&'a (String, String)>>,
    bonus: i32,
}

fn judge(node: &Candidate, shared: &Shared) -> Verdict {
    match node.health {
        Health::Healthy => {}
        Health::Unhealthy => return ineligible("node plugin is unhealthy".into()),
        Health::Unknown => return ineligible("node plugin health is unknown".into()),
    }
    let (prefer, outside) = &shared.topology[node.topology as usize];
    if let Some(outside) = outside {
        return ineligible(outside.clone());
    }
    if let Some(max) = node.max_volumes
        && node.published_volumes >= max
    {
        return ineligible(format!("full: {} of {max} volumes", node.published_volumes));
    }
    if let Some((k, v)) = shared.missing_label[node.labels as usize] {
        return ineligible(format!("label {k}={v} missing"));
    }
    // Emptiest first: free share of the limit, or fewer volumes when unlimited.
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
    if *prefer {
        score += shared.bonus;
        reason.push_str(", preferred topology");
    }
    Verdict {
        eligible: true,
        score,
        reason,
    }
}

impl Placement for SamplePlacement {
    fn place(request: PlacementRequest, candidates: Candidates) -> Vec<Verdict> {
        let settings = &request.settings;
        let selector = parse_pairs(get(settings, "node-selector").unwrap_or(""));
        let bonus = number_setting(settings, "preferred-bonus", 50);
        let (mut selector, bonus) = match (selector, bonus) {
            (Ok(s), Ok(b)) => (s, b.min(1000) as i32),
            (Err(e), _) | (_, Err(e)) => {
                return candidates
                    .nodes
                    .iter()
                    .map(|_| ineligible(format!("bad setting: {e}")))
                    .collect();
            }
        };
        for (k, v) in &request.volume.labels {
            if let Some(key) = k.strip_prefix(SELECTOR_LABEL) {
                selector.push((key.to_string(), v.clone()));
            }
        }
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
        let shared = Shared {
            topology: candidates
                .topologies
                .iter()
                .map(|t| {
                    let outside = (!reachable(t, required)).then(|| {
                        let mut reason = String::from("topology ");
                        show(&mut reason, t);
                        reason.push_str(" is outside ");
                        reason.push_str(&wanted);
                        reason
                    });
                    (preferred.is_some_and(|p| satisfies(t, p)), outside)
                })
                .collect(),
            missing_label: candidates
                .label_sets
                .iter()
                .map(|labels| selector.iter().find(|(k, v)| get(labels, k) != Some(v.as_str())))
                .collect(),
            bonus,
        };
        candidates.nodes.iter().map(|n| judge(n, &shared)).collect()
    }
}

berth_guest::export_placement!(SamplePlacement);

#[cfg(test)]
mod tests {
    use super::*;
    use berth_guest::testing::{TestNode, candidates, node, pairs, volume};

    fn request(purpose: Purpose) -> PlacementRequest {
        PlacementRequest {
            volume: volume("data"),
            purpose,
            accessible_topology: vec![],
            settings: vec![],
        }
    }

    #[test]
    fn filters_with_reasons_and_prefers_the_emptiest() {
        let mut req = request(Purpose::Create);
        req.volume.requisite_topology = vec![pairs(&[("zone", "a")])];
        let full = TestNode {
            max_volumes: Some(2),
            published_volumes: 2,
            ..node("full", &[("zone", "a")])
        };
        let busy = TestNode {
            max_volumes: Some(4),
            published_volumes: 3,
            ..node("busy", &[("zone", "a")])
        };
        let sick = TestNode {
            health: Some(Health::Unhealthy),
            ..node("sick", &[("zone", "a")])
        };
        let nodes = [
            node("idle", &[("zone", "a")]),
            node("far", &[("zone", "b")]),
            full,
            busy,
            sick,
        ];
        let v = SamplePlacement::place(req, candidates(&nodes));
        assert_eq!(v.len(), 5);
        assert!(v[0].eligible && v[3].eligible);
        assert!(v[0].score > v[3].score, "emptiest first");
        assert!(v[1].reason.contains("outside zone=a"), "{}", v[1].reason);
        assert_eq!(v[2].reason, "full: 2 of 2 volumes");
        assert!(v[4].reason.contains("unhealthy"));
    }

    #[test]
    fn labels_from_settings_and_volume() {
        let mut req = request(Purpose::Publish);
        req.settings = pairs(&[("node-selector", "tier=gold")]);
        req.volume.labels = pairs(&[("node-selector/disk", "ssd"), ("team", "x")]);
        let good = TestNode {
            labels: pairs(&[("tier", "gold"), ("disk", "ssd")]),
            ..node("good", &[])
        };
        let hdd = TestNode {
            labels: pairs(&[("tier", "gold"), ("disk", "hdd")]),
            ..node("hdd", &[])
        };
        let v = SamplePlacement::place(req, candidates(&[good, hdd]));
        assert!(v[0].eligible);
        assert_eq!(v[1].reason, "label disk=ssd missing");
    }

    #[test]
    fn preferred_topology_and_bad_settings() {
        let mut req = request(Purpose::Create);
        req.volume.preferred_topology = vec![pairs(&[("zone", "b")])];
        let nodes = [node("a", &[("zone", "a")]), node("b", &[("zone", "b")])];
        let v = SamplePlacement::place(req.clone(), candidates(&nodes));
        assert!(v[1].score > v[0].score);
        req.settings = pairs(&[("node-selector", "nonsense")]);
        let v = SamplePlacement::place(req, candidates(&[node("a", &[])]));
        assert!(!v[0].eligible && v[0].reason.starts_with("bad setting"));
    }
}
