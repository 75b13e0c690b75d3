//! Write Berth policy modules in Rust.
//!
//! A policy is a type that implements one or more of [`Naming`], [`Placement`],
//! [`Retry`] and [`Admission`], exported with the matching macro. Build it with
//! `cargo build --target wasm32-wasip2 --release`; the `.wasm` is a component
//! Berth loads directly.
//!
//! ```ignore
//! use berth_guest::{Naming, NamingRequest};
//!
//! struct Prefixed;
//!
//! impl Naming for Prefixed {
//!     fn volume_name(request: NamingRequest) -> Result<String, String> {
//!         Ok(format!("team-a-{}", request.volume.name))
//!     }
//! }
//!
//! berth_guest::export_naming!(Prefixed);
//! ```
//!
//! The trait methods are plain Rust functions, so a policy is unit-tested
//! natively with `cargo test`: build inputs with [`testing`] and call
//! `Prefixed::volume_name(...)` directly.
//!
//! The contract itself, with every type and field documented, is the WIT
//! package in `wit/` at the root of the Berth repository.

// Lets the generated code name this crate the way guest crates do.
extern crate self as berth_guest;

pub mod alloc;
mod columns;
mod helpers;
mod shared;
pub mod testing;

// Only inside the component: native unit tests keep the standard allocator.
#[cfg(all(target_arch = "wasm32", feature = "bump-allocator"))]
#[global_allocator]
static ALLOCATOR: alloc::BumpAllocator = alloc::BumpAllocator::new();

pub use columns::Segments;
pub use helpers::*;

#[doc(hidden)]
pub use wit_bindgen;

/// Bindings for the `naming-policy` world. Also home of the shared types.
pub mod naming {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "naming-policy",
        pub_export_macro: true,
        export_macro_name: "export_naming",
        default_bindings_module: "berth_guest::naming",
        runtime_path: "berth_guest::wit_bindgen::rt",
        additional_derives: [PartialEq],
    });
}

/// Bindings for the `placement-policy` world.
pub mod placement {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "placement-policy",
        pub_export_macro: true,
        export_macro_name: "export_placement",
        default_bindings_module: "berth_guest::placement",
        runtime_path: "berth_guest::wit_bindgen::rt",
        additional_derives: [PartialEq],
        with: { "berth:policy/types@0.4.0": crate::naming::berth::policy::types },
    });
}

/// Bindings for the `retry-policy` world.
pub mod retry {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "retry-policy",
        pub_export_macro: true,
        export_macro_name: "export_retry",
        default_bindings_module: "berth_guest::retry",
        runtime_path: "berth_guest::wit_bindgen::rt",
        additional_derives: [PartialEq],
        with: { "berth:policy/types@0.4.0": crate::naming::berth::policy::types },
    });
}

/// Bindings for the `admission-policy` world.
pub mod admission {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "admission-policy",
        pub_export_macro: true,
        export_macro_name: "export_admission",
        default_bindings_module: "berth_guest::admission",
        runtime_path: "berth_guest::wit_bindgen::rt",
        additional_derives: [PartialEq],
        with: { "berth:policy/types@0.4.0": crate::naming::berth::policy::types },
    });
}

/// Admits, refuses or completes requests. Export with [`export_admission!`].
pub use admission::exports::berth::policy::admission::Guest as Admission;
pub use admission::exports::berth::policy::admission::{
    AdmissionRequest, Call, Caller, Change, FieldChange, Usage, Verdict,
};
pub use naming::berth::policy::types::{
    AccessMode, AccessType, CapacityRange, Code, Health, Operation, Pairs, Volume,
};
/// Decides the name a volume gets on the backend. Export with [`export_naming!`].
pub use naming::exports::berth::policy::naming::Guest as Naming;
pub use naming::exports::berth::policy::naming::NamingRequest;
/// Filters and ranks candidate nodes. Export with [`export_placement!`].
pub use placement::exports::berth::policy::placement::Guest as Placement;
pub use placement::exports::berth::policy::placement::{Candidates, PlacementRequest, Purpose, Verdicts};
/// Classifies failed CSI calls. Export with [`export_retry!`].
pub use retry::exports::berth::policy::retry::Guest as Retry;
pub use retry::exports::berth::policy::retry::{Decision, Failure};

pub use admission::export_admission;
pub use naming::export_naming;
pub use placement::export_placement;
pub use retry::export_retry;
