//! Placement: a node may take a volume when its plugin is healthy, it is in
//! the volume's topology and below its volume limit; the emptiest first.

use berth_guest::{
    Candidates, Health, Placement, PlacementRequest, Purpose, Verdicts, VerdictsBuilder, reachable,
};

impl Placement for super::Policy {
    fn place(request: PlacementRequest, candidates: Candidates) -> Verdicts {
        let mut v = VerdictsBuilder::new(candidates.len());
        let required = match request.purpose {
            Purpose::Create => &request.volume.requisite_topology,
            Purpose::Publish => &request.accessible_topology,
        };
        // Judged once per distinct topology, not once per node.
        let outside: Vec<Option<_>> = candidates
            .topologies()
            .map(|t| (!reachable(&t, required)).then(|| v.reason(format!("topology {t} is outside the volume's"))))
            .collect();
        for i in 0..candidates.len() {
            if candidates.health_of(i) != Health::Healthy {
                v.refuse(i, "node plugin is not healthy");
                continue;
            }
            if let Some(reason) = outside[candidates.topology[i] as usize] {
                v.refuse_for(i, reason);
                continue;
            }
            let published = candidates.published_volumes[i];
            match candidates.max_volumes_of(i) {
                Some(max) if published >= max => v.refuse(i, "full"),
                // Emptiest first: the free share of the limit, or fewer volumes.
                Some(max) => v.score(i, ((max - published) * 100 / max) as i32),
                None => v.score(i, 100 - published.min(100) as i32),
            }
        }
        v.finish()
    }
}

#[cfg(test)]
mod tests {
    use berth_guest::testing::{TestNode, candidates, node, pairs, volume};
    use berth_guest::{Placement, PlacementRequest, Purpose};

    use crate::Policy;

    #[test]
    fn refuses_other_zones_and_prefers_the_emptiest() {
        let mut v = volume("data");
        v.requisite_topology = vec![pairs(&[("zone", "a")])];
        let request = PlacementRequest {
            volume: v,
            purpose: Purpose::Create,
            accessible_topology: vec![],
            settings: vec![],
        };
        let busy = TestNode {
            max_volumes: Some(10),
            published_volumes: 8,
            ..node("busy", &[("zone", "a")])
        };
        let nodes = [busy, node("idle", &[("zone", "a")]), node("far", &[("zone", "b")])];
        let verdicts = Policy::place(request, candidates(&nodes));
        assert!(verdicts.scores[1] > verdicts.scores[0]);
        assert!(verdicts.reason(2).unwrap().contains("outside"));
    }
}
