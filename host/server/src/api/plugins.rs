//! The API's answers about plugins: each one's health and latest recorded
//! conformance report, reports recorded, and the volumes a plugin holds
//! that Berth does not know.

use berth_proto::berth::v1 as api;
use berth_store::{CaseVerdict, CheckCaseRecord, PluginCheckRecord};
use tonic::{Request, Response, Status};

use super::BerthApi;
use super::codes::status;
use super::fleet::health;
use crate::acl::Caller;
use crate::csi::registry::Health;
use crate::manager::RequestError;

impl BerthApi {
    /// Each configured plugin: its controller's health, its nodes', and
    /// the latest check recorded for it.
    pub(super) async fn answer_plugin_status(
        &self,
        _: Request<api::PluginStatusRequest>,
    ) -> Result<Response<api::PluginStatusResponse>, Status> {
        let m = &self.manager;
        let mut checks = m.plugin_checks().map_err(status)?;
        let plugins = m
            .config()
            .plugins
            .iter()
            .map(|p| {
                let controller = m.registry().get(&p.name).map(|c| c.status());
                let (h, reason) = match (&p.controller, &controller) {
                    (None, _) => ("none", String::new()),
                    (Some(_), Some(s)) => health(&s.health),
                    (Some(_), None) => ("unknown", String::new()),
                };
                let nodes = m.fleet().node_views(Some(&p.name));
                let healthy = nodes.iter().filter(|n| n.health == Health::Healthy).count();
                let last_check = checks
                    .iter()
                    .position(|c| c.plugin == p.name)
                    .map(|i| check_to_api(checks.swap_remove(i)));
                api::PluginStatus {
                    name: p.name.clone(),
                    driver: controller
                        .as_ref()
                        .and_then(|s| s.fingerprint.as_ref().map(|f| f.name.clone()))
                        .or_else(|| p.driver.clone())
                        .unwrap_or_default(),
                    controller_health: h.into(),
                    controller_reason: reason,
                    nodes_healthy: healthy as u32,
                    nodes_expected: nodes.len() as u32,
                    capabilities: controller
                        .and_then(|s| s.fingerprint)
                        .and_then(|f| f.controller.as_ref().map(|c| c.capabilities.clone()))
                        .unwrap_or_default(),
                    last_check,
                }
            })
            .collect();
        Ok(Response::new(api::PluginStatusResponse { plugins }))
    }

    /// Keeps a conformance report as its plugin's latest, with who sent it
    /// and when (the server's clock).
    pub(super) async fn answer_record_plugin_check(
        &self,
        req: Request<api::RecordPluginCheckRequest>,
    ) -> Result<Response<api::PluginCheck>, Status> {
        let recorded_by = req
            .extensions()
            .get::<Caller>()
            .map_or_else(|| Caller::Management.identity(), Caller::identity);
        let Some(check) = req.into_inner().check else {
            return Err(status(RequestError::Invalid(
                "check: the report is missing".into(),
            )));
        };
        let record = check_from_api(check, recorded_by).map_err(status)?;
        let kept = self.manager.record_plugin_check(record).await.map_err(status)?;
        tracing::info!(plugin = %kept.plugin, by = %kept.recorded_by, failed = kept.count(CaseVerdict::Failed), "plugin check recorded");
        Ok(Response::new(check_to_api(kept)))
    }

    pub(super) async fn answer_plugin_orphans(
        &self,
        req: Request<api::PluginOrphansRequest>,
    ) -> Result<Response<api::PluginOrphansResponse>, Status> {
        let o = self
            .manager
            .requests()
            .orphans(&req.into_inner().plugin)
            .await
            .map_err(status)?;
        Ok(Response::new(super::convert::views::orphans_to_api(o)))
    }
}

fn check_from_api(check: api::PluginCheck, recorded_by: String) -> Result<PluginCheckRecord, RequestError> {
    let cases = check
        .cases
        .into_iter()
        .map(|c| {
            let verdict = CaseVerdict::parse(&c.verdict).ok_or_else(|| {
                RequestError::Invalid(format!(
                    "check: case {}: verdict {} is none of passed, failed, warning, skipped",
                    crate::model::text::echo(&c.name),
                    crate::model::text::echo(&c.verdict)
                ))
            })?;
            Ok(CheckCaseRecord {
                name: c.name,
                rule: c.rule,
                verdict,
                reason: c.reason,
                must: c.must,
            })
        })
        .collect::<Result<Vec<_>, RequestError>>()?;
    Ok(PluginCheckRecord {
        plugin: check.plugin,
        driver: check.driver,
        vendor_version: check.vendor_version,
        recorded_ms: crate::model::clock::now_ms(),
        recorded_by,
        cases,
    })
}

fn check_to_api(c: PluginCheckRecord) -> api::PluginCheck {
    let count = |v| c.count(v) as u32;
    api::PluginCheck {
        passed: count(CaseVerdict::Passed),
        failed: count(CaseVerdict::Failed),
        warnings: count(CaseVerdict::Warning),
        skipped: count(CaseVerdict::Skipped),
        plugin: c.plugin,
        driver: c.driver,
        vendor_version: c.vendor_version,
        recorded_ms: c.recorded_ms,
        recorded_by: c.recorded_by,
        cases: c
            .cases
            .into_iter()
            .map(|k| api::PluginCheckCase {
                name: k.name,
                rule: k.rule,
                verdict: k.verdict.as_str().into(),
                reason: k.reason,
                must: k.must,
            })
            .collect(),
    }
}
