//! Berth: a CSI volume manager whose policy is pluggable through sandboxed
//! WebAssembly components.
//!
//! See ARCHITECTURE.md at the repository root for the map of this crate.

pub mod csi;
pub mod policy;
pub mod units;
