//! Which request gets which page or action.

use http::{Method, Request, Response, StatusCode, header};

use crate::Console;
use crate::forms::Form;
use crate::pages;
use crate::reply::{Body, full, html, see_other};
use crate::session::set_cookie;
use crate::{actions, views};

pub async fn answer(
    console: &std::sync::Arc<Console>,
    request: Request<hyper::body::Incoming>,
) -> Response<Body> {
    let (method, path) = (request.method().clone(), request.uri().path().to_string());
    match (&method, path.as_str()) {
        (&Method::GET, "/assets/console.css") => {
            return full(StatusCode::OK, "text/css; charset=utf-8", crate::assets::CSS);
        }
        (&Method::GET, "/assets/console.js") => {
            return full(
                StatusCode::OK,
                "text/javascript; charset=utf-8",
                crate::assets::JS,
            );
        }
        (&Method::GET, "/favicon.ico") => {
            return full(StatusCode::OK, "image/svg+xml", crate::assets::ICON);
        }
        (&Method::GET, "/sign-in") => return html(StatusCode::OK, pages::sign_in(None)),
        _ => {}
    }
    // Signing in too: another site may not sign a browser in as its own token.
    if method == Method::POST && !same_origin(request.headers()) {
        return html(
            StatusCode::FORBIDDEN,
            pages::problem(None, "Refused", "a change must come from the console's own pages"),
        );
    }
    if (&method, path.as_str()) == (&Method::POST, "/sign-in") {
        return sign_in(console, request).await;
    }
    let Some(session) = console.sessions.get(request.headers()) else {
        return see_other("/sign-in");
    };
    let query = request.uri().query().map(str::to_string);
    let query = query.as_deref();
    match (&method, path.as_str()) {
        (&Method::GET, "/") => views::volumes(console, &session, query, None).await,
        (&Method::GET, "/volume") => views::volume(console, &session, query, None).await,
        (&Method::GET, "/nodes") => views::nodes(console, &session, None).await,
        (&Method::GET, "/plugins") => views::plugins(console, &session).await,
        (&Method::GET, "/policy") => views::policy(console, &session, None).await,
        (&Method::GET, "/audit") => views::audit(console, &session).await,
        (&Method::GET, "/live/volumes") => crate::live::volumes(console, session, query),
        (&Method::GET, "/live/volume") => crate::live::volume(console, session, query),
        (&Method::POST, "/sign-out") => {
            let headers = request.headers().clone();
            match Form::read(request).await {
                Some(f) if f.is_from(&session) => {}
                _ => return views::forged(&session),
            }
            console.sessions.close(&headers);
            let mut r = see_other("/sign-in");
            if let Ok(v) = set_cookie(None).parse() {
                r.headers_mut().insert(header::SET_COOKIE, v);
            }
            r
        }
        (&Method::POST, _) => {
            let form = match actions::session_form(&session, request).await {
                Ok(form) => form,
                Err(refused) => return refused,
            };
            match path.as_str() {
                "/volumes/create" => actions::create(console, &session, query, &form).await,
                "/node/drain" => actions::drain(console, &session, query, &form).await,
                "/policy/rollback" => actions::rollback(console, &session, &form).await,
                what => match what.strip_prefix("/volume/") {
                    Some(what) => actions::volume(console, &session, what, query, &form).await,
                    None => not_found(&session),
                },
            }
        }
        _ => not_found(&session),
    }
}

fn not_found(session: &crate::session::Session) -> Response<Body> {
    html(
        StatusCode::NOT_FOUND,
        pages::problem(Some(session), "Not found", "no such page"),
    )
}

/// Whether a POST's `Origin` (when the browser sends one) is this host.
fn same_origin(h: &http::HeaderMap) -> bool {
    let Some(origin) = h.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    let host = h.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
    origin.strip_prefix("https://") == Some(host)
}

async fn sign_in(console: &Console, request: Request<hyper::body::Incoming>) -> Response<Body> {
    let Some(form) = Form::read(request).await else {
        return html(
            StatusCode::BAD_REQUEST,
            pages::sign_in(Some("the form could not be read")),
        );
    };
    let token = form.text("token");
    match console.api.whoami(&token, "default").await {
        Ok(who) => {
            let id = console.sessions.open(token, who.name);
            let mut r = see_other("/");
            if let Ok(v) = set_cookie(Some(&id)).parse() {
                r.headers_mut().insert(header::SET_COOKIE, v);
            }
            r
        }
        Err(e) => {
            tracing::info!(error = %e, "console sign-in refused");
            html(StatusCode::UNAUTHORIZED, pages::sign_in(Some(&e.to_string())))
        }
    }
}
