//! The server's side of the cluster: every node's agent, whether it runs in
//! this process (a `[[node]]` in `berth.toml`) or on its node (`berth agent`).
//!
//! - `directory` — the nodes and their sessions (`directory/operations.rs`: node operations
//!   and calls sent down a session, settled by the agent);
//! - `node_agent` — the manager's `NodeAgent` on the directory; `node_ids` — which node each
//!   CSI node id is;
//! - `session` — one agent's session, from registration to its end; `claims` — what an agent
//!   may claim about its node, checked as the claim arrives;
//! - `pace` — a large fleet's heartbeats spread out to what the server takes;
//! - `service` — the `Cluster` gRPC service agents dial, and the in-process link;
//! - `tokens` — join tokens: stored hashed, bound to a node or counted, revocable;
//! - `pki` — the cluster's certificate authority; `kek` — the key that seals its key in etcd.

mod claims;
pub mod directory;
pub mod kek;
mod node_agent;
mod node_ids;
pub mod pace;
pub mod pki;
pub mod service;
pub mod session;
pub mod tokens;

pub use berth_manager::nodes::NodeSync;
pub use directory::Directory;

#[cfg(test)]
mod session_tests;
