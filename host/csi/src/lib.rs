//! Talking to CSI plugins: endpoints, the gRPC client with deadlines, errors
//! that keep the plugin's gRPC status, fingerprinting and the plugin registry.

mod channel;
mod client;
mod endpoint;
mod error;
pub mod fingerprint;
mod grpc_frame;
pub mod registry;

pub use berth_proto::csi::v1 as proto;
pub use channel::{PluginChannel, StreamBody};
pub use client::{ClientOptions, CsiClient, unix_channel};
pub use endpoint::{Endpoint, EndpointError};
pub use error::error_chain;
pub use error::{CallError, ChannelError, CsiError, Failure};
pub use fingerprint::Fingerprint;

/// The CSI spec's default for how long one RPC may take before the CO gives up on it.
pub const DEFAULT_DEADLINE: std::time::Duration = std::time::Duration::from_secs(15);
