//! Rust types for the `berth:policy` WIT package, shared by the WebAssembly
//! path and the built-in policies so that both decide on the same values.

mod generated {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "policy",
        additional_derives: [PartialEq],
    });
}

pub use generated::berth::policy::types::{
    AccessMode, AccessType, CapacityRange, Code, Health, Operation, Pairs, Volume,
};
pub use generated::exports::berth::policy::naming::NamingRequest;
pub use generated::exports::berth::policy::placement::{
    Candidate, Candidates, PlacementRequest, Purpose, Verdict,
};
pub use generated::exports::berth::policy::retry::{Decision as RetryDecision, Failure};

/// The WIT package this host implements; compatible guests export
/// `berth:policy/<interface>@0.1.x`.
pub const PACKAGE: &str = "berth:policy";
pub const PACKAGE_VERSION: &str = "0.1.0";
pub(crate) const COMPATIBLE_PREFIX: &str = "0.1.";

/// Kebab-case names of a WIT enum, as written in the WIT and in case files.
macro_rules! wit_names {
    ($t:ident, $what:literal, [$(($name:literal, $v:ident)),+ $(,)?]) => {
        impl $t {
            pub const NAMES: &'static [(&'static str, $t)] = &[$(($name, $t::$v)),+];

            pub fn wit_name(self) -> &'static str {
                match self {
                    $($t::$v => $name),+
                }
            }

            /// The value of a WIT name, or an error listing the names there are.
            pub fn from_wit_name(name: &str) -> Result<$t, String> {
                Self::NAMES.iter().find(|(n, _)| *n == name).map(|(_, v)| *v).ok_or_else(|| {
                    let all: Vec<&str> = Self::NAMES.iter().map(|(n, _)| *n).collect();
                    format!("{} {name:?} is not one of {all:?}", $what)
                })
            }
        }
    };
}

wit_names!(
    AccessMode,
    "access mode",
    [
        ("single-node-writer", SingleNodeWriter),
        ("single-node-reader-only", SingleNodeReaderOnly),
        ("multi-node-reader-only", MultiNodeReaderOnly),
        ("multi-node-single-writer", MultiNodeSingleWriter),
        ("multi-node-multi-writer", MultiNodeMultiWriter),
        ("single-node-single-writer", SingleNodeSingleWriter),
        ("single-node-multi-writer", SingleNodeMultiWriter),
    ]
);
wit_names!(AccessType, "access type", [("mount", Mount), ("block", Block)]);
wit_names!(
    Health,
    "health",
    [
        ("healthy", Healthy),
        ("unhealthy", Unhealthy),
        ("unknown", Unknown)
    ]
);
wit_names!(Purpose, "purpose", [("create", Create), ("publish", Publish)]);
wit_names!(
    Operation,
    "operation",
    [
        ("create-volume", CreateVolume),
        ("delete-volume", DeleteVolume),
        ("controller-publish-volume", ControllerPublishVolume),
        ("controller-unpublish-volume", ControllerUnpublishVolume),
        ("node-stage-volume", NodeStageVolume),
        ("node-unstage-volume", NodeUnstageVolume),
        ("node-publish-volume", NodePublishVolume),
        ("node-unpublish-volume", NodeUnpublishVolume),
    ]
);

impl Code {
    /// The WIT code for a gRPC status code; `None` for OK, which is no failure.
    pub fn from_grpc(code: tonic::Code) -> Option<Code> {
        use tonic::Code as G;
        Some(match code {
            G::Ok => return None,
            G::Cancelled => Code::Cancelled,
            G::Unknown => Code::Unknown,
            G::InvalidArgument => Code::InvalidArgument,
            G::DeadlineExceeded => Code::DeadlineExceeded,
            G::NotFound => Code::NotFound,
            G::AlreadyExists => Code::AlreadyExists,
            G::PermissionDenied => Code::PermissionDenied,
            G::ResourceExhausted => Code::ResourceExhausted,
            G::FailedPrecondition => Code::FailedPrecondition,
            G::Aborted => Code::Aborted,
            G::OutOfRange => Code::OutOfRange,
            G::Unimplemented => Code::Unimplemented,
            G::Internal => Code::Internal,
            G::Unavailable => Code::Unavailable,
            G::DataLoss => Code::DataLoss,
            G::Unauthenticated => Code::Unauthenticated,
        })
    }

    /// gRPC names (`UNAVAILABLE`, any case) or numbers; OK is not a failure.
    pub fn from_name(name: &str) -> Result<Code, String> {
        berth_proto::code::from_name(name)
            .and_then(Code::from_grpc)
            .ok_or_else(|| format!("{name:?} is not a gRPC error code (e.g. UNAVAILABLE, NOT_FOUND)"))
    }

    /// The canonical gRPC name, e.g. `UNAVAILABLE`.
    pub fn name(self) -> &'static str {
        berth_proto::code::name(self.to_grpc())
    }

    pub fn to_grpc(self) -> tonic::Code {
        use tonic::Code as G;
        match self {
            Code::Cancelled => G::Cancelled,
            Code::Unknown => G::Unknown,
            Code::InvalidArgument => G::InvalidArgument,
            Code::DeadlineExceeded => G::DeadlineExceeded,
            Code::NotFound => G::NotFound,
            Code::AlreadyExists => G::AlreadyExists,
            Code::PermissionDenied => G::PermissionDenied,
            Code::ResourceExhausted => G::ResourceExhausted,
            Code::FailedPrecondition => G::FailedPrecondition,
            Code::Aborted => G::Aborted,
            Code::OutOfRange => G::OutOfRange,
            Code::Unimplemented => G::Unimplemented,
            Code::Internal => G::Internal,
            Code::Unavailable => G::Unavailable,
            Code::DataLoss => G::DataLoss,
            Code::Unauthenticated => G::Unauthenticated,
        }
    }
}

impl Operation {
    /// The CSI method name: `CreateVolume`, `NodePublishVolume`...
    pub fn name(self) -> &'static str {
        match self {
            Operation::CreateVolume => "CreateVolume",
            Operation::DeleteVolume => "DeleteVolume",
            Operation::ControllerPublishVolume => "ControllerPublishVolume",
            Operation::ControllerUnpublishVolume => "ControllerUnpublishVolume",
            Operation::NodeStageVolume => "NodeStageVolume",
            Operation::NodeUnstageVolume => "NodeUnstageVolume",
            Operation::NodePublishVolume => "NodePublishVolume",
            Operation::NodeUnpublishVolume => "NodeUnpublishVolume",
        }
    }

    /// Whether the operation undoes something, so NOT_FOUND means it is done.
    pub fn is_undo(self) -> bool {
        matches!(
            self,
            Operation::DeleteVolume
                | Operation::ControllerUnpublishVolume
                | Operation::NodeUnstageVolume
                | Operation::NodeUnpublishVolume
        )
    }
}
