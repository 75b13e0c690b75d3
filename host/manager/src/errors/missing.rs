//! What a request named that does not exist: the API's NOT_FOUND, each
//! kind with the name it was asked by (echoed safely when shown).

use berth_model::text::echo;

#[derive(Debug, thiserror::Error)]
pub enum Missing {
    #[error("no volume named {}", echo(.0))]
    Volume(String),
    /// A volume gone between being found and being changed.
    #[error("volume {0} no longer exists")]
    VolumeId(String),
    /// Docker's view of the volumes: only its node's own.
    #[error("no volume named {} in node {node}'s Docker scope", echo(volume))]
    InDockerScope { volume: String, node: String },
    #[error("plugin {plugin:?} has no volume {}", echo(volume_id))]
    OnPlugin { plugin: String, volume_id: String },
    #[error("no snapshot named {}", echo(.0))]
    Snapshot(String),
    #[error("no group snapshot named {}", echo(.0))]
    Group(String),
    #[error("group snapshot {} has no volume named {}", echo(group), echo(volume))]
    GroupMember { group: String, volume: String },
    #[error("no node named {}", echo(.0))]
    Node(String),
    #[error("no plugin named {}", echo(.0))]
    Plugin(String),
    #[error("no live join token {} (`berth cluster token list`)", echo(.0))]
    JoinToken(String),
}
