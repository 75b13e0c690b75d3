//! Questions asked of the plugins on an operator's behalf, changing
//! nothing: a volume's health and usage, and orphans on either side.

use crate::Conflict;
use crate::Missing;
use crate::RequestError;
use crate::Unready;
use crate::requests::Requests;
use berth_csi::proto;
use berth_csi::proto::controller_service_capability::rpc::Type as ControllerCap;
use berth_csi::proto::node_service_capability::rpc::Type as NodeCap;
use berth_model::VolumeState;

/// A volume's health as its plugins tell it now.
#[derive(Debug)]
pub struct Health {
    /// From ControllerGetVolume, or why there is none.
    pub controller: Result<Option<proto::VolumeCondition>, Unasked>,
    pub nodes: Vec<NodeHealth>,
}

#[derive(Debug)]
pub struct NodeHealth {
    pub node: String,
    /// From NodeGetVolumeStats, or why there is none.
    pub stats: Result<proto::NodeGetVolumeStatsResponse, Unasked>,
}

/// Why a part of a volume's health is not known.
#[derive(Debug, thiserror::Error)]
pub enum Unasked {
    #[error(transparent)]
    Failed(#[from] berth_csi::CsiError),
    #[error("no controller")]
    NoController,
    #[error("the {0} plugin is not fingerprinted yet")]
    NotFingerprinted(&'static str),
    #[error("plugin {0:?} does not offer GET_VOLUME with VOLUME_CONDITION")]
    NoCondition(String),
    #[error("the node plugin does not offer GET_VOLUME_STATS")]
    NoStats,
}

/// Both sides of what Berth and a plugin each think exist.
#[derive(Debug, Default)]
pub struct Orphans {
    /// On the plugin, tracked by no Berth volume: (volume id, capacity).
    pub untracked: Vec<(String, i64)>,
    /// Tracked by Berth, gone from the plugin: (name, volume id).
    pub missing: Vec<(String, String)>,
    /// Berth volumes being created, which may be among the untracked.
    pub creating: Vec<String>,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            controller: Ok(None),
            nodes: Vec::new(),
        }
    }
}

impl Requests<'_> {
    pub async fn health(&self, name: &str) -> Result<Health, RequestError> {
        let r = self
            .table
            .by_name(&self.in_namespace(name))
            .ok_or_else(|| Missing::Volume(name.to_string()))?;
        let Some(backend) = &r.backend else {
            return Err(Conflict::NotCreated(name.to_string()).into());
        };
        let plugin = &r.spec.plugin;
        let controller = match (
            self.offers(plugin, ControllerCap::GetVolume),
            self.offers(plugin, ControllerCap::VolumeCondition),
        ) {
            (Some(true), Some(true)) => match self.registry.get(plugin) {
                Some(c) => c
                    .client()
                    .controller_get_volume(proto::ControllerGetVolumeRequest {
                        volume_id: backend.volume_id.clone(),
                    })
                    .await
                    .map(|resp| resp.status.and_then(|s| s.volume_condition))
                    .map_err(Unasked::from),
                None => Err(Unasked::NoController),
            },
            (None, _) => Err(Unasked::NotFingerprinted("controller")),
            _ => Err(Unasked::NoCondition(plugin.clone())),
        };
        let mut nodes = Vec::new();
        let published = r
            .publications
            .iter()
            .filter(|(_, p)| p.wanted && p.node == berth_model::NodeLevel::Published);
        for (node, _) in published {
            let fingerprint = self.nodes.plugin_status(node, plugin).and_then(|s| s.fingerprint);
            let stats = match fingerprint {
                None => Err(Unasked::NotFingerprinted("node")),
                Some(f) if !f.has_node_capability(NodeCap::GetVolumeStats) => Err(Unasked::NoStats),
                Some(f) => self
                    .nodes
                    .stats(
                        node,
                        plugin,
                        &backend.volume_id,
                        &r.id,
                        f.has_node_capability(NodeCap::StageUnstageVolume),
                    )
                    .await
                    .map_err(Unasked::from),
            };
            nodes.push(NodeHealth {
                node: node.clone(),
                stats,
            });
        }
        Ok(Health { controller, nodes })
    }

    /// Compares the plugin's ListVolumes with Berth's volumes of that plugin.
    pub async fn orphans(&self, plugin: &str) -> Result<Orphans, RequestError> {
        if self.config.plugin(plugin).is_none() {
            return Err(Missing::Plugin(plugin.to_string()).into());
        }
        match self.offers(plugin, ControllerCap::ListVolumes) {
            None => {
                return Err(Unready::NotFingerprinted(plugin.to_string()).into());
            }
            Some(false) => {
                return Err(RequestError::Invalid(format!(
                    "plugin {plugin:?} does not offer LIST_VOLUMES: Berth cannot see its volumes"
                )));
            }
            Some(true) => {}
        }
        // Berth's side first: a volume created meanwhile is then seen on
        // the plugin's side as untracked, never as missing.
        let ours: Vec<_> = self
            .table
            .list(None)
            .into_iter()
            .filter(|r| r.spec.plugin == plugin)
            .collect();
        let theirs = self.backend_volumes(plugin).await?;
        let known: std::collections::HashSet<&str> = theirs.iter().map(|v| v.volume_id.as_str()).collect();
        let tracked: std::collections::HashSet<&str> = ours
            .iter()
            .filter_map(|r| r.backend.as_ref().map(|b| b.volume_id.as_str()))
            .collect();
        let mut out = Orphans::default();
        for r in &ours {
            match &r.backend {
                Some(b) if !known.contains(b.volume_id.as_str()) => {
                    out.missing.push((r.spec.name.clone(), b.volume_id.clone()));
                }
                None if r.state() == VolumeState::Creating || r.create_sent => {
                    out.creating.push(r.spec.name.clone())
                }
                _ => {}
            }
        }
        for v in &theirs {
            if !tracked.contains(v.volume_id.as_str()) {
                out.untracked.push((v.volume_id.clone(), v.capacity_bytes));
            }
        }
        out.untracked.sort();
        Ok(out)
    }
}
