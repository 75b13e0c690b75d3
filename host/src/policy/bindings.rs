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
