//! Berth: a CSI volume manager whose policy is pluggable through sandboxed
//! WebAssembly components.
//!
//! See ARCHITECTURE.md at the repository root for the map of this crate.

pub mod agent;
pub mod allocator;
pub mod api;
pub mod cluster;
pub mod config;
pub mod credentials;
pub mod csi;
pub mod leadership;
pub mod listener;
pub mod manager;
pub mod metrics;
pub use berth_model as model;
pub mod policy;
pub mod secrets;
pub mod serve;
pub mod store;
pub mod text;
pub mod units;

#[cfg(test)]
mod tidy;
