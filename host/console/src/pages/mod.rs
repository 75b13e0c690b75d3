//! The console's pages, as HTML. Each shows what the API answered the
//! signed-in token; an action's form is drawn only when the token may
//! take it (`AclToken.may`), and the API refuses it anyway if it may not.

mod audit;
mod fleet;
mod policy;
mod volume;
mod volumes;

use std::time::{Duration, UNIX_EPOCH};

pub use audit::{LINES as AUDIT_LINES, audit};
pub use fleet::{nodes, plugins};
pub use policy::{PolicyPage, policy};
pub use volume::{VolumePage, volume, volume_status};
pub use volumes::{ListQuery, PAGE, VolumesPage, volume_rows, volumes};

use crate::html::{page, refusal};
use crate::session::Session;

pub fn sign_in(refused: Option<&str>) -> String {
    let mut body = String::from("<section class=\"sign-in\"><h1>Sign in</h1>");
    if let Some(text) = refused {
        body.push_str(&refusal(text));
    }
    body.push_str(
        "<form method=\"post\" action=\"/sign-in\"><label for=\"token\">ACL token</label>\
         <input id=\"token\" name=\"token\" type=\"password\" autocomplete=\"off\" required autofocus>\
         <button type=\"submit\">Sign in</button></form>\
         <p class=\"hint\">A token from <code>berth acl token create</code>; the console does what it may, and no more.</p>\
         </section>",
    );
    page("Sign in", None, &body)
}

/// What a live view's content was, in short: the page names the content
/// it was drawn with, and its stream sends nothing until that changes
/// (a replaced element would lose the person's focus or click).
pub fn digest(content: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    content.hash(&mut h);
    format!("{:016x}", h.finish())
}

/// Milliseconds since the epoch as UTC time to the second; empty for 0.
fn when(ms: u64) -> String {
    if ms == 0 {
        return String::new();
    }
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

pub fn problem(session: Option<&Session>, title: &str, message: &str) -> String {
    let body = format!(
        "<h1>{}</h1>{}<p><a href=\"/\">Volumes</a></p>",
        crate::html::esc(title),
        refusal(message)
    );
    page(title, session, &body)
}
