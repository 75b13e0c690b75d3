//! The `berth` crate's library: the server and every part of Berth under
//! their short names (`berth::manager`, `berth::csi`, ...), for the binary
//! and the tests. The parts are crates of their own; see ARCHITECTURE.md.

pub use berth_server::*;
