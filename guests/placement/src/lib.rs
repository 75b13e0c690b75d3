//! Sample placement policy: topology-, label- and capacity-aware, with reasons.
//!
//! A node is eligible when it is healthy, inside the volume's topology, below
//! its volume limit, and carries every label the volume asks for. Labels are
//! asked for by the `node-selector` setting (`k=v,k2=v2`, for every volume) and
//! by volume labels named `node-selector/<key>`. Among eligible nodes the
//! emptiest scores highest; the volume's first preferred topology adds
//! `preferred-bonus` (default 50).

mod policy;

pub use policy::*;

berth_guest::export_placement!(SamplePlacement);

#[cfg(test)]
mod tests {
    use super::*;
    use berth_guest::testing::{TestNode, candidates, node, pairs, volume};
    use berth_guest::*;

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
