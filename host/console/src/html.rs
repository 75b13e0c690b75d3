//! HTML made on the server: every text from outside (names, messages,
//! events) goes through [`esc`], and the pages carry no inline script or
//! style, so the Content-Security-Policy can forbid both.

use std::fmt::Write;

use crate::session::Session;

/// `text` with HTML's special characters escaped, for text and attributes.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `text` as a URL query value.
pub fn query(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// A whole page: the header (who is signed in, the pages), then `body`.
/// A signed-in page carries the session's form check in a `<meta>` too,
/// for a script that posts.
pub fn page(title: &str, session: Option<&Session>, body: &str) -> String {
    let mut out = String::with_capacity(body.len() + 1024);
    let _ = write!(
        out,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · Berth</title><link rel=\"icon\" href=\"/favicon.ico\" type=\"image/svg+xml\">\
         <link rel=\"stylesheet\" href=\"/assets/console.css\">\
         <script src=\"/assets/console.js\" defer></script>",
        esc(title)
    );
    if let Some(s) = session {
        let _ = write!(out, "<meta name=\"csrf\" content=\"{}\">", esc(&s.csrf));
    }
    out.push_str("</head><body>");
    out.push_str("<header><a class=\"brand\" href=\"/\">Berth</a>");
    if let Some(s) = session {
        let _ = write!(
            out,
            "<nav><a href=\"/\">Volumes</a><a href=\"/nodes\">Nodes</a><a href=\"/plugins\">Plugins</a>\
             <a href=\"/policy\">Policy</a><a href=\"/audit\">Audit</a></nav>\
             <form method=\"post\" action=\"/sign-out\" class=\"who\">{}<span id=\"who\">{}</span>\
             <button type=\"submit\">Sign out</button></form>",
            csrf_field(&s.csrf),
            esc(&s.who)
        );
    }
    out.push_str("</header><main>");
    out.push_str(body);
    out.push_str("</main></body></html>");
    out
}

/// A refusal, said in words where the page shows it.
pub fn refusal(text: &str) -> String {
    format!("<p class=\"refusal\" role=\"alert\">{}</p>", esc(text))
}

/// A hidden field carrying the session's form check.
pub fn csrf_field(csrf: &str) -> String {
    format!("<input type=\"hidden\" name=\"csrf\" value=\"{}\">", esc(csrf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_from_outside_cannot_open_a_tag_or_leave_an_attribute() {
        assert_eq!(
            esc("<img src=x onerror=\"a\">'&"),
            "&lt;img src=x onerror=&quot;a&quot;&gt;&#39;&amp;"
        );
        assert_eq!(query("a b&c=/"), "a+b%26c%3D%2F");
    }
}
