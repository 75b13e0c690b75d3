//! Promotion and rollback of the cluster's policy set, each a new version
//! every server loads (a failover keeps it), and the guard that rolls a
//! promotion back by itself when the promoted modules start failing.

use std::sync::Arc;
use std::time::Duration;

use super::Reloader;
use crate::api::{ReloadError, SetInService};
use crate::config::policy_set::{Mode, SetDraft};
use crate::policy::Decision;

/// How often the guard looks at the promoted modules' counters.
const GUARD_EVERY: Duration = Duration::from_secs(1);

fn refused(why: impl Into<String>) -> ReloadError {
    ReloadError::Rollout(why.into())
}

impl Reloader {
    /// Makes the module shadowing `decision` (every shadowed decision when
    /// `None`) live in its place, as the set's next version; the module it
    /// replaces no longer serves the decision.
    pub async fn promote(&self, decision: Option<Decision>) -> Result<SetInService, ReloadError> {
        let current = self.set.lock().await.clone();
        let Some(current) = current else {
            return Err(refused("no policy set is stored; nothing shadows a decision"));
        };
        let mut draft = SetDraft::parse(&current.text, std::path::Path::new("/"))?;
        let policies = draft.policies()?;
        let shadowed: Vec<Decision> = policies
            .iter()
            .filter(|p| p.shadow)
            .flat_map(|p| p.decisions.clone())
            .filter(|d| decision.is_none_or(|wanted| wanted == *d))
            .collect();
        if shadowed.is_empty() {
            return Err(refused(match decision {
                Some(d) => format!("no module shadows {d} in policy set version {}", current.version),
                None => format!(
                    "no module shadows a decision in policy set version {}",
                    current.version
                ),
            }));
        }
        // A live module serving every decision it exports names them now, so
        // that the promoted ones can be taken from it.
        let serving = |i: usize| -> Vec<Decision> {
            Decision::ALL
                .into_iter()
                .filter(|d| {
                    self.policies
                        .module(*d)
                        .is_some_and(|m| m.name() == policies[i].module.name)
                })
                .collect()
        };
        let mut kept = Vec::new();
        for (i, table) in draft.tables.iter().enumerate() {
            let mut table = table.clone();
            let p = &policies[i];
            if p.shadow {
                let stays: Vec<Decision> = p
                    .decisions
                    .iter()
                    .copied()
                    .filter(|d| !shadowed.contains(d))
                    .collect();
                if stays.is_empty() {
                    table.mode = Mode::Live;
                    kept.push(table);
                } else {
                    // Shadowing decisions not promoted: the table splits.
                    let mut live = table.clone();
                    live.mode = Mode::Live;
                    live.set_decisions(&shadowed_of(&p.decisions, &shadowed));
                    table.set_decisions(&stays);
                    kept.push(live);
                    kept.push(table);
                }
                continue;
            }
            let serves = if p.decisions.is_empty() {
                serving(i)
            } else {
                p.decisions.clone()
            };
            let stays: Vec<Decision> = serves.iter().copied().filter(|d| !shadowed.contains(d)).collect();
            if stays.len() == serves.len() {
                kept.push(table);
            } else if !stays.is_empty() {
                table.set_decisions(&stays);
                kept.push(table);
            }
        }
        draft.tables = kept;
        let names: Vec<String> = shadowed.iter().map(ToString::to_string).collect();
        let version = current.version;
        self.store_version(
            draft.text(),
            format!("promote {} (from version {version})", names.join(", ")),
            names,
            |now| match now {
                Some(now) if now.version == version => Ok(()),
                _ => Err(refused("the policy set changed while promoting; promote again")),
            },
        )
        .await
    }

    /// Returns to an earlier version of the set (the one before when `to` is
    /// `None`), stored as the next version.
    pub async fn rollback(&self, to: Option<u64>, reason: &str) -> Result<SetInService, ReloadError> {
        let current = self.set.lock().await.clone();
        let Some(current) = current else {
            return Err(refused("no policy set is stored; there is nothing to roll back"));
        };
        let target = match to {
            None => current.history.last(),
            Some(v) => current.history.iter().find(|p| p.version == v),
        };
        let Some(target) = target.cloned() else {
            let kept: Vec<String> = current.history.iter().map(|p| p.version.to_string()).collect();
            return Err(refused(format!(
                "version {} is not kept (kept: {})",
                to.map_or("before".into(), |v| v.to_string()),
                if kept.is_empty() {
                    "none".into()
                } else {
                    kept.join(", ")
                }
            )));
        };
        let version = current.version;
        let out = self
            .store_version(
                target.text.clone(),
                format!("rollback to version {} ({reason})", target.version),
                Vec::new(),
                |now| match now {
                    Some(now) if now.version == version => Ok(()),
                    _ => Err(refused(
                        "the policy set changed while rolling back; roll back again",
                    )),
                },
            )
            .await?;
        crate::metrics::rollback(if reason.starts_with("guard:") {
            "guard"
        } else {
            "operator"
        });
        Ok(out)
    }

    /// Watches promotions for as long as this server leads: a promoted
    /// module failing more than the configured share of its decisions within
    /// the window rolls the set back, and says so (log, metric, the set's change).
    pub(super) fn guard(self: Arc<Self>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let guard = self.config.policy_guard.clone();
            if guard.failure_share <= 0.0 {
                return;
            }
            let mut tick = tokio::time::interval(GUARD_EVERY);
            loop {
                tick.tick().await;
                let Some(set) = self.set.lock().await.clone() else {
                    continue;
                };
                let age = crate::model::clock::now_ms().saturating_sub(set.applied_ms);
                if set.promoted.is_empty() || age > guard.window.as_millis() as u64 {
                    continue;
                }
                let failing = set.promoted.iter().find_map(|d| {
                    let module = self.policies.module(d.parse().ok()?)?;
                    // Distinct inputs, not calls: the retries of one input
                    // that fails are one failure.
                    let calls = module.counters.inputs.count();
                    let failures = module.counters.failing_inputs.count();
                    (calls >= guard.min_decisions && failures as f64 > guard.failure_share * calls as f64)
                        .then(|| {
                            format!(
                                "guard: {} failed on {failures} of {calls} distinct inputs after its promotion",
                                module.name()
                            )
                        })
                });
                let Some(why) = failing else {
                    continue;
                };
                tracing::error!(version = set.version, reason = %why, "rolling the promotion back");
                if let Err(e) = self.rollback(None, &why).await {
                    tracing::error!(error = %e, "the guard could not roll back");
                }
            }
        })
    }
}

fn shadowed_of(decisions: &[Decision], shadowed: &[Decision]) -> Vec<Decision> {
    decisions
        .iter()
        .copied()
        .filter(|d| shadowed.contains(d))
        .collect()
}
