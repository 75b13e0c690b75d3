//! The one table from what went wrong to the gRPC code the API answers
//! with. Every refusal a handler returns passes through [`status`].

use tonic::{Code, Status};

use super::ReloadError;
use crate::manager::RequestError;
use crate::manager::tenancy::Denied;
use crate::store::StoreError;

/// Whatever a handler refuses a call with.
/// Who a node's own calls may not claim to be, or act for.
#[derive(Debug, thiserror::Error)]
pub(super) enum NodeBound {
    #[error("node {caller} may publish and unpublish volumes on itself only, not on {asked}")]
    OtherNode { caller: String, asked: String },
    #[error("this certificate was issued to node {certified}, not {claimed}")]
    OtherCertificate { certified: String, claimed: String },
}

#[derive(Debug, thiserror::Error)]
pub(super) enum Refusal {
    #[error(transparent)]
    Request(#[from] RequestError),
    #[error(transparent)]
    Reload(#[from] ReloadError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A field the call must carry.
    #[error("{0}: required")]
    Missing(&'static str),
    #[error("this server has no TLS cluster endpoint: set cluster_address in berth.toml")]
    NoCluster,
    /// What an agent's node asked of `NodeVolumes` beyond its own.
    #[error(transparent)]
    Node(#[from] NodeBound),
    /// The namespace a call names, unreadable or out of place.
    #[error(transparent)]
    Namespace(#[from] super::scope::NamespaceRefusal),
}

pub(super) fn code(refusal: &Refusal) -> Code {
    match refusal {
        Refusal::Request(e) => match e {
            RequestError::Invalid(_) | RequestError::OutOfBounds(_) => Code::InvalidArgument,
            RequestError::NotFound(_) => Code::NotFound,
            RequestError::Conflict(_) | RequestError::InUse(_) => Code::FailedPrecondition,
            RequestError::AlreadyExists(_) => Code::AlreadyExists,
            RequestError::NodeFull { .. } | RequestError::OverQuota(_) => Code::ResourceExhausted,
            RequestError::Unavailable(_) => Code::Unavailable,
            RequestError::Denied(Denied::InUse { .. }) => Code::FailedPrecondition,
            RequestError::Denied(Denied::Taken(_)) => Code::AlreadyExists,
            RequestError::Denied(_) | RequestError::SecretNotGiven(_) => Code::PermissionDenied,
            RequestError::Refused(berth_manager::admission::Refused::Denied { .. }) => Code::PermissionDenied,
            RequestError::Refused(berth_manager::admission::Refused::Failed(_)) => Code::Unavailable,
        },
        Refusal::Reload(ReloadError::Stopped(_)) => Code::Internal,
        Refusal::Reload(_) | Refusal::NoCluster => Code::FailedPrecondition,
        Refusal::Store(_) => Code::Unavailable,
        Refusal::Missing(_) => Code::InvalidArgument,
        Refusal::Node(_) => Code::PermissionDenied,
        Refusal::Namespace(_) => Code::InvalidArgument,
    }
}

/// The answer for a refusal: its code from the table, its message whole.
pub(super) fn status(refusal: impl Into<Refusal>) -> Status {
    let refusal = refusal.into();
    Status::new(code(&refusal), refusal.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_keeps_its_message_under_its_code() {
        let s = status(RequestError::from(berth_manager::Taken::Group("g".into())));
        assert_eq!(
            (s.code(), s.message()),
            (Code::AlreadyExists, "a group snapshot named \"g\" already exists")
        );
        let s = status(Refusal::Missing("spec"));
        assert_eq!((s.code(), s.message()), (Code::InvalidArgument, "spec: required"));
        assert_eq!(status(ReloadError::NoConfig).code(), Code::FailedPrecondition);
        assert_eq!(status(StoreError::Closed).code(), Code::Unavailable);
        let other = NodeBound::OtherNode {
            caller: "a".into(),
            asked: "b".into(),
        };
        assert_eq!(status(other).code(), Code::PermissionDenied);
        let no_create = RequestError::from(Denied::NoCreate("n".into()));
        assert_eq!(status(no_create).code(), Code::PermissionDenied);
        let in_use = RequestError::from(Denied::InUse {
            name: "v".into(),
            on: "n".into(),
        });
        assert_eq!(status(in_use).code(), Code::FailedPrecondition);
    }
}
