//! One module per subcommand of `berth`, as `cli` dispatches to them. A
//! command that talks to `berth serve` goes through `crate::client`; what
//! it prints goes through `crate::output`.

pub mod acl;
pub mod agent;
pub mod audit;
pub mod cluster;
pub mod manual;
pub mod namespace;
pub mod node;
pub mod plugin;
pub mod policy;
pub mod serve;
pub mod snapshot;
pub mod status;
pub mod store;
pub mod volume;
