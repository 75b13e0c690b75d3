//! The server: what `berth serve` runs (`serve`), the election among
//! several servers on etcd (`leadership`) and the Berth API (`api`), wired
//! from the crates below, which it re-exports under their short names.
//!
//! See ARCHITECTURE.md at the repository root for the map.

pub use berth_acl as acl;
pub use berth_agent as agent;
pub mod api;
pub use berth_cluster as cluster;
pub use berth_config as config;
pub use berth_csi as csi;
pub mod leadership;
pub use berth_manager as manager;
pub use berth_metrics as metrics;
pub use berth_model as model;
pub use berth_oci as oci;
pub use berth_policy as policy;
pub mod serve;
pub use berth_store as store;

#[cfg(test)]
mod core_tests;
