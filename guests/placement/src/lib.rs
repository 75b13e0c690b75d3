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
    Candidates, Health, Pairs, Placement, PlacementRequest, Purpose, Reason, Verdicts, VerdictsBuilder, get,
    number_setting, parse_pairs,
};

pub struct SamplePlacement;

const SELECTOR_LABEL: &str = "node-selector/";

fn show(out: &mut String, pairs: &Pairs) {
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{k}={v}");
    }
}

/// Builds a reason only the first time a node needs it.
struct Lazy(Option<Reason>);

impl Lazy {
    fn get(&mut self, v: &mut VerdictsBuilder, text: impl FnOnce() -> String) -> Reason {
        *self.0.get_or_insert_with(|| v.reason(text()))
    }
}

impl Placement for SamplePlacement {
    fn place(request: PlacementRequest, candidates: Candidates) -> Verdicts {
        let n = candidates.len();
        let mut v = VerdictsBuilder::new(n);
        let settings = &request.settings;
        let selector = parse_pairs(get(settings, "node-selector").unwrap_or(""));
        let bonus = number_setting(settings, "preferred-bonus", 50);
        let (mut selector, bonus) = match (selector, bonus) {
            (Ok(s), Ok(b)) => (s, b.min(1000) as i32),
            (Err(e), _) | (_, Err(e)) => {
                let bad = v.reason(format!("bad setting: {e}"));
                (0..n).for_each(|i| v.refuse_for(i, bad));
                return v.finish();
            }
        };
        for (k, val) in &request.volume.labels {
            if let Some(key) = k.strip_prefix(SELECTOR_LABEL) {
                selector.push((key.to_string(), val.clone()));
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
        // Judged once per distinct topology: in the preferred one, and the
        // reason when the volume cannot be reached from it.
        let reach = candidates.reaching(required);
        let prefer = preferred.map(|p| candidates.satisfying(p));
        let topology: Vec<(bool, Option<Reason>)> = candidates
            .topologies()
            .enumerate()
            .map(|(i, t)| {
                let outside = (!reach[i]).then(|| v.reason(format!("topology {t} is outside {wanted}")));
                (prefer.as_ref().is_some_and(|p| p[i]), outside)
            })
            .collect();
        // Judged once per distinct label set: the first selector label it lacks.
        let missing_label: Vec<Option<Reason>> = candidates
            .label_sets()
            .map(|labels| {
                let (k, val) = selector
                    .iter()
                    .find(|(k, val)| labels.get(k) != Some(val.as_str()))?;
                Some(v.reason(format!("label {k}={val} missing")))
            })
            .collect();
        let (mut unhealthy, mut unknown) = (Lazy(None), Lazy(None));
        let mut full = String::new();
        for i in 0..n {
            match candidates.health_of(i) {
                Health::Healthy => {}
                Health::Unhealthy => {
                    let r = unhealthy.get(&mut v, || "node plugin is unhealthy".into());
                    v.refuse_for(i, r);
                    continue;
                }
                Health::Unknown => {
                    let r = unknown.get(&mut v, || "node plugin health is unknown".into());
                    v.refuse_for(i, r);
                    continue;
                }
            }
            let (prefer, outside) = topology[candidates.topology[i] as usize];
            if let Some(r) = outside {
                v.refuse_for(i, r);
                continue;
            }
            let published = candidates.published_volumes[i];
            let max = candidates.max_volumes_of(i);
            if let Some(max) = max
                && published >= max
            {
                full.clear();
                let _ = write!(full, "full: {published} of {max} volumes");
                v.refuse(i, &full);
                continue;
            }
            if let Some(r) = missing_label[candidates.labels[i] as usize] {
                v.refuse_for(i, r);
                continue;
            }
            // Emptiest first: free share of the limit, or fewer volumes when unlimited.
            let score = match max {
                Some(max) => ((max - published) * 100 / max) as i32,
                None => 100 - published.min(100) as i32,
            };
            v.score(i, if prefer { score + bonus } else { score });
        }
        v.finish()
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
        assert_eq!((v.refusals.len(), v.scores.len()), (5, 5));
        assert!(v.is_eligible(0) && v.is_eligible(3));
        assert!(v.scores[0] > v.scores[3], "emptiest first");
        assert!(
            v.reason(1).unwrap().contains("outside zone=a"),
            "{:?}",
            v.reason(1)
        );
        assert_eq!(v.reason(2), Some("full: 2 of 2 volumes"));
        assert!(v.reason(4).unwrap().contains("unhealthy"));
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
        assert!(v.is_eligible(0));
        assert_eq!(v.reason(1), Some("label disk=ssd missing"));
    }

    #[test]
    fn preferred_topology_and_bad_settings() {
        let mut req = request(Purpose::Create);
        req.volume.preferred_topology = vec![pairs(&[("zone", "b")])];
        let nodes = [node("a", &[("zone", "a")]), node("b", &[("zone", "b")])];
        let v = SamplePlacement::place(req.clone(), candidates(&nodes));
        assert!(v.scores[1] > v.scores[0]);
        req.settings = pairs(&[("node-selector", "nonsense")]);
        let v = SamplePlacement::place(req, candidates(&[node("a", &[])]));
        assert!(v.reason(0).unwrap().starts_with("bad setting"));
    }
}
