//! Berth: a CSI volume manager whose policy is pluggable through sandboxed
//! WebAssembly components.
//!
//! See ARCHITECTURE.md at the repository root for the map of this crate.

pub use berth_agent as agent;
pub mod api;
pub use berth_cluster as cluster;
pub use berth_config as config;
pub use berth_csi as csi;
pub mod leadership;
pub use berth_manager as manager;
pub use berth_metrics as metrics;
pub use berth_model as model;
pub use berth_policy as policy;
pub mod serve;
pub use berth_store as store;

#[cfg(test)]
mod paused;
#[cfg(test)]
mod tidy;
