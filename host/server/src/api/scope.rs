//! The namespace a call works in, from its `berth-namespace` metadata: the
//! default namespace when absent; `*` (every namespace the caller may
//! list) only where a call lists.

use berth_model::Namespace;
use berth_model::namespace::{EVERY_NAMESPACE, NAMESPACE_HEADER};
use tonic::Request;

use crate::model::bounds::OutOfBounds;

/// Why the namespace a call names cannot be worked in.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NamespaceRefusal {
    #[error("the {NAMESPACE_HEADER} metadata is not ASCII")]
    NotAscii,
    #[error(transparent)]
    Unnamed(#[from] OutOfBounds),
    #[error("{NAMESPACE_HEADER}: {EVERY_NAMESPACE:?} (every namespace) is for lists; name one namespace")]
    EveryForOne,
}

/// Where a list looks.
pub(crate) enum Within {
    One(Namespace),
    Every,
}

/// The namespaces a call names: one, or every one (`*`).
pub(crate) fn within<T>(request: &Request<T>) -> Result<Within, NamespaceRefusal> {
    let Some(value) = request.metadata().get(NAMESPACE_HEADER) else {
        return Ok(Within::One(Namespace::default()));
    };
    let text = value.to_str().map_err(|_| NamespaceRefusal::NotAscii)?;
    if text == EVERY_NAMESPACE {
        return Ok(Within::Every);
    }
    Namespace::parse_or_default(text)
        .map(Within::One)
        .map_err(NamespaceRefusal::from)
}

/// The one namespace a call works in.
pub(crate) fn namespace<T>(request: &Request<T>) -> Result<Namespace, NamespaceRefusal> {
    match within(request)? {
        Within::One(namespace) => Ok(namespace),
        Within::Every => Err(NamespaceRefusal::EveryForOne),
    }
}
