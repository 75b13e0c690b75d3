//! A volume's page: its state, publications, decisions and events (live),
//! its snapshots, and the actions the token may take on it.

use std::fmt::Write;

use berth_model::{DecisionNote, Explanation};
use berth_proto::berth::v1 as wire;

use super::{digest, when};
use crate::api::CallError;
use crate::html::{csrf_field, esc, page, query, refusal};
use crate::session::Session;

/// A volume's page: its state and actions.
pub struct VolumePage<'a> {
    pub session: &'a Session,
    pub namespace: &'a str,
    pub volume: &'a wire::Volume,
    /// What the token may do in the volume's namespace.
    pub may: &'a [String],
    /// Nodes to offer for a publish (empty: placement chooses only).
    pub nodes: &'a [String],
    /// Its snapshots, or why they cannot be shown.
    pub snapshots: Result<&'a [wire::Snapshot], &'a CallError>,
    /// The refusal of the action just sent, if it was refused.
    pub refusal: Option<&'a str>,
}

pub fn volume(p: &VolumePage<'_>) -> String {
    let name = p
        .volume
        .spec
        .as_ref()
        .map(|s| s.name.as_str())
        .unwrap_or_default();
    let mut body = format!("<h1>Volume <span class=\"name\">{}</span></h1>", esc(name));
    if let Some(text) = p.refusal {
        body.push_str(&refusal(text));
    }
    let status = volume_status(p.volume);
    let live = format!(
        "/live/volume?ns={}&name={}&seen={}",
        query(p.namespace),
        query(name),
        digest(&status)
    );
    let _ = write!(body, "<section id=\"live\" data-live=\"{}\">", esc(&live));
    body.push_str(&status);
    body.push_str("</section>");
    body.push_str(&snapshots(&p.snapshots));
    let actions = actions(p, name);
    if !actions.is_empty() {
        let _ = write!(
            body,
            "<section class=\"actions\"><h2>Actions</h2>{actions}</section>"
        );
    }
    page(name, Some(p.session), &body)
}

/// The forms of what the token may do: publish and unpublish (`mount`);
/// expand, snapshot, retry and delete (`write`).
fn actions(p: &VolumePage<'_>, name: &str) -> String {
    let may = |cap: &str| p.may.iter().any(|m| m == cap);
    let action = |what: &str| format!("/volume/{what}?ns={}&name={}", query(p.namespace), query(name));
    let form = |what: &str, extra: &str, inner: &str| {
        format!(
            "<form method=\"post\" action=\"{}\" class=\"action\"{extra}>{}{inner}</form>",
            esc(&action(what)),
            csrf_field(&p.session.csrf)
        )
    };
    let mut out = String::new();
    if may("mount") {
        let mut inner =
            String::from("<label>Node <select name=\"node\"><option value=\"\">placement chooses</option>");
        for n in p.nodes {
            let _ = write!(inner, "<option>{}</option>", esc(n));
        }
        inner.push_str(
            "</select></label><label><input type=\"checkbox\" name=\"readonly\"> read-only</label>\
             <button type=\"submit\" id=\"publish\">Publish</button>",
        );
        out.push_str(&form("publish", "", &inner));
        for pb in &p.volume.publications {
            let inner = format!(
                "<input type=\"hidden\" name=\"node\" value=\"{}\"><button type=\"submit\">Unpublish from {}</button>",
                esc(&pb.node),
                esc(&pb.node)
            );
            out.push_str(&form("unpublish", "", &inner));
        }
    }
    if may("write") {
        out.push_str(&form(
            "expand",
            "",
            "<label>New size <input name=\"size\" required placeholder=\"2GiB\" size=\"8\"></label>\
             <button type=\"submit\" id=\"expand\">Expand</button>",
        ));
        out.push_str(&form(
            "snapshot",
            "",
            "<label>Snapshot name <input name=\"snapshot\" required maxlength=\"128\"></label>\
             <button type=\"submit\" id=\"snapshot\">Snapshot</button>",
        ));
        out.push_str(&form("retry", "", "<button type=\"submit\">Retry</button>"));
        out.push_str(&form(
            "delete",
            " data-danger data-confirm=\"Delete this volume? Its data goes with it.\"",
            "<label><input type=\"checkbox\" name=\"force\"> --force: unpublish it from every node first, \
             even if something there still writes to it</label>\
             <button type=\"submit\" id=\"delete\">Delete</button>",
        ));
    }
    out
}

fn snapshots(snapshots: &Result<&[wire::Snapshot], &CallError>) -> String {
    let mut out = String::from("<section class=\"snapshots\"><h2>Snapshots</h2>");
    match snapshots {
        Err(why) => out.push_str(&refusal(&why.to_string())),
        Ok([]) => out.push_str("<p class=\"empty\">None.</p>"),
        Ok(list) => {
            out.push_str(
                "<table class=\"snapshots\"><thead><tr><th>Name</th><th>State</th><th>Size</th>\
                 <th>Made</th><th>Failure</th></tr></thead><tbody>",
            );
            for s in *list {
                let _ = write!(
                    out,
                    "<tr><td>{}</td><td class=\"state\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    esc(&s.name),
                    esc(&s.state),
                    bytes(s.size_bytes),
                    esc(&when(s.created_ms)),
                    esc(if s.failure.is_empty() {
                        &s.retrying
                    } else {
                        &s.failure
                    })
                );
            }
            out.push_str("</tbody></table>");
        }
    }
    out.push_str("</section>");
    out
}

