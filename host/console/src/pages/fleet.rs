//! The nodes and the plugins: health, fingerprints, load, and draining.

use std::fmt::Write;

use berth_proto::berth::v1 as wire;

use super::when;
use crate::api::CallError;
use crate::html::{csrf_field, esc, page, query, refusal};
use crate::session::Session;

/// `zone=a,rack=1`
fn topology(t: Option<&wire::Topology>) -> String {
    let mut pairs: Vec<String> = t
        .map(|t| t.segments.iter().map(|(k, v)| format!("{k}={v}")).collect())
        .unwrap_or_default();
    pairs.sort();
    pairs.join(",")
}

/// Every node: its state, when it was last heard from, each plugin's
/// fingerprint (node id, health, topology, load), its volumes, and a drain
/// (or its undoing) when the token may write nodes (`may` holds `node:write`).
pub fn nodes(
    s: &Session,
    nodes: Result<&[wire::Node], &CallError>,
    may: &[String],
    refused: Option<&str>,
) -> String {
    let mut body = String::from("<h1>Nodes</h1>");
    if let Some(text) = refused {
        body.push_str(&refusal(text));
    }
    let nodes = match nodes {
        Ok(nodes) => nodes,
        Err(e) => {
            body.push_str(&refusal(&e.to_string()));
            return page("Nodes", Some(s), &body);
        }
    };
    let drains = may.iter().any(|m| m == "node:write");
    body.push_str(
        "<table class=\"nodes\"><thead><tr><th>Node</th><th>State</th><th>Last seen</th>\
         <th>Plugins</th><th>Volumes</th><th>Placement</th></tr></thead><tbody>",
    );
    for n in nodes {
        let mut plugins = String::from("<ul class=\"fingerprints\">");
        for p in &n.plugins {
            let load = match p.max_volumes {
                0 => format!("{} volumes", p.published_volumes),
                max => format!("{} of {max} volumes", p.published_volumes),
            };
            let health = match p.reason.is_empty() {
                true => p.health.clone(),
                false => format!("{}: {}", p.health, p.reason),
            };
            let _ = write!(
                plugins,
                "<li><b>{}</b> as {} · <span class=\"state\">{}</span> · {} · <span class=\"topology\">{}</span></li>",
                esc(&p.plugin),
                esc(&p.node_id),
                esc(&health),
                esc(&load),
                esc(&topology(p.topology.as_ref()))
            );
        }
        plugins.push_str("</ul>");
        let placement = match (n.draining, drains) {
            (true, false) => "draining".to_string(),
            (false, false) => "in".to_string(),
            (draining, true) => format!(
                "<form method=\"post\" action=\"/node/drain?name={}\" class=\"action\"{}>{}{}\
                 <button type=\"submit\" class=\"drain\">{}</button></form>",
                esc(&query(&n.name)),
                match draining {
                    true => String::new(),
                    false => format!(
                        " data-confirm=\"Drain {}? Everything published on it is unpublished.\"",
                        esc(&n.name)
                    ),
                },
                csrf_field(&s.csrf),
                if draining {
                    "<input type=\"hidden\" name=\"undo\" value=\"1\">draining "
                } else {
                    "in "
                },
                if draining { "Undrain" } else { "Drain" }
            ),
        };
        let _ = write!(
            body,
            "<tr><td>{}</td><td class=\"state\">{}</td><td>{}</td><td>{plugins}</td>\
             <td><a href=\"/?ns=*&amp;node={}\">volumes</a></td><td>{placement}</td></tr>",
            esc(&n.name),
            esc(&n.state),
            esc(&when(n.last_seen_unix_ms)),
            esc(&query(&n.name)),
        );
    }
    body.push_str("</tbody></table>");
    if drains {
        body.push_str(
            "<p class=\"hint\">Drain keeps placement away from a node and unpublishes everything on it; \
             undrain takes it back.</p>",
        );
    }
    page("Nodes", Some(s), &body)
}

