//! Policy decisions made by sandboxed WebAssembly components, with native
//! built-in policies as the defaults and the reference.
//!
//! Each configured module is compiled once and pre-instantiated; every
//! decision runs in a fresh instance in its own `Store`, under a memory limit
//! and an epoch deadline, with WASI that grants nothing. A guest that traps,
//! loops, runs out of memory or answers against the contract yields a typed
//! [`PolicyError`] naming the module and the decision; the host never crashes
//! or hangs because of a guest.

mod answer;
mod bindings;
pub mod builtin;
mod candidates;
pub mod cases;
mod compiled;
mod component;
mod engine;
mod error;
pub mod logged;
mod memory;
mod module;
mod module_admission;
mod module_config;
mod policies;
mod policies_admission;
pub mod replay;
pub mod samples;
mod sandbox;
pub mod shadow;
/// What the guest SDK and the engine both say about the contract's types.
#[path = "../../../guests/sdk/src/shared.rs"]
mod shared;
mod warm;

pub use answer::{
    AnswerError, MAX_ADMISSION_CHANGES, MAX_NAME_BYTES, MAX_REASON_BYTES, MAX_RETRY_DELAY_MS,
    admission_call_name, validate_volume_name,
};
pub use bindings::*;
pub use candidates::{Candidates, PlacementNode, Segments, VerdictsBuilder, candidates, ranked, refusals};
pub use engine::{EngineOptions, Footprint, PolicyEngine};
pub use error::{GuestFailure, PolicyError};
pub use module::{Limits, ModuleConfig, OnError, PolicyModule};
pub use policies::{NamingOutcome, Policies, PolicyStats, SetError};

use std::fmt;

/// The decisions Berth delegates to policy modules.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Decision {
    Naming,
    Placement,
    Retry,
    Admission,
}

impl Decision {
    pub const ALL: [Decision; 4] = [
        Decision::Naming,
        Decision::Placement,
        Decision::Retry,
        Decision::Admission,
    ];

    /// The WIT interface that serves the decision, without its version.
    pub fn interface(self) -> &'static str {
        match self {
            Decision::Naming => "naming",
            Decision::Placement => "placement",
            Decision::Retry => "retry",
            Decision::Admission => "admission",
        }
    }

    /// The exported function within that interface.
    pub fn function(self) -> &'static str {
        match self {
            Decision::Naming => "volume-name",
            Decision::Placement => "place",
            Decision::Retry => "classify",
            Decision::Admission => "admit",
        }
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.interface())
    }
}

impl std::str::FromStr for Decision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Decision::ALL
            .into_iter()
            .find(|d| d.interface() == s)
            .ok_or_else(|| format!("unknown decision {s:?}; expected naming, placement, retry or admission"))
    }
}
