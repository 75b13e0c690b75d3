//! A candidate policy, as an operator would write the next version of the
//! samples: it decides exactly as they do (it includes their code), except
//!
//! - naming: a volume labelled `tier=gold` is named `gold-<the sample's name>`;
//! - placement: a volume labelled `tier=gold` is refused on nodes in `zone=b`;
//! - retry: RESOURCE_EXHAUSTED is given up on instead of retried;
//! - and it traps naming a volume labelled `candidate=trap`, as a module with
//!   a bug that only some inputs reach.
//!
//! The replay and shadow tests count on these differences and no others.

use berth_guest::{
    Candidates, Code, Decision, Failure, Naming, NamingRequest, Placement, PlacementRequest, Retry, Verdicts,
    get,
};

#[path = "../../../../guests/naming/src/policy.rs"]
mod naming;
#[path = "../../../../guests/placement/src/policy.rs"]
mod placement;
#[path = "../../../../guests/retry/src/policy.rs"]
mod retry;

pub struct Candidate;

fn gold(labels: &berth_guest::Pairs) -> bool {
    get(labels, "tier") == Some("gold")
}

impl Naming for Candidate {
    fn volume_name(request: NamingRequest) -> Result<String, String> {
        if get(&request.volume.labels, "candidate") == Some("trap") {
            panic!("the candidate's bug: a volume labelled candidate=trap");
        }
        let is_gold = gold(&request.volume.labels);
        let name = naming::SampleNaming::volume_name(request)?;
        Ok(if is_gold { format!("gold-{name}") } else { name })
    }
}

impl Placement for Candidate {
    fn place(request: PlacementRequest, candidates: Candidates) -> Verdicts {
        let is_gold = gold(&request.volume.labels);
        let mut verdicts = placement::SamplePlacement::place(request, candidates.clone());
        if is_gold {
            for i in 0..candidates.len() {
                if verdicts.refusals[i] == 0 && candidates.topology_of(i).get("zone") == Some("b") {
                    verdicts.reasons.push("gold volumes stay out of zone b".into());
                    verdicts.refusals[i] = verdicts.reasons.len() as u32;
                }
            }
        }
        verdicts
    }
}

impl Retry for Candidate {
    fn classify(failure: Failure) -> Decision {
        if failure.code == Code::ResourceExhausted {
            return Decision::GiveUp(format!(
                "no retry when the plugin is out of room: {}",
                failure.message
            ));
        }
        retry::SampleRetry::classify(failure)
    }
}

berth_guest::export_naming!(Candidate);
berth_guest::export_placement!(Candidate);
berth_guest::export_retry!(Candidate);
