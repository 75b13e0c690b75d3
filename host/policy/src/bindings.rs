//! Rust types for the `berth:policy` WIT package, shared by the WebAssembly
//! path and the built-in policies so that both decide on the same values.

mod generated {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "policy",
        // serde: the decision log keeps what was asked and answered.
        additional_derives: [PartialEq, serde::Serialize, serde::Deserialize],
    });
}

pub use generated::berth::policy::types::{
    AccessMode, AccessType, CapacityRange, Code, Health, Operation, Pairs, Volume,
};
pub use generated::exports::berth::policy::admission::{
    AdmissionRequest, Call as AdmissionCall, Caller as AdmissionCaller, Change as AdmissionChange,
    FieldChange, Usage as AdmissionUsage, Verdict as AdmissionVerdict,
};
pub use generated::exports::berth::policy::naming::NamingRequest;
pub use generated::exports::berth::policy::placement::{
    Candidates as CandidateColumns, PlacementRequest, Purpose, Verdicts,
};
pub use generated::exports::berth::policy::retry::{Decision as RetryDecision, Failure};

/// In a released package's module: its `operation` and `failure` from
/// today's, for the operations listed (those it has names for).
macro_rules! older_failure {
    ($($op:ident),+ $(,)?) => {
        /// The operation as this release names it; `None` for one it has no name for.
        pub fn operation(now: crate::Operation) -> Option<Operation> {
            match now {
                $(crate::Operation::$op => Some(Operation::$op),)+
                _ => None,
            }
        }

        /// The failure as a module of this release sees it; `None` for an
        /// operation it has no name for.
        pub fn failure(f: &crate::Failure) -> Option<Failure> {
            Some(Failure {
                operation: operation(f.operation)?,
                code: code(f.code),
                message: f.message.clone(),
                attempt: f.attempt,
                elapsed_ms: f.elapsed_ms,
                driver: f.driver.clone(),
                settings: f.settings.clone(),
            })
        }

        fn code(now: crate::Code) -> Code {
            use crate::Code as Now;
            match now {
                Now::Cancelled => Code::Cancelled,
                Now::Unknown => Code::Unknown,
                Now::InvalidArgument => Code::InvalidArgument,
                Now::DeadlineExceeded => Code::DeadlineExceeded,
                Now::NotFound => Code::NotFound,
                Now::AlreadyExists => Code::AlreadyExists,
                Now::PermissionDenied => Code::PermissionDenied,
                Now::ResourceExhausted => Code::ResourceExhausted,
                Now::FailedPrecondition => Code::FailedPrecondition,
                Now::Aborted => Code::Aborted,
                Now::OutOfRange => Code::OutOfRange,
                Now::Unimplemented => Code::Unimplemented,
                Now::Internal => Code::Internal,
                Now::Unavailable => Code::Unavailable,
                Now::DataLoss => Code::DataLoss,
                Now::Unauthenticated => Code::Unauthenticated,
            }
        }
    };
}

/// The released `berth:policy@0.1.0`, for modules built against it. Its
/// naming types and placement request are the same as today's (so today's
/// Rust types are used for them); `operation` has fewer cases, and placement
/// takes and gives records, one per node, instead of columns.
pub mod v0_1 {
    mod generated {
        wasmtime::component::bindgen!({
            path: "../../wit/0.1.0",
            world: "policy",
        });
    }

    use generated::berth::policy::types::Health;
    pub use generated::berth::policy::types::Operation;
    pub use generated::exports::berth::policy::placement::{Candidate, Candidates, Verdict};
    pub use generated::exports::berth::policy::retry::Failure;

    /// The candidates as a 0.1.0 module takes them: one record per node.
    pub fn candidates(c: &crate::Candidates) -> Candidates {
        let cols = &c.columns;
        let nodes = (0..c.len())
            .map(|i| Candidate {
                name: c.names[i].clone(),
                topology: cols.topology[i],
                labels: cols.labels[i],
                max_volumes: cols.max_volumes_of(i),
                published_volumes: cols.published_volumes[i],
                health: match cols.health_of(i) {
                    super::Health::Healthy => Health::Healthy,
                    super::Health::Unhealthy => Health::Unhealthy,
                    super::Health::Unknown => Health::Unknown,
                },
            })
            .collect();
        Candidates {
            topologies: (0..cols.topology_count())
                .map(|t| cols.topology(t).to_pairs())
                .collect(),
            label_sets: (0..cols.label_set_count())
                .map(|s| cols.label_set(s).to_pairs())
                .collect(),
            nodes,
        }
    }