pub fn plugins(s: &Session, plugins: Result<&[wire::PluginStatus], &CallError>) -> String {
    let mut body = String::from("<h1>Plugins</h1>");
    match plugins {
        Err(e) => {
            body.push_str(&refusal(&e.to_string()));
        }
        Ok(plugins) => {
            body.push_str(
                "<table class=\"plugins\"><thead><tr><th>Plugin</th><th>Driver</th><th>Controller</th>\
                 <th>Nodes healthy</th><th>Capabilities</th><th>Last check</th></tr></thead><tbody>",
            );
            for p in plugins {
                let controller = match p.controller_reason.is_empty() {
                    true => p.controller_health.clone(),
                    false => format!("{}: {}", p.controller_health, p.controller_reason),
                };
                let _ = write!(
                    body,
                    "<tr><td>{}</td><td>{}</td><td class=\"state\">{}</td><td>{} of {}</td><td>{}</td><td class=\"check\">{}</td></tr>",
                    esc(&p.name),
                    esc(&p.driver),
                    esc(&controller),
                    p.nodes_healthy,
                    p.nodes_expected,
                    esc(&p.capabilities.join(", ")),
                    p.last_check
                        .as_ref()
                        .map_or_else(|| "none recorded".into(), check_summary)
                );
            }
            body.push_str("</tbody></table>");
            for check in plugins.iter().filter_map(|p| p.last_check.as_ref()) {
                body.push_str(&check_cases(check));
            }
            body.push_str(
                "<p class=\"hint\">A conformance run against a driver is <code>berth plugin check</code>, \
                 from a machine that can reach its socket; with <code>--record PLUGIN</code> its report is \
                 kept here as the plugin's latest.</p>",
            );
        }
    }
    page("Plugins", Some(s), &body)
}

/// When, by whom, and the counts: the plugins table's cell (escaped).
fn check_summary(c: &wire::PluginCheck) -> String {
    let verdict = match c.failed {
        0 => "<span class=\"ok\">passed</span>".to_string(),
        n => format!("<span class=\"bad\">{n} failed</span>"),
    };
    format!(
        "{verdict}: {} passed, {} skipped, {} warnings<br>{} {} at {} by {}",
        c.passed,
        c.skipped,
        c.warnings,
        esc(&c.driver),
        esc(&c.vendor_version),
        esc(&when(c.recorded_ms)),
        esc(&c.recorded_by)
    )
}

/// A recorded check's failed and warned cases, each with its rule and why.
fn check_cases(c: &wire::PluginCheck) -> String {
    let notable: Vec<&wire::PluginCheckCase> = c
        .cases
        .iter()
        .filter(|k| k.verdict == "failed" || k.verdict == "warning")
        .collect();
    if notable.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "<h2>{}: cases not passed in the last check</h2><table class=\"cases\"><thead><tr>\
         <th>Verdict</th><th>Case</th><th>Rule</th><th>Why</th></tr></thead><tbody>",
        esc(&c.plugin)
    );
    for k in notable {
        let _ = write!(
            out,
            "<tr><td class=\"state\">{}{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&k.verdict),
            if k.must && k.verdict == "failed" {
                " (a MUST)"
            } else {
                ""
            },
            esc(&k.name),
            esc(&k.rule),
            esc(&k.reason)
        );
    }
    out.push_str("</tbody></table>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(verdict: &str, reason: &str) -> wire::PluginCheckCase {
        wire::PluginCheckCase {
            name: "DeleteVolume of an unknown id".into(),
            rule: "succeeds".into(),
            verdict: verdict.into(),
            reason: reason.into(),
            must: true,
        }
    }

    #[test]
    fn a_checks_failed_and_warned_cases_are_listed_escaped_and_its_passes_are_not() {
        let check = wire::PluginCheck {
            plugin: "fast".into(),
            failed: 1,
            cases: vec![
                case("passed", ""),
                case("failed", "NOT_FOUND: <script>alert(1)</script>"),
                case("warning", "OK with an abnormal condition"),
            ],
            ..Default::default()
        };
        let table = check_cases(&check);
        assert_eq!(table.matches("<tr><td class=\"state\">").count(), 2, "{table}");
        assert!(table.contains("failed (a MUST)"), "{table}");
        assert!(
            table.contains("&lt;script&gt;") && !table.contains("<script>"),
            "{table}"
        );
        assert!(check_summary(&check).contains("1 failed"));
        let clean = wire::PluginCheck {
            cases: vec![case("passed", "")],
            ..check
        };
        assert_eq!(check_cases(&clean), "", "nothing to list when every case passed");
    }
}
