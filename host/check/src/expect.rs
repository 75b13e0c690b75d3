//! Holding one answer to the spec: the wording every case uses for what it saw.

use std::future::Future;

use tonic::Code;

use crate::Why;
use berth_csi::{CsiError, Failure};

/// What a failed call answered, without the endpoint (the report names it once).
pub(super) fn describe(e: &CsiError) -> Why {
    Why(match &e.failure {
        Failure::Invalid(why) => format!("{}'s answer breaks the spec: {why}", e.call),
        Failure::Unreachable(why) => format!("{}: plugin unreachable: {why}", e.call),
        failure => format!("{} answered {failure}", e.call),
    })
}

/// A call that must succeed.
pub(super) fn succeeds<T>(r: Result<T, CsiError>) -> Result<T, Why> {
    r.map_err(|e| describe(&e))
}

/// A call that must answer the gRPC code `want`.
pub(super) fn answers<T>(call: &str, r: Result<T, CsiError>, want: Code) -> Result<(), Why> {
    match r {
        Err(CsiError {
            failure: Failure::Status { code, .. },
            ..
        }) if code == want => Ok(()),
        Err(e) => Err(describe(&e)),
        Ok(_) => Err(Why::from(format!("{call} answered OK"))),
    }
}

/// A required field's name, and how to leave it out of a request.
pub(super) type Omission<Req> = (&'static str, fn(&mut Req));

/// Sends `base` once per required field with that field cleared; each must
/// answer INVALID_ARGUMENT. The first that does not is the failure.
pub(super) async fn refuses_missing<Req, Resp, Fut>(
    call: &str,
    base: &Req,
    fields: &[Omission<Req>],
    send: impl Fn(Req) -> Fut,
) -> Result<(), Why>
where
    Req: Clone,
    Fut: Future<Output = Result<Resp, CsiError>>,
{
    for (field, clear) in fields {
        let mut req = base.clone();
        clear(&mut req);
        answers(call, send(req).await, Code::InvalidArgument)
            .map_err(|why| format!("without {field}: {why}"))?;
    }
    Ok(())
}
