//! Why a request cannot be done in the state things are in: the API's
//! FAILED_PRECONDITION, each with what stands in the way.

use berth_model::text::echo;

#[derive(Debug, thiserror::Error)]
pub enum Conflict {
    #[error("volume {} is being deleted", echo(.0))]
    VolumeDeleting(String),
    #[error("snapshot {} is being deleted", echo(.0))]
    SnapshotDeleting(String),
    #[error("group snapshot {} is being deleted", echo(.0))]
    GroupDeleting(String),
    /// A snapshot (or group snapshot) asked to restore from before it is cut.
    #[error("snapshot {} is {state}, not ready to restore", echo(name))]
    SnapshotNotReady { name: String, state: String },
    #[error("volume {} is {state}, not a volume to clone", echo(name))]
    NotToClone { name: String, state: String },
    #[error("volume {} is {state}, not a volume to snapshot", echo(name))]
    NotToSnapshot { name: String, state: String },
    #[error("volume {} is not created yet", echo(.0))]
    NotCreated(String),
    /// Its CreateVolume went out unanswered: asked again, it must ask for
    /// what it asked the first time, so the change waits for the answer.
    #[error(
        "volume {} is being created (the plugin has not answered yet): change it once it is available",
        echo(.0)
    )]
    BeingCreated(String),
    /// A publish naming no node, for a volume placement cannot see yet.
    #[error(
        "volume {} is still {state}: name a node, or publish once it is available",
        echo(name)
    )]
    NotAvailable { name: String, state: String },
    #[error(
        "volume {} has snapshot {}: delete its snapshots first",
        echo(volume),
        echo(snapshot)
    )]
    HasSnapshot { volume: String, snapshot: String },
    #[error(
        "volume {} is in {count} group snapshot(s): delete them first (berth snapshot groups)",
        echo(volume)
    )]
    InGroups { volume: String, count: u32 },
    #[error("volume {} is {mode} and already published to another node", echo(volume))]
    PublishedElsewhere { volume: String, mode: String },
    /// A conformance report recorded for a plugin whose socket answers for
    /// another driver: the check ran against something else.
    #[error(
        "the check ran against driver {}, but plugin {} is driver {}: check the plugin's own socket",
        echo(checked),
        echo(plugin),
        echo(serves)
    )]
    CheckedAnotherDriver {
        plugin: String,
        checked: String,
        serves: String,
    },
    #[error(
        "{count} volume(s) are still published on {node:?} (e.g. {}): drain it, or forget it if it is dead",
        echo(first)
    )]
    NodeHolds {
        node: String,
        count: usize,
        first: String,
    },
    #[error("volume {}: {why}", echo(volume))]
    Unforgettable { volume: String, why: Unforgettable },
}

/// Why Berth will not forget a volume (drop its record, leaving the plugin's volume).
#[derive(Debug, thiserror::Error)]
pub enum Unforgettable {
    #[error("it is published on {0:?} (or being undone there): unpublish it first")]
    Published(String),
    #[error("it has snapshot {}: delete its snapshots first", echo(.0))]
    HasSnapshot(String),
    #[error("it may be being created on the plugin: wait until it is, or delete it")]
    MayBeCreating,
}
