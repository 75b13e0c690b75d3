//! The sample placement policy itself, apart from its export, so that a module
//! building on it (a candidate that differs on a few inputs) can include it.

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
