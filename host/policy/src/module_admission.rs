//! `admission.admit` on one module: the call, its answer bounded and
//! checked against the contract before Berth uses it.

use crate::answer::validate_admission;
use crate::{AdmissionRequest, AdmissionVerdict, Decision, PolicyEngine, PolicyError, PolicyModule};

impl PolicyModule {
    /// `admission.admit`: allow, deny with a reason, or allow a new volume
    /// with changes.
    pub async fn admit(
        &self,
        engine: &PolicyEngine,
        request: &AdmissionRequest,
    ) -> Result<AdmissionVerdict, PolicyError> {
        let decision = Decision::Admission;
        let max = self.config().limits.max_answer_bytes;
        let (mut sandbox, func) = self
            .prepare::<(&AdmissionRequest,), (AdmissionVerdict,)>(engine, decision)
            .await?;
        let answer = async {
            let (verdict,) = func.call_async(&mut sandbox.store, (request,)).await?;
            crate::module::within(answer_bytes(&verdict), max)?;
            Ok(verdict)
        }
        .await
        .map_err(|e| self.failed(decision, &e, &sandbox))?;
        validate_admission(&request.call, request.volume.capacity.required_bytes, &answer)
            .map_err(|why| self.invalid(decision, why))?;
        Ok(answer)
    }
}

/// Roughly what an answer weighs: its texts and a little per change.
fn answer_bytes(verdict: &AdmissionVerdict) -> usize {
    use crate::AdmissionChange as Change;
    match verdict {
        AdmissionVerdict::Allow => 0,
        AdmissionVerdict::Deny(why) => why.len(),
        AdmissionVerdict::AllowWith(changes) => changes
            .iter()
            .map(|c| {
                c.reason.len()
                    + 16
                    + match &c.change {
                        Change::Parameter((k, v)) | Change::Label((k, v)) => k.len() + v.len(),
                        Change::Plugin(p) => p.len(),
                        Change::RequisiteTopology(t) => {
                            t.iter().flatten().map(|(k, v)| k.len() + v.len() + 8).sum()
                        }
                        _ => 8,
                    }
            })
            .sum(),
    }
}
