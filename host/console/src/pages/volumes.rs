//! The volumes list: filters, a page of 50, live; and a new volume's form.

use std::fmt::Write;

use berth_proto::berth::v1 as wire;

use super::digest;
use crate::api::CallError;
use crate::html::{csrf_field, esc, page, query, refusal};
use crate::session::Session;

/// The volume states, as a filter offers them.
const STATES: [&str; 6] = [
    "pending",
    "creating",
    "available",
    "published",
    "deleting",
    "failed",
];

/// The access modes a new volume may have (the first is the default).
const ACCESS_MODES: [&str; 7] = [
    "single-node-writer",
    "single-node-reader-only",
    "single-node-single-writer",
    "single-node-multi-writer",
    "multi-node-reader-only",
    "multi-node-single-writer",
    "multi-node-multi-writer",
];

/// Volumes on one page of the list.
pub const PAGE: u32 = 50;

/// What a volumes list shows: the filters from the page's query.
#[derive(Clone, Debug, Default)]
pub struct ListQuery {
    /// One namespace, or `*` for every one the token may list.
    pub namespace: String,
    pub name: String,
    pub state: String,
    pub plugin: String,
    pub node: String,
    /// `key=value` or `key`.
    pub label: String,
    pub after: String,
}

impl ListQuery {
    pub fn from_query(q: Option<&str>) -> ListQuery {
        let mut out = ListQuery {
            namespace: "default".into(),
            ..ListQuery::default()
        };
        for (k, v) in form_urlencoded::parse(q.unwrap_or("").as_bytes()) {
            let field = match &*k {
                "ns" if !v.is_empty() => &mut out.namespace,
                "q" => &mut out.name,
                "state" => &mut out.state,
                "plugin" => &mut out.plugin,
                "node" => &mut out.node,
                "label" => &mut out.label,
                "after" => &mut out.after,
                _ => continue,
            };
            *field = v.into_owned();
        }
        out
    }

    pub fn to_query(&self, after: &str) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        q.append_pair("ns", &self.namespace);
        for (k, v) in [
            ("q", &self.name),
            ("state", &self.state),
            ("plugin", &self.plugin),
            ("node", &self.node),
            ("label", &self.label),
        ] {
            if !v.is_empty() {
                q.append_pair(k, v);
            }
        }
        if !after.is_empty() {
            q.append_pair("after", after);
        }
        q.finish()
    }

    pub fn request(&self) -> wire::ListVolumesRequest {
        wire::ListVolumesRequest {
            max_entries: PAGE,
            starting_token: self.after.clone(),
            name_contains: self.name.clone(),
            state: self.state.clone(),
            plugin: self.plugin.clone(),
            node: self.node.clone(),
            label: self.label.clone(),
        }
    }
}

/// The volumes page.
pub struct VolumesPage<'a> {
    pub session: &'a Session,
    pub query: &'a ListQuery,
    pub answer: Result<&'a wire::ListVolumesResponse, &'a CallError>,
    /// What the token may do in the namespace (empty for `*`).
    pub may: &'a [String],
    /// The plugins a new volume may be made on, when the token may see them.
    pub plugins: &'a [String],
    /// The refusal of a new volume just asked for.
    pub refusal: Option<&'a str>,
}

pub fn volumes(p: &VolumesPage<'_>) -> String {
    let q = p.query;
    let mut body =
        String::from("<h1>Volumes</h1><form class=\"filters\" method=\"get\" action=\"/\" role=\"search\">");
    let _ = write!(
        body,
        "<label>Namespace <input name=\"ns\" value=\"{}\" size=\"10\" title=\"* for every namespace you may list\"></label>\
         <label>Name <input id=\"search\" name=\"q\" type=\"search\" value=\"{}\" placeholder=\"part of a name\"></label>\
         <label>State <select name=\"state\"><option value=\"\">any</option>",
        esc(&q.namespace),
        esc(&q.name)
    );
    for s in STATES {
        let selected = if q.state == s { " selected" } else { "" };
        let _ = write!(body, "<option{selected}>{s}</option>");
    }
    let _ = write!(
        body,
        "</select></label><label>Plugin <input name=\"plugin\" value=\"{}\" size=\"10\"></label>\
         <label>Node <input name=\"node\" value=\"{}\" size=\"10\"></label>\
         <label>Label <input name=\"label\" value=\"{}\" size=\"12\" placeholder=\"key=value\"></label>\
         <button type=\"submit\">Find</button></form>",
        esc(&q.plugin),
        esc(&q.node),
        esc(&q.label)
    );
    if let Some(text) = p.refusal {
        body.push_str(&refusal(text));
    }
    if p.may.iter().any(|m| m == "write") {
        body.push_str(&create_form(p));
    }
    let rows = volume_rows(q, p.answer);
    let live = format!("/live/volumes?{}&seen={}", q.to_query(&q.after), digest(&rows));
    let _ = write!(body, "<section id=\"live\" data-live=\"{}\">", esc(&live));
    body.push_str(&rows);
    body.push_str("</section>");
    page("Volumes", Some(p.session), &body)
}

