//! `[policy_guard]`: when Berth rolls a promotion back by itself.

use std::time::Duration;

use serde::Deserialize;

use crate::{ConfigError, duration, invalid};

/// After a promotion, the promoted modules are watched for `window`: once
/// they made `min_decisions`, a share of failures (traps, deadlines, broken
/// contracts) above `failure_share` rolls the set back to the version before.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyGuard {
    /// 0 turns the guard off.
    pub failure_share: f64,
    pub window: Duration,
    pub min_decisions: u64,
}

impl Default for PolicyGuard {
    fn default() -> Self {
        PolicyGuard {
            failure_share: 0.2,
            window: Duration::from_secs(600),
            min_decisions: 10,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawGuard {
    failure_share: Option<f64>,
    window: Option<String>,
    min_decisions: Option<u64>,
}

pub(crate) fn guard(raw: Option<RawGuard>) -> Result<PolicyGuard, ConfigError> {
    let defaults = PolicyGuard::default();
    let Some(raw) = raw else {
        return Ok(defaults);
    };
    let failure_share = raw.failure_share.unwrap_or(defaults.failure_share);
    if !(0.0..=1.0).contains(&failure_share) {
        return Err(invalid(
            "policy_guard.failure_share",
            format!("{failure_share} is not between 0 and 1"),
        ));
    }
    let window = duration("policy_guard.window", raw.window.as_deref(), "10m")?;
    if window.is_zero() {
        return Err(invalid("policy_guard.window", "must be more than zero"));
    }
    Ok(PolicyGuard {
        failure_share,
        window,
        min_decisions: raw.min_decisions.unwrap_or(defaults.min_decisions).max(1),
    })
}