fn bytes(n: i64) -> String {
    usize::try_from(n).map_or_else(|_| n.to_string(), berth_model::units::format_bytes)
}

/// What the live view of a volume refreshes: state, waits, publications,
/// the decisions that shaped it, events.
pub fn volume_status(v: &wire::Volume) -> String {
    let spec = v.spec.clone().unwrap_or_default();
    let mut out = String::from("<dl class=\"facts\">");
    let mut fact = |k: &str, value: &str| {
        if !value.is_empty() {
            let _ = write!(
                out,
                "<dt>{}</dt><dd class=\"{}\">{}</dd>",
                esc(k),
                esc(k),
                esc(value)
            );
        }
    };
    fact("state", &v.state);
    fact("namespace", &v.namespace);
    fact("plugin", &spec.plugin);
    fact("waiting", &v.waiting);
    fact("failure", &v.failure);
    fact("retrying", &v.retrying);
    fact("capacity", &bytes(v.capacity_bytes));
    fact("volume id", &v.volume_id);
    let labels: Vec<String> = spec.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    fact("labels", &labels.join(", "));
    out.push_str("</dl><h2>Publications</h2>");
    if v.publications.is_empty() {
        out.push_str("<p class=\"empty\">Published nowhere.</p>");
    } else {
        out.push_str("<table class=\"publications\"><thead><tr><th>Node</th><th>State</th><th>Access</th></tr></thead><tbody>");
        for p in &v.publications {
            let access = if p.readonly { "read-only" } else { "read-write" };
            let _ = write!(
                out,
                "<tr><td>{}</td><td class=\"state\">{}</td><td>{access}</td></tr>",
                esc(&p.node),
                esc(&p.state)
            );
        }
        out.push_str("</tbody></table>");
    }
    out.push_str(&decisions(&v.explanation));
    out.push_str("<h2>Events</h2><ol class=\"events\">");
    for e in v.events.iter().rev() {
        let _ = write!(
            out,
            "<li><span class=\"step\">{}</span> <span class=\"code\">{}</span> {}</li>",
            esc(&e.step),
            esc(&e.code),
            esc(&e.message)
        );
    }
    out.push_str("</ol>");
    out
}

/// The decisions that shaped the volume (`berth volume explain`):
/// admission and what it changed, naming, placement with each node's
/// verdict, and the latest retries.
fn decisions(explanation: &str) -> String {
    let mut out = String::from("<h2>Decisions</h2>");
    let e: Explanation = match serde_json::from_str(explanation) {
        Ok(e) => e,
        Err(_) if explanation.is_empty() => Explanation::default(),
        Err(e) => return out + &refusal(&format!("the server's explanation does not read: {e}")),
    };
    if e.is_empty() {
        out.push_str("<p class=\"empty\">No decision recorded yet.</p>");
        return out;
    }
    out.push_str("<table class=\"decisions\"><thead><tr><th>Decision</th><th>Answer</th><th>By</th></tr></thead><tbody>");
    let mut row = |what: &str, n: &DecisionNote| {
        let by = match &n.digest {
            Some(d) => format!("{} {d} at {}", n.module, when(n.at_ms)),
            None => format!("{} at {}", n.module, when(n.at_ms)),
        };
        let what = match n.about.is_empty() {
            true => what.to_string(),
            false => format!("{what} of {}", n.about),
        };
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td class=\"by\">{}</td></tr>",
            esc(&what),
            esc(&n.answer),
            esc(&by)
        );
    };
    let notes = [
        ("admission", &e.admission),
        ("naming", &e.naming),
        ("placement", &e.placement),
    ];
    for (what, note) in notes {
        if let Some(n) = note {
            row(what, n);
        }
    }
    for n in &e.retries {
        row("retry", n);
    }
    out.push_str("</tbody></table>");
    if let Some(p) = &e.placement
        && !p.nodes.is_empty()
    {
        out.push_str(
            "<table class=\"verdicts\"><thead><tr><th>Node</th><th>Verdict</th></tr></thead><tbody>",
        );
        for v in &p.nodes {
            let verdict = match v.eligible {
                true => format!("eligible, score {}", v.score),
                false => format!("refused: {}", v.reason),
            };
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td></tr>",
                esc(v.node.as_str()),
                esc(&verdict)
            );
        }
        let shown = p.nodes.len() as u64;
        if p.nodes_judged > shown {
            let _ = write!(
                out,
                "<tr><td colspan=\"2\">… and {} more nodes</td></tr>",
                p.nodes_judged - shown
            );
        }
        out.push_str("</tbody></table>");
    }
    out
}
