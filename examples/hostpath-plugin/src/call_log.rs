//! `--call-log FILE`: one line per answered call, `/csi.v1.Service/Method CODE`,
//! so tests can compare what a caller counted with what the plugin saw.

use std::fs::File;
use std::future::Future;
use std::io::Write;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tonic::codegen::http;

/// The shared log; `None` keeps nothing.
#[derive(Clone, Default)]
pub struct CallLog {
    file: Option<Arc<Mutex<File>>>,
}

/// A file opened for appending, shared by the calls that write to it
/// (the call log, the journal); `None` without a path.
pub fn shared_append(path: Option<&Path>) -> std::io::Result<Option<Arc<Mutex<File>>>> {
    path.map(|p| {
        let file = std::fs::OpenOptions::new().create(true).append(true).open(p)?;
        Ok(Arc::new(Mutex::new(file)))
    })
    .transpose()
}

impl CallLog {
    pub fn open(path: Option<&Path>) -> anyhow::Result<Self> {
        Ok(CallLog {
            file: shared_append(path)?,
        })
    }

    fn record(&self, method: &str, code: i32) {
        if let Some(file) = &self.file {
            let line = format!("{method} {code}\n");
            let mut f = file.lock().unwrap_or_else(|p| p.into_inner());
            if let Err(e) = f.write_all(line.as_bytes()) {
                tracing::warn!(error = %e, "writing the call log");
            }
        }
    }
}

impl<S> tower::Layer<S> for CallLog {
    type Service = Logged<S>;

    fn layer(&self, inner: S) -> Logged<S> {
        Logged {
            inner,
            log: self.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Logged<S> {
    inner: S,
    log: CallLog,
}

impl<S, ReqBody, ResBody> tower::Service<http::Request<ReqBody>> for Logged<S>
where
    S: tower::Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<ReqBody>) -> Self::Future {
        let method = req.uri().path().to_string();
        let answer = self.inner.call(req);
        let log = self.log.clone();
        Box::pin(async move {
            let response = answer.await?;
            // A failed call is answered with its status in the headers; a
            // successful one carries OK in the trailers, after the message.
            let code = response
                .headers()
                .get("grpc-status")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            log.record(&method, code);
            Ok(response)
        })
    }
}
