//! `berth agent`: the node side, one per node (the same command as the
//! `berth-agent` binary, which links no policy engine).

pub use berth::agent::command::{AgentArgs, run};
