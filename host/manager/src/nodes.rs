//! Nodes as the manager sees them: node-side operations (up to published,
//! down to nothing, expand, stats), each node's plugins, and
//! whether its agent is there. The cluster directory (`crate::cluster`)
//! implements it: every node, in-process or remote, is served by an agent.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::SystemTime;

use serde::Serialize;

use berth_proto::berth::v1 as wire;

use berth_csi::CsiError;
use berth_csi::proto;
use berth_csi::registry::PluginStatus;
use berth_store::NodeRecord;

/// What a node operation needs besides the paths, which the agent owns.
pub struct NodeVolume {
    pub volume_id: String,
    /// Berth's id, used to name the volume's paths on the node.
    pub berth_id: String,
    pub capability: proto::VolumeCapability,
    pub publish_context: HashMap<String, String>,
    pub volume_context: HashMap<String, String>,
    pub secrets: HashMap<String, String>,
    pub readonly: bool,
}

/// Whether a node's agent is there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeState {
    /// Connected, and heard from within the heartbeat timeout.
    Ready,
    /// Was connected; silent or gone since.
    Down,
    /// Not heard from since this server started.
    Unknown,
    /// Declared dead by an operator; its agent is refused.
    Forgotten,
}

impl NodeState {
    pub const ALL: [NodeState; 4] = [
        NodeState::Ready,
        NodeState::Down,
        NodeState::Unknown,
        NodeState::Forgotten,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Ready => "ready",
            NodeState::Down => "down",
            NodeState::Unknown => "unknown",
            NodeState::Forgotten => "forgotten",
        }
    }
}

#[derive(Clone, Debug)]
pub struct NodeSummary {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub state: NodeState,
    pub last_seen: Option<SystemTime>,
    /// The node plugins its agent reported, by the operator's plugin name.
    pub plugins: BTreeMap<String, PluginStatus>,
    /// Left out of placement while its publications are undone.
    pub draining: bool,
}

/// What the manager does when a node (re)registers.
#[tonic::async_trait]
pub trait NodeSync: Send + Sync {
    /// The node's complete desired set, given what it holds. Records the
    /// node no longer backs are lowered here.
    async fn desired_set(&self, node: &str, held: &[wire::Held]) -> Vec<wire::Desired>;
    /// The node takes operations again: its volumes are worth another look.
    fn node_ready(&self, node: &str);
    /// A node new to the server, or with new labels or plugins: remembered
    /// durably, so a restarted server knows it before its agent is back.
    async fn remember(&self, node: NodeRecord);
}

#[tonic::async_trait]
pub trait NodeAgent: Send + Sync {
    /// Marks a node draining (or not), or forgotten; the node as it is now
    /// to be remembered. `None` when there is no such node.
    fn mark(&self, node: &str, draining: Option<bool>, forgotten: bool) -> Option<NodeRecord>;
    /// The node as the store keeps it, when it is known.
    fn node_record(&self, node: &str) -> Option<NodeRecord>;
    /// Drops a node; its agent's session ends.
    fn remove(&self, node: &str);
    /// Every node known, by name.
    fn nodes(&self) -> Vec<NodeSummary>;
    fn node(&self, node: &str) -> Option<NodeSummary>;
    /// The node plugin of `plugin` on `node`, as its agent last reported it.
    fn plugin_status(&self, node: &str, plugin: &str) -> Option<PluginStatus>;
    /// Whether node operations can be sent to the node now.
    fn connected(&self, node: &str) -> bool;
    /// Declared dead: node-side steps there are skipped.
    fn forgotten(&self, node: &str) -> bool;
    fn staging_path(&self, node: &str, berth_id: &str) -> PathBuf;
    fn target_path(&self, node: &str, berth_id: &str) -> PathBuf;
    /// Has the node stage (when `staged`) and publish the volume: answered
    /// once it is published, or with the call that failed.
    async fn publish(&self, node: &str, plugin: &str, v: NodeVolume, staged: bool) -> Result<(), CsiError>;
    /// Has the node unpublish and unstage the volume: answered once it holds
    /// nothing of it, or with the call that failed.
    async fn unpublish(
        &self,
        node: &str,
        plugin: &str,
        volume_id: &str,
        berth_id: &str,
    ) -> Result<(), CsiError>;
    /// NodeExpandVolume at the volume's target path; the node's new capacity.
    async fn expand(
        &self,
        node: &str,
        plugin: &str,
        v: NodeVolume,
        staged: bool,
        range: proto::CapacityRange,
    ) -> Result<i64, CsiError>;
    /// NodeGetVolumeStats at the volume's target path.
    async fn stats(
        &self,
        node: &str,
        plugin: &str,
        volume_id: &str,
        berth_id: &str,
        staged: bool,
    ) -> Result<proto::NodeGetVolumeStatsResponse, CsiError>;
}
