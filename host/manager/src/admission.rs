//! Admission: before Berth accepts a create (a clone and a restore
//! included), publish, expand, modify, snapshot or delete, the module
//! serving the admission decision is asked, with who asks and what the
//! namespace holds. It admits the request, refuses it (PERMISSION_DENIED,
//! with its reason), or admits a new volume with changes to named fields,
//! each with a reason kept in the volume's events and `volume explain`.
//! Without a module, nothing is asked: every request is admitted.
//!
//! Who asks is told by the API for the call it answers ([`asked_by`]);
//! work Berth does of itself, and the socket's user, ask as `management`.
//!
//! Invariants:
//! - A module that fails refuses nothing it was not asked about and admits
//!   nothing it could not judge: with `on_error = "fail"` the request is
//!   refused UNAVAILABLE; with `"builtin"`, admitted as asked.
//! - Changes never touch the namespace, the name, the secret or the source:
//!   the contract has no words for them.

use berth_model::{AccessMode, DecisionNote, Segments, VolumeRecord, VolumeSpec};
use berth_policy::{self as policy, AdmissionCall, AdmissionChange, AdmissionVerdict, FieldChange};

use crate::RequestError;
use crate::decisions::{describe, note};
use crate::shared::Core;

/// Who asks, as the API tells the manager.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Asker {
    /// `management`, `token:<accessor>`, `cert:<subject>`, `docker:<node>`.
    pub identity: String,
    /// The ACL policies it holds.
    pub policies: Vec<String>,
}

impl Asker {
    pub fn management() -> Asker {
        Asker {
            identity: "management".into(),
            policies: Vec::new(),
        }
    }
}

tokio::task_local! {
    static ASKER: Asker;
}

/// Runs `call` (an API call's answer) as asked by `asker`.
pub async fn asked_by<F: std::future::Future>(asker: Asker, call: F) -> F::Output {
    ASKER.scope(asker, call).await
}

fn current() -> Asker {
    ASKER
        .try_with(Clone::clone)
        .unwrap_or_else(|_| Asker::management())
}

/// Why a request was not admitted.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("admission policy {module} refused the request: {reason}")]
    Denied { module: String, reason: String },
    #[error("the admission policy failed, so the request was not admitted: {0}")]
    Failed(#[source] policy::PolicyError),
}

/// What admission said of a request Berth goes on with.
#[derive(Default)]
pub(crate) struct Admitted {
    changes: Vec<FieldChange>,
    note: Option<DecisionNote>,
}

impl Core {
    /// Asks the admission module about `call` on `record` (for a create,
    /// the record as it would be stored), as the current caller.
    pub(crate) async fn ask_admission(
        &self,
        call: AdmissionCall,
        record: &VolumeRecord,
    ) -> Result<Admitted, RequestError> {
        if self.policies.admits_everything() {
            return Ok(Admitted::default());
        }
        let asker = current();
        let s = &record.spec;
        let usage = crate::table::held(&self.table, &s.namespace);
        let request = policy::AdmissionRequest {
            call,
            caller: policy::AdmissionCaller {
                identity: asker.identity,
                policies: asker.policies,
            },
            namespace: s.namespace.to_string(),
            plugin: s.plugin.clone(),
            volume: crate::decisions::policy_volume(record),
            secret: s.secret.clone(),
            usage: policy::AdmissionUsage {
                volumes: usage.volumes,
                bytes: usage.bytes,
                snapshots: usage.snapshots,
            },
            settings: Vec::new(),
        };
        let (verdict, logged) = self.policies.admit_logged(request).await;
        let kept = note(&logged, describe(&logged.answer));
        let module = logged.module.clone();
        self.log_decision(logged);
        let counted = match &verdict {
            Ok(AdmissionVerdict::Allow) => "allow",
            Ok(AdmissionVerdict::Deny(_)) => "deny",
            Ok(AdmissionVerdict::AllowWith(_)) => "allow_with",
            Err(_) => "failed",
        };
        berth_metrics::admission(&module, counted);
        match verdict.map_err(Refused::Failed)? {
            AdmissionVerdict::Allow => Ok(Admitted {
                changes: Vec::new(),
                note: Some(kept),
            }),
            AdmissionVerdict::Deny(reason) => Err(Refused::Denied { module, reason }.into()),
            AdmissionVerdict::AllowWith(changes) => Ok(Admitted {
                changes,
                note: Some(kept),
            }),
        }
    }
}

impl Admitted {
    pub(crate) fn changes_anything(&self) -> bool {
        !self.changes.is_empty()
    }

    /// Applies the changes to a new volume's spec, in order.
    pub(crate) fn apply(&self, spec: &mut VolumeSpec) {
        let set = |map: &mut Segments, (k, v): &(String, String)| {
            map.insert(k.clone(), v.clone());
        };
        for c in &self.changes {
            match &c.change {
                AdmissionChange::Parameter(kv) => set(&mut spec.parameters, kv),
                AdmissionChange::Label(kv) => set(&mut spec.labels, kv),
                AdmissionChange::RequiredBytes(b) => {
                    spec.required_bytes = i64::try_from(*b).unwrap_or(i64::MAX)
                }
                AdmissionChange::LimitBytes(b) => spec.limit_bytes = i64::try_from(*b).unwrap_or(i64::MAX),
                AdmissionChange::Plugin(p) => spec.plugin = p.clone(),
                AdmissionChange::AccessMode(m) => spec.access_mode = access_mode(*m),
                AdmissionChange::RequisiteTopology(t) => {
                    spec.requisite_topology = t
                        .iter()
                        .map(|pairs| {
                            let mut s = Segments::default();
                            for (k, v) in pairs {
                                s.insert(k.clone(), v.clone());
                            }
                            s
                        })
                        .collect();
                }
            }
        }
    }

    /// Keeps the decision with the volume: `volume explain` shows it, and
    /// each change is an event with its reason.
    pub(crate) fn keep(&self, core: &Core, record: &mut VolumeRecord) {
        let Some(kept) = &self.note else {
            return;
        };
        record.explain_mut().admission = Some(Box::new(kept.clone()));
        for c in &self.changes {
            let what = format!(
                "{} ({})",
                policy::cases::admission::change_text(&c.change),
                c.reason
            );
            core.event("admission".into(), "OK", what)(record);
        }
    }
}

fn access_mode(m: policy::AccessMode) -> AccessMode {
    use policy::AccessMode as W;
    match m {
        W::SingleNodeWriter => AccessMode::SingleNodeWriter,
        W::SingleNodeReaderOnly => AccessMode::SingleNodeReaderOnly,
        W::MultiNodeReaderOnly => AccessMode::MultiNodeReaderOnly,
        W::MultiNodeSingleWriter => AccessMode::MultiNodeSingleWriter,
        W::MultiNodeMultiWriter => AccessMode::MultiNodeMultiWriter,
        W::SingleNodeSingleWriter => AccessMode::SingleNodeSingleWriter,
        W::SingleNodeMultiWriter => AccessMode::SingleNodeMultiWriter,
    }
}
