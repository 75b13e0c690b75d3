//! Why a request is refused, each reason a type of its own: a name taken,
//! a volume or node missing, a conflict with what is in progress, a
//! plugin or node not ready. `RequestError` (in the crate's root) gathers
//! them for the API's one table of codes.

pub(crate) mod conflict;
pub(crate) mod missing;
pub(crate) mod taken;
pub(crate) mod unready;
