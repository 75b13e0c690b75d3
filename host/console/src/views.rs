//! The pages as a signed-in person sees them: each asks the API what it
//! shows, as the session's token, and is drawn with a refusal when an
//! action just sent was refused (with the refusal's status).

use http::{Response, StatusCode};

use crate::Console;
use crate::api::CallError;
use crate::pages::{self, ListQuery, PolicyPage, VolumePage, VolumesPage};
use crate::reply::{Body, html, param, status_of};
use crate::session::Session;

/// An action's refusal, to show on the page it came from.
pub struct Refused {
    pub text: String,
    pub code: StatusCode,
}

fn code(answer: Result<(), &CallError>, refused: &Option<Refused>) -> StatusCode {
    match (refused, answer) {
        (Some(r), _) => r.code,
        (None, Err(e)) => status_of(e),
        (None, Ok(())) => StatusCode::OK,
    }
}

/// What the token may do in `namespace`; nothing when it cannot be asked.
async fn may(console: &Console, session: &Session, namespace: &str) -> Vec<String> {
    console
        .api
        .whoami(&session.token, namespace)
        .await
        .map(|t| t.may)
        .unwrap_or_default()
}

/// The answer to a form that does not carry its session's check.
pub fn forged(session: &Session) -> Response<Body> {
    html(
        StatusCode::FORBIDDEN,
        pages::problem(
            Some(session),
            "Refused",
            "the form is not from this session's pages; open the page again",
        ),
    )
}

pub async fn volumes(
    console: &Console,
    session: &Session,
    query: Option<&str>,
    refused: Option<Refused>,
) -> Response<Body> {
    let q = ListQuery::from_query(query);
    let answer = console.api.list(&session.token, &q.namespace, q.request()).await;
    // A new volume goes in one namespace, not in every one (`*`).
    let may = match q.namespace.as_str() {
        "*" => Vec::new(),
        ns => may(console, session, ns).await,
    };
    let plugins: Vec<String> = match may.iter().any(|m| m == "write") {
        true => console.api.plugins(&session.token).await.unwrap_or_default(),
        false => Vec::new(),
    }
    .into_iter()
    .map(|p| p.name)
    .collect();
    let page = pages::volumes(&VolumesPage {
        session,
        query: &q,
        answer: answer.as_ref(),
        may: &may,
        plugins: &plugins,
        refusal: refused.as_ref().map(|r| r.text.as_str()),
    });
    html(code(answer.as_ref().map(|_| ()), &refused), page)
}

pub async fn volume(
    console: &Console,
    session: &Session,
    query: Option<&str>,
    refused: Option<Refused>,
) -> Response<Body> {
    let (ns, name) = (param(query, "ns"), param(query, "name"));
    let ns = if ns.is_empty() { "default".to_string() } else { ns };
    let volume = match console.api.volume(&session.token, &ns, &name).await {
        Ok(v) => v,
        Err(e) => {
            return html(
                status_of(&e),
                pages::problem(Some(session), "Volume", &e.to_string()),
            );
        }
    };
    let may = may(console, session, &ns).await;
    let nodes = match may.iter().any(|m| m == "mount") {
        true => console.api.nodes(&session.token).await.unwrap_or_default(),
        false => Vec::new(),
    };
    let nodes: Vec<String> = nodes.into_iter().map(|n| n.name).collect();
    let snapshots = console.api.snapshots(&session.token, &ns, &name).await;
    let page = pages::volume(&VolumePage {
        session,
        namespace: &ns,
        volume: &volume,
        may: &may,
        nodes: &nodes,
        snapshots: snapshots.as_deref(),
        refusal: refused.as_ref().map(|r| r.text.as_str()),
    });
    html(code(Ok(()), &refused), page)
}

pub async fn nodes(console: &Console, session: &Session, refused: Option<Refused>) -> Response<Body> {
    let nodes = console.api.nodes(&session.token).await;
    let may = may(console, session, "default").await;
    let page = pages::nodes(
        session,
        nodes.as_deref(),
        &may,
        refused.as_ref().map(|r| r.text.as_str()),
    );
    html(code(nodes.as_ref().map(|_| ()), &refused), page)
}

pub async fn plugins(console: &Console, session: &Session) -> Response<Body> {
    let plugins = console.api.plugins(&session.token).await;
    let page = pages::plugins(session, plugins.as_deref());
    html(code(plugins.as_ref().map(|_| ()), &None), page)
}

pub async fn policy(console: &Console, session: &Session, refused: Option<Refused>) -> Response<Body> {
    let set = console.api.policy_set(&session.token).await;
    let diff = match &set {
        Ok(_) => console.api.policy_diff(&session.token).await.ok(),
        Err(_) => None,
    };
    let may = may(console, session, "default").await;
    let page = pages::policy(&PolicyPage {
        session,
        set: set.as_ref(),
        diff: diff.as_ref(),
        may_roll_back: may.iter().any(|m| m == "policy:write"),
        refusal: refused.as_ref().map(|r| r.text.as_str()),
    });
    html(code(set.as_ref().map(|_| ()), &refused), page)
}

pub async fn audit(console: &Console, session: &Session) -> Response<Body> {
    let lines = console.api.audit(&session.token, pages::AUDIT_LINES).await;
    let page = pages::audit(session, lines.as_deref());
    html(code(lines.as_ref().map(|_| ()), &None), page)
}
