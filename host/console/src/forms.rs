//! A posted form: read whole up to [`crate::MAX_FORM`] bytes, its fields by
//! name, and the session's check it must carry.

use http::Request;
use http_body_util::{BodyExt, Limited};

use crate::session::Session;

/// A form's fields, in the order sent.
pub struct Form(Vec<(String, String)>);

impl Form {
    /// The form of `request`; `None` when it is too large or cannot be read.
    pub async fn read(request: Request<hyper::body::Incoming>) -> Option<Form> {
        let body = Limited::new(request.into_body(), crate::MAX_FORM)
            .collect()
            .await
            .ok()?;
        Some(Form::of(
            form_urlencoded::parse(&body.to_bytes()).into_owned().collect(),
        ))
    }

    /// A form of these fields.
    pub fn of(fields: Vec<(String, String)>) -> Form {
        Form(fields)
    }

    pub fn field(&self, name: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// A field's text, trimmed; empty when absent.
    pub fn text(&self, name: &str) -> String {
        self.field(name).unwrap_or("").trim().to_string()
    }

    /// Whether a checkbox was ticked.
    pub fn checked(&self, name: &str) -> bool {
        self.field(name).is_some()
    }

    /// Whether the form carries `session`'s check (it came from its pages).
    pub fn is_from(&self, session: &Session) -> bool {
        self.field("csrf") == Some(session.csrf.as_str())
    }
}
