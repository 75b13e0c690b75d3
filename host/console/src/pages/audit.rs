//! The audit log's latest lines: who did what, and what was refused.

use std::fmt::Write;

use serde_json::Value;

use super::when;
use crate::api::CallError;
use crate::html::{esc, page, refusal};
use crate::session::Session;

/// Lines shown, newest first.
pub const LINES: u32 = 200;

pub fn audit(s: &Session, lines: Result<&[String], &CallError>) -> String {
    let mut body = String::from("<h1>Audit log</h1>");
    let lines = match lines {
        Ok(lines) => lines,
        Err(e) => {
            body.push_str(&refusal(&e.to_string()));
            return page("Audit", Some(s), &body);
        }
    };
    if lines.is_empty() {
        body.push_str("<p class=\"empty\">Nothing recorded yet.</p>");
        return page("Audit", Some(s), &body);
    }
    let _ = write!(
        body,
        "<p class=\"hint\">The latest {} calls that changed something or were refused for who asked, newest first.</p>\
         <table class=\"audit\"><thead><tr><th>Time</th><th>Who</th><th>Call</th><th>Namespace</th>\
         <th>Target</th><th>Code</th><th>Why</th></tr></thead><tbody>",
        lines.len()
    );
    for line in lines.iter().rev() {
        let Ok(entry) = serde_json::from_str::<Value>(line) else {
            let _ = write!(body, "<tr><td colspan=\"7\">{}</td></tr>", esc(line));
            continue;
        };
        let text = |k: &str| entry[k].as_str().unwrap_or_default().to_string();
        let code = text("code");
        let _ = write!(
            body,
            "<tr class=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            if code == "OK" { "ok" } else { "refused" },
            esc(&when(entry["at_ms"].as_u64().unwrap_or_default())),
            esc(&text("identity")),
            esc(&text("call")),
            esc(&text("namespace")),
            esc(&text("target")),
            esc(&code),
            esc(&text("message"))
        );
    }
    body.push_str("</tbody></table>");
    page("Audit", Some(s), &body)
}
