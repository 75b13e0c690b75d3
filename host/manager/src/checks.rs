//! Conformance reports recorded with the server (`berth plugin check
//! --record PLUGIN`): the latest for each configured plugin, kept in the
//! store and shown beside the plugin's health. The server never runs a
//! check itself: a check makes volumes on the driver.

use berth_model::cut;
use berth_store::PluginCheckRecord;

use crate::errors::conflict::Conflict;
use crate::errors::missing::Missing;
use crate::errors::unready::Unready;
use crate::{RequestError, VolumeManager};

/// The most cases a report may hold: `plugin check` has about 80.
const MAX_CASES: usize = 512;
/// Names, rules and driver texts are cut at this many bytes...
const TEXT_MAX: usize = 256;
/// ...and a case's reason (a plugin's message, often) at this many.
const REASON_MAX: usize = 1024;

impl VolumeManager {
    /// Keeps `check` as its plugin's latest report. The plugin must be
    /// configured, and a report of another driver than the one the plugin's
    /// socket answers for is refused; texts are cut to their bounds.
    pub async fn record_plugin_check(
        &self,
        check: PluginCheckRecord,
    ) -> Result<PluginCheckRecord, RequestError> {
        let Some(plugin) = self.config().plugins.iter().find(|p| p.name == check.plugin) else {
            return Err(Missing::Plugin(check.plugin).into());
        };
        let serves = self
            .registry()
            .get(&plugin.name)
            .and_then(|c| c.status().fingerprint.map(|f| f.name.clone()))
            .or_else(|| plugin.driver.clone());
        if let Some(serves) = serves
            && serves != check.driver
        {
            return Err(Conflict::CheckedAnotherDriver {
                plugin: check.plugin,
                checked: check.driver,
                serves,
            }
            .into());
        }
        if check.cases.len() > MAX_CASES {
            return Err(RequestError::Invalid(format!(
                "a check of {} cases: at most {MAX_CASES} are kept",
                check.cases.len()
            )));
        }
        let check = bounded(check);
        self.table
            .store()
            .put_plugin_check(&check)
            .await
            .map_err(|e| Unready::store("recording the plugin check", e))?;
        Ok(check)
    }

    /// Every plugin's latest report, as stored.
    pub fn plugin_checks(&self) -> Result<Vec<PluginCheckRecord>, RequestError> {
        self.table
            .store()
            .load_plugin_checks()
            .map_err(|e| Unready::store("reading the plugin checks", e).into())
    }
}

fn bounded(mut check: PluginCheckRecord) -> PluginCheckRecord {
    check.driver = cut(check.driver, TEXT_MAX);
    check.vendor_version = cut(check.vendor_version, TEXT_MAX);
    for case in &mut check.cases {
        case.name = cut(std::mem::take(&mut case.name), TEXT_MAX);
        case.rule = cut(std::mem::take(&mut case.rule), TEXT_MAX);
        case.reason = cut(std::mem::take(&mut case.reason), REASON_MAX);
    }
    check
}
