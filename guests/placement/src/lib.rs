//! Sample placement policy: topology-, label- and capacity-aware, with reasons.
//!
//! A node is eligible when it is healthy, inside the volume's topology, below
//! its volume limit, and carries every label the volume asks for. Labels are
//! asked for by the `node-selector` setting (`k=v,k2=v2`, for every volume) and
//! by volume labels named `node-selector/<key>`. Among eligible nodes the
//! emptiest scores highest; the volume's first preferred topology adds
//! `preferred-bonus` (default 50).

use berth_guest::{
    Health, Node, Pairs, Placement, PlacementRequest, Purpose, Verdict, get, number_setting, parse_pairs,
    reachable, satisfies,
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

fn show(pairs: &Pairs) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn judge(
    node: &Node,
    required: &[Pairs],
    selector: &Pairs,
    preferred: Option<&Pairs>,
    bonus: i32,
) -> Verdict {
    match node.health {
        Health::Healthy => {}
        Health::Unhealthy => return ineligible("node plugin is unhealthy".into()),
        Health::Unknown => return ineligible("node plugin health is unknown".into()),
    }
    if !reachable(&node.topology, required) {
        let wanted = required.iter().map(show).collect::<Vec<_>>().join(" or ");
        return ineligible(format!("topology {} is outside {wanted}", show(&node.topology)));
    }
    if let Some(max) = node.max_volumes
        && node.published_volumes >= max
    {
        return ineligible(format!("full: {} of {max} volumes", node.published_volumes));
    }
    if let Some((k, v)) = selector
        .iter()
        .find(|(k, v)| get(&node.labels, k) != Some(v.as_str()))
    {
        return ineligible(format!("label {k}={v} missing"));
    }
    // Emptiest first: free share of the limit, or fewer volumes when unlimited.
    let mut score = match node.max_volumes {
        Some(max) if max > 0 => ((max - node.published_volumes) * 100 / max) as i32,
        _ => 100 - node.published_volumes.min(100) as i32,
    };
    let mut reason = match node.max_volumes {
        Some(max) => format!("{} of {max} volumes used", node.published_volumes),
        None => format!("{} volumes, no limit", node.published_volumes),
    };
    if preferred.is_some_and(|p| satisfies(&node.topology, p)) {
        score += bonus;
        reason.push_str(", preferred topology");
    }
    Verdict {
        eligible: true,
        score,
        reason,
    }
}

impl Placement for SamplePlacement {
    fn place(request: PlacementRequest, candidates: Vec<Node>) -> Vec<Verdict> {
        let settings = &request.settings;
        let selector = parse_pairs(get(settings, "node-selector").unwrap_or(""));
        let bonus = number_setting(settings, "preferred-bonus", 50);
        let (mut selector, bonus) = match (selector, bonus) {
            (Ok(s), Ok(b)) => (s, b.min(1000) as i32),
            (Err(e), _) | (_, Err(e)) => {
                return candidates
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
        candidates
            .iter()
            .map(|n| judge(n, required, &selector, preferred, bonus))
            .collect()
    }
}

berth_guest::export_placement!(SamplePlacement);

#[cfg(test)]
mod tests {
    use super::*;
    use berth_guest::testing::{node, pairs, volume};

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
        let mut full = node("full", &[("zone", "a")]);
        full.max_volumes = Some(2);
        full.published_volumes = 2;
        let mut busy = node("busy", &[("zone", "a")]);
        busy.max_volumes = Some(4);
        busy.published_volumes = 3;
        let mut sick = node("sick", &[("zone", "a")]);
        sick.health = Health::Unhealthy;
        let nodes = vec![
            node("idle", &[("zone", "a")]),
            node("far", &[("zone", "b")]),
            full,
            busy,
            sick,
        ];
        let v = SamplePlacement::place(req, nodes);
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
        let mut good = node("good", &[]);
        good.labels = pairs(&[("tier", "gold"), ("disk", "ssd")]);
        let mut hdd = node("hdd", &[]);
        hdd.labels = pairs(&[("tier", "gold"), ("disk", "hdd")]);
        let v = SamplePlacement::place(req, vec![good, hdd]);
        assert!(v[0].eligible);
        assert_eq!(v[1].reason, "label disk=ssd missing");
    }

    #[test]
    fn preferred_topology_and_bad_settings() {
        let mut req = request(Purpose::Create);
        req.volume.preferred_topology = vec![pairs(&[("zone", "b")])];
        let v = SamplePlacement::place(
            req.clone(),
            vec![node("a", &[("zone", "a")]), node("b", &[("zone", "b")])],
        );
        assert!(v[1].score > v[0].score);
        req.settings = pairs(&[("node-selector", "nonsense")]);
        let v = SamplePlacement::place(req, vec![node("a", &[])]);
        assert!(!v[0].eligible && v[0].reason.starts_with("bad setting"));
    }
}
