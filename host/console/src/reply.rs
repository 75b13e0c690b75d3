//! What every answer of the console is made of: its body type and the
//! headers each carries.

use std::convert::Infallible;

use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};

use crate::api::CallError;

pub type Body = BoxBody<Bytes, Infallible>;

/// What every answer forbids: script or style from anywhere but the
/// console itself, inline ones included, and being framed.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

pub fn full(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Full::new(body.into()).boxed());
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, content_type.parse().expect("a valid type"));
    secure(h);
    r
}

/// The headers every answer carries. The referrer policy is
/// `same-origin`, not `no-referrer`: under the latter a browser sends
/// `Origin: null` with the console's own forms, which the routes' origin check
/// could not tell from a stranger's.
pub fn secure(h: &mut http::HeaderMap) {
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        http::HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        http::HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        http::HeaderValue::from_static("same-origin"),
    );
    h.insert(header::CACHE_CONTROL, http::HeaderValue::from_static("no-store"));
}

/// A query's value by name.
pub fn param(query: Option<&str>, name: &str) -> String {
    form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

pub fn html(status: StatusCode, page: String) -> Response<Body> {
    full(status, "text/html; charset=utf-8", page)
}

pub fn see_other(location: &str) -> Response<Body> {
    let mut r = full(StatusCode::SEE_OTHER, "text/plain; charset=utf-8", "");
    if let Ok(v) = location.parse() {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r
}

/// The status a refusal of the API is shown with.
pub fn status_of(e: &CallError) -> StatusCode {
    match e {
        CallError::Refused(s) => match s.code() {
            tonic::Code::PermissionDenied => StatusCode::FORBIDDEN,
            tonic::Code::Unauthenticated => StatusCode::UNAUTHORIZED,
            tonic::Code::NotFound => StatusCode::NOT_FOUND,
            tonic::Code::InvalidArgument | tonic::Code::OutOfRange => StatusCode::BAD_REQUEST,
            tonic::Code::FailedPrecondition | tonic::Code::AlreadyExists | tonic::Code::Aborted => {
                StatusCode::CONFLICT
            }
            tonic::Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
            _ => StatusCode::SERVICE_UNAVAILABLE,
        },
        CallError::Unsendable(_) => StatusCode::BAD_REQUEST,
    }
}