/// A new volume in the page's namespace: name, plugin, size, access, labels.
fn create_form(p: &VolumesPage<'_>) -> String {
    let open = if p.refusal.is_some() { " open" } else { "" };
    let mut out = format!(
        "<details class=\"create\"{open}><summary>New volume in {}</summary>\
         <form method=\"post\" action=\"/volumes/create?ns={}\" class=\"action\">{}\
         <label>Name <input name=\"name\" required maxlength=\"128\"></label>",
        esc(&p.query.namespace),
        esc(&query(&p.query.namespace)),
        csrf_field(&p.session.csrf)
    );
    match p.plugins {
        [] => out.push_str("<label>Plugin <input name=\"plugin\" required></label>"),
        plugins => {
            out.push_str("<label>Plugin <select name=\"plugin\">");
            for name in plugins {
                let _ = write!(out, "<option>{}</option>", esc(name));
            }
            out.push_str("</select></label>");
        }
    }
    out.push_str(
        "<label>Size <input name=\"size\" required placeholder=\"1GiB\" size=\"8\"></label>\
         <label>Access <select name=\"access_mode\">",
    );
    for mode in ACCESS_MODES {
        let _ = write!(out, "<option>{mode}</option>");
    }
    out.push_str(
        "</select></label><label>Labels <input name=\"labels\" placeholder=\"team=db, tier=gold\"></label>\
         <button type=\"submit\" id=\"create\">Create</button></form></details>",
    );
    out
}

/// The list's table and its next-page link: what the live view refreshes.
pub fn volume_rows(q: &ListQuery, answer: Result<&wire::ListVolumesResponse, &CallError>) -> String {
    let answer = match answer {
        Ok(a) => a,
        Err(e) => return refusal(&e.to_string()),
    };
    let mut out = String::new();
    if answer.volumes.is_empty() {
        out.push_str("<p class=\"empty\">No volume on this page matches.</p>");
    } else {
        out.push_str(
            "<table class=\"volumes\"><thead><tr><th>Name</th><th>Namespace</th><th>State</th>\
             <th>Plugin</th><th>Nodes</th><th>Waiting for</th></tr></thead><tbody>",
        );
        for v in &answer.volumes {
            let spec = v.spec.clone().unwrap_or_default();
            let nodes: Vec<&str> = v.publications.iter().map(|p| p.node.as_str()).collect();
            let href = format!("/volume?ns={}&name={}", query(&v.namespace), query(&spec.name));
            let _ = write!(
                out,
                "<tr><td><a href=\"{}\">{}</a></td><td>{}</td><td class=\"state {}\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&href),
                esc(&spec.name),
                esc(&v.namespace),
                esc(&v.state),
                esc(&v.state),
                esc(&spec.plugin),
                esc(&nodes.join(", ")),
                esc(if v.failure.is_empty() {
                    &v.waiting
                } else {
                    &v.failure
                }),
            );
        }
        out.push_str("</tbody></table>");
    }
    if !answer.next_token.is_empty() {
        let _ = write!(
            out,
            "<p><a class=\"next\" href=\"/?{}\">Next page</a></p>",
            esc(&q.to_query(&answer.next_token))
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lists_query_reads_back_as_it_was_written() {
        let q = ListQuery {
            namespace: "*".into(),
            name: "a b&c".into(),
            state: "published".into(),
            plugin: "hostpath".into(),
            node: "node-a".into(),
            label: "team=db".into(),
            after: String::new(),
        };
        let written = q.to_query("pv-9");
        assert_eq!(
            written,
            "ns=*&q=a+b%26c&state=published&plugin=hostpath&node=node-a&label=team%3Ddb&after=pv-9"
        );
        let read = ListQuery::from_query(Some(&written));
        assert_eq!(read.request().label, "team=db");
        assert_eq!(read.after, "pv-9");
        assert_eq!(read.to_query("pv-9"), written);
        // Without a namespace, the default one.
        assert_eq!(ListQuery::from_query(Some("q=x")).namespace, "default");
    }
}
