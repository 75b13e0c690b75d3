//! What a person's forms ask for: each checked for its session's mark,
//! made an API call as the session's token, and answered with the page it
//! came from: on success by a redirect to it, on refusal drawn again with
//! the refusal in words (and its status).

use http::{Request, Response, StatusCode};

use berth_proto::berth::v1 as wire;

use crate::Console;
use crate::api::{Action, CallError};
use crate::forms::Form;
use crate::html::query;
use crate::reply::{Body, html, param, see_other, status_of};
use crate::session::Session;
use crate::views::{self, Refused, forged};

/// Why a form could not be made into a call.
#[derive(Debug, thiserror::Error)]
enum FormError {
    #[error("the form could not be read")]
    Unreadable,
    #[error("size {0}")]
    Size(#[from] berth_model::units::SizeError),
    #[error("label {0:?}: write KEY=VALUE")]
    Label(String),
    #[error("version {0:?}: a number")]
    Version(String),
}

/// A refusal of the API, or of the form before any call.
#[derive(Debug, thiserror::Error)]
enum Refusal {
    #[error(transparent)]
    Call(#[from] CallError),
    #[error(transparent)]
    Form(#[from] FormError),
}

impl From<Refusal> for Refused {
    fn from(why: Refusal) -> Refused {
        let code = match &why {
            Refusal::Call(e) => status_of(e),
            Refusal::Form(_) => StatusCode::BAD_REQUEST,
        };
        Refused {
            text: why.to_string(),
            code,
        }
    }
}

/// The form of `request`, when it is this session's; otherwise the answer
/// that refuses it.
pub async fn session_form(
    session: &Session,
    request: Request<hyper::body::Incoming>,
) -> Result<Form, Response<Body>> {
    match Form::read(request).await {
        Some(form) if form.is_from(session) => Ok(form),
        Some(_) => Err(forged(session)),
        None => Err(html(
            StatusCode::BAD_REQUEST,
            crate::pages::problem(Some(session), "Refused", &FormError::Unreadable.to_string()),
        )),
    }
}

/// The page's namespace from its query (`default` when not given).
fn namespace(q: Option<&str>) -> String {
    let ns = param(q, "ns");
    if ns.is_empty() { "default".into() } else { ns }
}

/// `/volume/{what}?ns=&name=`: publish, unpublish, expand, snapshot, retry, delete.
pub async fn volume(
    console: &Console,
    session: &Session,
    what: &str,
    q: Option<&str>,
    form: &Form,
) -> Response<Body> {
    let (ns, name) = (namespace(q), param(q, "name"));
    let action = match what {
        "publish" => Action::Publish {
            name: name.clone(),
            node: form.text("node"),
            readonly: form.checked("readonly"),
        },
        "unpublish" => Action::Unpublish {
            name: name.clone(),
            node: form.text("node"),
        },
        "delete" => Action::Delete {
            name: name.clone(),
            force: form.checked("force"),
        },
        "retry" => Action::Retry { name: name.clone() },
        "expand" => match berth_model::units::parse_size_flag(&form.text("size")) {
            Ok(bytes) => Action::Expand {
                name: name.clone(),
                bytes,
            },
            Err(e) => {
                return refused_on_volume(console, session, &ns, &name, FormError::from(e).into()).await;
            }
        },
        "snapshot" => Action::Snapshot {
            volume: name.clone(),
            name: form.text("snapshot"),
        },
        _ => {
            return html(
                StatusCode::NOT_FOUND,
                crate::pages::problem(Some(session), "Not found", "no such action"),
            );
        }
    };
    match console.api.act(&session.token, &ns, action).await {
        Ok(()) if what == "delete" => see_other(&format!("/?ns={}", query(&ns))),
        Ok(()) => see_other(&format!("/volume?ns={}&name={}", query(&ns), query(&name))),
        Err(e) => refused_on_volume(console, session, &ns, &name, e.into()).await,
    }
}

async fn refused_on_volume(
    console: &Console,
    session: &Session,
    ns: &str,
    name: &str,
    why: Refusal,
) -> Response<Body> {
    let q = format!("ns={}&name={}", query(ns), query(name));
    views::volume(console, session, Some(&q), Some(why.into())).await
}

/// `/volumes/create?ns=`: a new volume from the list's form.
pub async fn create(console: &Console, session: &Session, q: Option<&str>, form: &Form) -> Response<Body> {
    let ns = namespace(q);
    let name = form.text("name");
    let created = match spec(form) {
        Ok(spec) => {
            let action = Action::Create(Box::new(spec));
            console
                .api
                .act(&session.token, &ns, action)
                .await
                .map_err(Refusal::from)
        }
        Err(e) => Err(e.into()),
    };
    match created {
        Ok(()) => see_other(&format!("/volume?ns={}&name={}", query(&ns), query(&name))),
        Err(why) => {
            let list = format!("ns={}", query(&ns));
            views::volumes(console, session, Some(&list), Some(why.into())).await
        }
    }
}

/// A new volume's spec from its form: what the API checks, it checks.
fn spec(form: &Form) -> Result<wire::VolumeSpec, FormError> {
    let size = berth_model::units::parse_size_flag(&form.text("size"))?;
    let mut labels = std::collections::HashMap::new();
    for pair in form
        .text("labels")
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| FormError::Label(pair.to_string()))?;
        labels.insert(k.trim().to_string(), v.trim().to_string());
    }
    Ok(wire::VolumeSpec {
        name: form.text("name"),
        plugin: form.text("plugin"),
        required_bytes: i64::try_from(size).unwrap_or(i64::MAX),
        access_mode: form.text("access_mode"),
        labels,
        ..Default::default()
    })
}

/// `/node/drain?name=`: drains a node, or undrains it (`undo`).
pub async fn drain(console: &Console, session: &Session, q: Option<&str>, form: &Form) -> Response<Body> {
    let node = param(q, "name");
    match console
        .api
        .drain(&session.token, &node, form.checked("undo"))
        .await
    {
        Ok(()) => see_other("/nodes"),
        Err(e) => views::nodes(console, session, Some(Refusal::from(e).into())).await,
    }
}

/// `/policy/rollback`: the policy set back to a kept version.
pub async fn rollback(console: &Console, session: &Session, form: &Form) -> Response<Body> {
    let version = form.text("version");
    let rolled = match version.parse::<u64>() {
        Ok(v) => console
            .api
            .rollback(&session.token, v)
            .await
            .map(|_| ())
            .map_err(Refusal::from),
        Err(_) => Err(FormError::Version(version).into()),
    };
    match rolled {
        Ok(()) => see_other("/policy"),
        Err(why) => views::policy(console, session, Some(why.into())).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(fields: &[(&str, &str)]) -> Form {
        Form::of(
            fields
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn a_new_volumes_form_makes_its_spec_or_says_what_is_wrong() {
        let spec = spec(&form(&[
            ("name", " logs "),
            ("plugin", "hostpath"),
            ("size", "1.5GiB"),
            ("access_mode", "single-node-writer"),
            ("labels", "team=db, tier = gold,"),
        ]))
        .unwrap();
        assert_eq!(spec.name, "logs");
        assert_eq!(spec.required_bytes, 3 << 29);
        assert_eq!(spec.labels["team"], "db");
        assert_eq!(spec.labels["tier"], "gold");

        let bad_size = spec_error(&[("size", "10")]);
        assert!(bad_size.starts_with("size "), "{bad_size}");
        let bad_label = spec_error(&[("size", "1GiB"), ("labels", "team")]);
        assert_eq!(bad_label, "label \"team\": write KEY=VALUE");
    }

    fn spec_error(fields: &[(&str, &str)]) -> String {
        spec(&form(fields)).unwrap_err().to_string()
    }
}
