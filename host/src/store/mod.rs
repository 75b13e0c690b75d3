//! Durable state behind one trait, so the manager does not know which engine
//! keeps it. [`RedbStore`] (one file on this machine) is the default.
//!
//! A store records the schema version its records are written in. A store
//! written before versions were recorded is version 1; a store from a newer
//! release (a higher version) is refused at open, never rewritten.

mod committer;
mod embedded;
mod etcd;

use std::path::PathBuf;

use crate::model::VolumeRecord;

pub(crate) use committer::{Change, Committer};
pub use embedded::RedbStore;
pub(crate) use embedded::{private_dir, private_file};
pub use etcd::{DEPOSED, EtcdSettings, EtcdStore, Fence};
pub(crate) use etcd::{Members, range_all, unavailable};

/// The record format this release reads and writes.
pub const SCHEMA_VERSION: u64 = 1;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("opening the store {path}: {message}")]
    Open { path: PathBuf, message: String },
    #[error(
        "the store {path} was written by a newer release of Berth (schema version {found}; this release reads up to {supported}): run that release, or restore a backup made by this one; the store was not changed"
    )]
    NewerSchema {
        path: PathBuf,
        found: u64,
        supported: u64,
    },
    #[error("volume {id} in the store is unreadable: {message}")]
    Unreadable { id: String, message: String },
    #[error("encoding volume {id}: {message}")]
    Encode { id: String, message: String },
    #[error("etcd ({endpoints}): {message}")]
    Etcd { endpoints: String, message: String },
    #[error("the store is closed")]
    Closed,
    #[error("the store failed: {0}")]
    Failed(String),
}

/// A node that has registered, kept so a restarted server still knows it
/// (shown as unknown until its agent is back).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NodeRecord {
    pub name: String,
    #[serde(default)]
    pub labels: std::collections::BTreeMap<String, String>,
    /// The node plugins it reported, by the operator's plugin name, with
    /// what NodeGetInfo said (kept so ControllerUnpublish has the node id
    /// while the agent is away).
    #[serde(default)]
    pub plugins: std::collections::BTreeMap<String, Option<crate::csi::fingerprint::NodeInfo>>,
    /// Left out of placement, its publications undone (`berth node drain`).
    #[serde(default)]
    pub draining: bool,
    /// Declared dead (`berth node forget --force`): node-side steps are
    /// skipped, and its agent is refused until the node is removed.
    #[serde(default)]
    pub forgotten: bool,
    /// The SHA-256 fingerprint of the certificate the node joined with; the
    /// only one its agent is let in with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert: Option<String>,
    /// Where the node's agent stages and publishes, as it last registered:
    /// volumes show their paths while the agent is away.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paths: Option<crate::agent::calls::Paths>,
}

/// Where volume records live. Writes return once durable; concurrent writes
/// may share one commit.
#[tonic::async_trait]
pub trait Store: Send + Sync {
    /// Every stored volume (at start).
    fn load(&self) -> Result<Vec<VolumeRecord>, StoreError>;
    /// Stores a record, replacing the one with its id.
    async fn put(&self, record: &VolumeRecord) -> Result<(), StoreError>;
    /// Removes a record; removing one that is not there is not an error.
    async fn remove(&self, id: &str) -> Result<(), StoreError>;
    /// Every registered node (at start).
    fn load_nodes(&self) -> Result<Vec<NodeRecord>, StoreError>;
    /// Stores a node, replacing the one with its name.
    async fn put_node(&self, node: &NodeRecord) -> Result<(), StoreError>;
    /// Forgets a node; removing one that is not there is not an error.
    async fn remove_node(&self, name: &str) -> Result<(), StoreError>;
}

/// A record's stored form.
pub(crate) fn encode(record: &VolumeRecord) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(record).map_err(|e| StoreError::Encode {
        id: record.id.clone(),
        message: e.to_string(),
    })
}

pub(crate) fn decode(id: &str, bytes: &[u8]) -> Result<VolumeRecord, StoreError> {
    serde_json::from_slice(bytes).map_err(|e| StoreError::Unreadable {
        id: id.to_string(),
        message: e.to_string(),
    })
}
