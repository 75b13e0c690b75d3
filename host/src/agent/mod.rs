//! The node side of Berth: what a node knows for itself. Today, checking the
//! paths Berth published against the node's mount table.

pub mod mounts;
