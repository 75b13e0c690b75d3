//! What a registry says when it refuses: its own words from the
//! distribution API's error document, bounded, and what to do when the
//! credentials it wants are with a credential helper Berth does not run.

use serde::Deserialize;

use crate::OciError;
use crate::http::Response;
use crate::registry::Registry;

#[derive(Deserialize)]
struct Errors {
    #[serde(default)]
    errors: Vec<ErrorEntry>,
}

#[derive(Deserialize)]
struct ErrorEntry {
    #[serde(default)]
    code: String,
    #[serde(default)]
    message: String,
}

impl Registry {
    /// The registry's refusal of `what`, with what to do when the
    /// credentials it wants are with a credential helper Berth does not run.
    pub(crate) fn refusal(&self, what: String, response: &Response) -> OciError {
        let mut message = error_message(response);
        if matches!(response.status, 401 | 403)
            && let Some(helper) = &self.helper
        {
            message.push_str(&format!(
                " (the Docker config keeps this registry's credentials with the credential helper docker-credential-{helper}, which Berth does not run: give Berth a config file with them under `auths`, with --docker-config or `docker_config` in [oci]; `docker --config DIR login` writes one)"
            ));
        }
        OciError::Status {
            registry: self.name.clone(),
            what,
            status: response.status,
            message,
        }
    }
}

/// The registry's own words for a failure, bounded.
pub(crate) fn error_message(response: &Response) -> String {
    let text = match serde_json::from_slice::<Errors>(&response.body) {
        Ok(e) if !e.errors.is_empty() => e
            .errors
            .iter()
            .map(|e| format!("{}: {}", e.code, e.message))
            .collect::<Vec<_>>()
            .join("; "),
        _ => String::from_utf8_lossy(&response.body).trim().to_string(),
    };
    let mut text = if text.is_empty() {
        "no message".to_string()
    } else {
        text
    };
    if text.len() > 512 {
        let mut end = 512;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}
