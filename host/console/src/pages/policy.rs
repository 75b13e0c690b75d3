//! The policy set: its version and how it came to be, every module with
//! its digest and counters, the servers running it, the shadows' diff,
//! and the versions kept, each one a rollback away.

use std::fmt::Write;

use berth_proto::berth::v1 as wire;
use serde_json::Value;

use super::when;
use crate::api::CallError;
use crate::html::{csrf_field, esc, page, refusal};
use crate::session::Session;

/// Latest shadow differences shown.
const DIFFS: usize = 10;

/// The policy page.
pub struct PolicyPage<'a> {
    pub session: &'a Session,
    pub set: Result<&'a wire::PolicySet, &'a CallError>,
    pub diff: Option<&'a wire::PolicyDiffResponse>,
    /// Whether the token may roll the set back (`policy:write`).
    pub may_roll_back: bool,
    pub refusal: Option<&'a str>,
}

pub fn policy(p: &PolicyPage<'_>) -> String {
    let mut body = String::from("<h1>Policy set</h1>");
    if let Some(text) = p.refusal {
        body.push_str(&refusal(text));
    }
    let set = match p.set {
        Ok(set) => set,
        Err(e) => {
            body.push_str(&refusal(&e.to_string()));
            return page("Policy", Some(p.session), &body);
        }
    };
    if set.version == 0 {
        body.push_str("<p class=\"empty\">No policy set: the built-in policies decide.</p>");
        return page("Policy", Some(p.session), &body);
    }
    let _ = write!(
        body,
        "<dl class=\"facts\"><dt>version</dt><dd class=\"version\">{}</dd><dt>change</dt><dd>{}</dd>\
         <dt>applied</dt><dd>{} by {}</dd>",
        set.version,
        esc(&set.change),
        esc(&when(set.applied_ms)),
        esc(&set.applied_by)
    );
    if !set.promoted.is_empty() {
        let _ = write!(
            body,
            "<dt>promoted, watched by the guard</dt><dd>{}</dd>",
            esc(&set.promoted.join(", "))
        );
    }
    body.push_str("</dl><h2>Modules</h2>");
    body.push_str(
        "<table class=\"modules\"><thead><tr><th>Module</th><th>Decisions</th><th>Digest</th>\
         <th>Signed by</th><th>On error</th><th>Calls</th><th>Failures</th><th>Fallbacks</th></tr></thead><tbody>",
    );
    for m in &set.policies {
        let _ = write!(
            body,
            "<tr><td>{}</td><td>{}</td><td class=\"digest\">{}</td><td class=\"signed\">{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&m.module),
            esc(&m.decisions.join(", ")),
            esc(&m.digest),
            esc(if m.signed_by.is_empty() {
                "not checked"
            } else {
                &m.signed_by
            }),
            esc(&m.on_error),
            m.calls,
            m.failures,
            m.fallbacks
        );
    }
    body.push_str("</tbody></table>");
    let _ = write!(
        body,
        "<details><summary>The set as stored</summary><pre class=\"set\">{}</pre></details>",
        esc(&set.text)
    );
    if !set.servers.is_empty() {
        body.push_str(&servers(&set.servers));
    }
    if let Some(diff) = p.diff {
        body.push_str(&shadows(diff));
    }
    body.push_str(&history(p, set));
    page("Policy", Some(p.session), &body)
}

fn servers(servers: &[wire::Server]) -> String {
    let mut out = String::from(
        "<h2>Servers</h2><table class=\"servers\"><thead><tr><th>Server</th><th>Leads</th>\
         <th>Set prepared</th></tr></thead><tbody>",
    );
    for s in servers {
        let prepared = match s.policy_error.is_empty() {
            true => s.policy_set.to_string(),
            false => format!("{}: {}", s.policy_set, s.policy_error),
        };
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&s.name),
            if s.leader { "yes" } else { "" },
            esc(&prepared)
        );
    }
    out.push_str("</tbody></table>");
    out
}

/// Each shadow module's outcomes, and the latest differences.
fn shadows(diff: &wire::PolicyDiffResponse) -> String {
    if diff.counts.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "<h2>Shadows</h2><table class=\"shadows\"><thead><tr><th>Module</th><th>Decision</th>\
         <th>Same</th><th>Different</th><th>Failed</th><th>Dropped</th></tr></thead><tbody>",
    );
    for c in &diff.counts {
        let c: Value = serde_json::from_str(c).unwrap_or_default();
        let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
        let n = |k: &str| c[k].as_u64().unwrap_or_default();
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&text("module")),
            esc(&text("decision")),
            n("same"),
            n("different"),
            n("failed"),
            n("dropped")
        );
    }
    out.push_str("</tbody></table>");
    if !diff.diffs.is_empty() {
        out.push_str("<details><summary>Latest differences</summary><ol class=\"diffs\">");
        for d in diff.diffs.iter().rev().take(DIFFS) {
            let _ = write!(out, "<li><pre>{}</pre></li>", esc(d));
        }
        out.push_str("</ol></details>");
    }
    out
}

/// The versions kept before this one, newest first, with a rollback each.
fn history(p: &PolicyPage<'_>, set: &wire::PolicySet) -> String {
    let mut out = String::from("<h2>History</h2>");
    if set.history.is_empty() {
        out.push_str("<p class=\"empty\">No earlier version kept.</p>");
        return out;
    }
    out.push_str(
        "<table class=\"history\"><thead><tr><th>Version</th><th>Change</th><th>Applied</th>\
         <th></th></tr></thead><tbody>",
    );
    for h in set.history.iter().rev() {
        let action = match p.may_roll_back {
            true => format!(
                "<form method=\"post\" action=\"/policy/rollback\" class=\"action\" \
                 data-confirm=\"Put version {} of the policy set back in service?\">{}\
                 <input type=\"hidden\" name=\"version\" value=\"{}\">\
                 <button type=\"submit\" class=\"rollback\">Roll back to {}</button></form>",
                h.version,
                csrf_field(&p.session.csrf),
                h.version,
                h.version
            ),
            false => String::new(),
        };
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{} by {}</td><td>{action}</td></tr>",
            h.version,
            esc(&h.change),
            esc(&when(h.applied_ms)),
            esc(&h.applied_by)
        );
    }
    out.push_str("</tbody></table>");
    out
}