    /// A 0.1.0 module's verdicts as columns. 0.1.0 gave every node a reason;
    /// only refused nodes' reasons are kept, as 0.2.0 sends them.
    pub fn verdicts(old: &[Verdict]) -> super::Verdicts {
        let mut v = crate::VerdictsBuilder::new(old.len());
        for (i, verdict) in old.iter().enumerate() {
            v.score(i, verdict.score);
            if !verdict.eligible {
                v.refuse(i, &verdict.reason);
            }
        }
        v.finish()
    }

    pub use generated::berth::policy::types::Code;

    older_failure!(
        CreateVolume,
        DeleteVolume,
        ControllerPublishVolume,
        ControllerUnpublishVolume,
        NodeStageVolume,
        NodeUnstageVolume,
        NodePublishVolume,
        NodeUnpublishVolume,
    );
}

/// The released `berth:policy@0.2.0`: the same as today's but for
/// `operation`, which has fewer cases, so only a retry module's failure
/// differs.
pub mod v0_2 {
    mod generated {
        wasmtime::component::bindgen!({
            path: "../../wit/0.2.0",
            world: "policy",
        });
    }

    pub use generated::berth::policy::types::{Code, Operation};
    pub use generated::exports::berth::policy::retry::Failure;

    older_failure!(
        CreateVolume,
        DeleteVolume,
        ControllerPublishVolume,
        ControllerUnpublishVolume,
        NodeStageVolume,
        NodeUnstageVolume,
        NodePublishVolume,
        NodeUnpublishVolume,
        ControllerExpandVolume,
        NodeExpandVolume,
        CreateSnapshot,
        DeleteSnapshot,
    );
}

/// The WIT package this host implements.
pub const PACKAGE: &str = "berth:policy";
pub const PACKAGE_VERSION: &str = "0.4.0";

/// A release of the package a module was built against: every one listed
/// here loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Contract {
    V0_1,
    V0_2,
    /// Naming, placement and retry as 0.4.0's.
    V0_3,
    /// Adds admission.
    V0_4,
}

impl Contract {
    pub const ALL: [Contract; 4] = [Contract::V0_1, Contract::V0_2, Contract::V0_3, Contract::V0_4];

    /// The version in export and import names, e.g. `0.3.0`.
    pub fn version(self) -> &'static str {
        match self {
            Contract::V0_1 => "0.1.0",
            Contract::V0_2 => "0.2.0",
            Contract::V0_3 => "0.3.0",
            Contract::V0_4 => PACKAGE_VERSION,
        }
    }

    /// The contract of a version in an export or import name: 0.x.y is
    /// compatible with 0.x.0 (semver for 0.x releases).
    pub fn of_version(version: &str) -> Option<Contract> {
        Contract::ALL.into_iter().find(|c| {
            let minor = c.version().trim_end_matches(|ch: char| ch != '.');
            version.starts_with(minor)
        })
    }

    /// Whether modules of this contract can be asked about `operation`.
    pub fn knows(self, operation: Operation) -> bool {
        match self {
            Contract::V0_1 => v0_1::operation(operation).is_some(),
            Contract::V0_2 => v0_2::operation(operation).is_some(),
            Contract::V0_3 | Contract::V0_4 => true,
        }
    }

    /// Whether modules of this contract may export `decision`.
    pub fn has(self, decision: crate::Decision) -> bool {
        decision != crate::Decision::Admission || self >= Contract::V0_4
    }
}

impl std::fmt::Display for Contract {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{PACKAGE}@{}", self.version())
    }
}

/// Kebab-case names of a WIT enum, as written in the WIT and in case files.
/// A name that is not one of a WIT enum's (or of the gRPC codes).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what} {name:?} is not one of {known:?}")]
pub struct UnknownName {
    pub what: &'static str,
    pub name: String,
    pub known: Vec<&'static str>,
}

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
            pub fn from_wit_name(name: &str) -> Result<$t, UnknownName> {
                Self::NAMES.iter().find(|(n, _)| *n == name).map(|(_, v)| *v).ok_or_else(|| UnknownName {
                    what: $what,
                    name: name.to_string(),
                    known: Self::NAMES.iter().map(|(n, _)| *n).collect(),
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
        ("controller-expand-volume", ControllerExpandVolume),
        ("node-expand-volume", NodeExpandVolume),
        ("create-snapshot", CreateSnapshot),
        ("delete-snapshot", DeleteSnapshot),
        ("controller-modify-volume", ControllerModifyVolume),
        ("create-volume-group-snapshot", CreateVolumeGroupSnapshot),
        ("delete-volume-group-snapshot", DeleteVolumeGroupSnapshot),
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
    pub fn from_name(name: &str) -> Result<Code, UnknownName> {
        berth_proto::code::from_name(name)
            .and_then(Code::from_grpc)
            .ok_or_else(|| UnknownName {
                what: "gRPC error code",
                name: name.to_string(),
                known: berth_proto::code::failure_names().collect(),
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

crate::shared::operation_names!();
