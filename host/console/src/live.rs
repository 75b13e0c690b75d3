//! The live views: a page's `data-live` element follows a stream of
//! server-sent events. The console asks the API again each [`EVERY`], as
//! the signed-in token, and sends the element's new content only when it
//! changed. A stream ends after [`LIFETIME`] (the browser opens it again),
//! or when the API refuses the token (revoked, expired).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;

use crate::Console;
use crate::api::CallError;
use crate::pages::{self, ListQuery};
use crate::reply::{Body, param, secure};
use crate::session::Session;

/// How often a live view asks again.
pub const EVERY: Duration = Duration::from_secs(1);
/// The longest a stream stays open.
pub const LIFETIME: Duration = Duration::from_secs(3600);

/// One server-sent event: `event` with `data`, a line of it per line.
fn event(event: &str, data: &str) -> Bytes {
    let mut out = format!("event: {event}\n");
    for line in data.lines() {
        out.push_str("data: ");
        out.push_str(line);
        out.push('\n');
    }
    out.push('\n');
    Bytes::from(out)
}

/// A stream of events made by `render`, called each [`EVERY`]: its `Ok`
/// sent as `update` when it changed, its `Err` as `refused`, ending it.
/// `seen`: the digest of what the page was drawn with.
fn stream<F, Fut>(console: &Arc<Console>, session: Session, seen: String, render: F) -> Response<Body>
where
    F: Fn(Arc<Console>, Session) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<String, CallError>> + Send,
{
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
    let console = console.clone();
    tokio::spawn(async move {
        let ends = tokio::time::Instant::now() + LIFETIME;
        let mut last = seen;
        let mut tick = tokio::time::interval(EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = tx.closed() => return,
                () = tokio::time::sleep_until(ends) => return,
            }
            let frame = match render(console.clone(), session.clone()).await {
                Ok(content) => {
                    let digest = pages::digest(&content);
                    if digest == last {
                        continue;
                    }
                    last = digest;
                    event("update", &content)
                }
                Err(refusal) => {
                    let _ = tx
                        .send(Ok(Frame::data(event("refused", &refusal.to_string()))))
                        .await;
                    return;
                }
            };
            if tx.send(Ok(Frame::data(frame))).await.is_err() {
                return;
            }
        }
    });
    let body = StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx));
    let mut r = Response::new(body.boxed());
    *r.status_mut() = StatusCode::OK;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/event-stream"),
    );
    secure(h);
    r
}

/// The volumes list's table, live.
pub fn volumes(console: &Arc<Console>, session: Session, query: Option<&str>) -> Response<Body> {
    let q = ListQuery::from_query(query);
    stream(console, session, param(query, "seen"), move |console, session| {
        let q = q.clone();
        async move {
            let answer = console
                .api
                .list(&session.token, &q.namespace, q.request())
                .await?;
            Ok(pages::volume_rows(&q, Ok(&answer)))
        }
    })
}

/// A volume's state, publications and events, live.
pub fn volume(console: &Arc<Console>, session: Session, query: Option<&str>) -> Response<Body> {
    let (ns, name) = (param(query, "ns"), param(query, "name"));
    stream(console, session, param(query, "seen"), move |console, session| {
        let (ns, name) = (ns.clone(), name.clone());
        async move {
            let v = console.api.volume(&session.token, &ns, &name).await?;
            Ok(pages::volume_status(&v))
        }
    })
}
