//! The sample plugin driven directly, without Berth: the same plugin
//! processes, and for each volume the calls Berth makes, with the paths and
//! capability it uses. What this reaches is the plugin's own speed, the
//! limit Berth's throughput is measured against. It talks to them with
//! Berth's own CSI client, so both sides pay the same for a call.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use berth::csi::{ClientOptions, CsiClient, CsiError, Endpoint, proto};

use crate::cluster::{spawn_plugins, volumes_dir_in};
use crate::{ClusterSpec, Plugin, test_dir};

/// The plugin processes of a [`ClusterSpec`] (controller and node plugins),
/// with no Berth in front of them.
pub struct Direct {
    _dir: tempfile::TempDir,
    volumes_dir: PathBuf,
    own_volumes_dir: bool,
    controller_plugin: Plugin,
    controller: CsiClient,
    /// (node name, its plugin's client), in node order.
    nodes: Vec<(String, CsiClient, Plugin)>,
    zone: String,
}

/// Why a volume driven directly did not get through.
#[derive(Debug)]
pub enum DirectError {
    Csi(CsiError),
    /// Making a staging or target directory, which CSI leaves to the caller.
    Io(std::io::Error),
    /// CreateVolume answered without a volume.
    NoVolume,
}

impl From<CsiError> for DirectError {
    fn from(e: CsiError) -> DirectError {
        DirectError::Csi(e)
    }
}

impl From<std::io::Error> for DirectError {
    fn from(e: std::io::Error) -> DirectError {
        DirectError::Io(e)
    }
}

impl std::fmt::Display for DirectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DirectError::Csi(e) => e.fmt(f),
            DirectError::Io(e) => write!(f, "making a node directory: {e}"),
            DirectError::NoVolume => f.write_str("CreateVolume answered without a volume"),
        }
    }
}

/// What CreateVolume and ControllerPublishVolume answered, for the node calls.
pub struct Created {
    volume_id: String,
    volume_context: HashMap<String, String>,
    publish_context: HashMap<String, String>,
    node: usize,
    berth_id: String,
}

fn capability() -> proto::VolumeCapability {
    use proto::volume_capability::{AccessMode, AccessType, MountVolume, access_mode::Mode};
    proto::VolumeCapability {
        access_type: Some(AccessType::Mount(MountVolume::default())),
        access_mode: Some(AccessMode {
            mode: Mode::SingleNodeWriter as i32,
        }),
    }
}

impl Direct {
    /// Starts the plugin processes as [`crate::Cluster::start`] would.
    pub fn start(spec: ClusterSpec) -> Direct {
        let dir = test_dir();
        let volumes_dir = volumes_dir_in(dir.path(), &spec);
        let (controller, plugins) = spawn_plugins(dir.path(), &volumes_dir, &spec);
        let nodes = spec
            .nodes
            .iter()
            .zip(plugins)
            .map(|((name, _), p)| {
                let client = client(&p.socket);
                (name.to_string(), client, p)
            })
            .collect();
        Direct {
            controller: client(&controller.socket),
            controller_plugin: controller,
            _dir: dir,
            own_volumes_dir: spec.volumes_dir.is_some(),
            nodes,
            zone: spec.controller_topology.unwrap_or("zone=a").to_string(),
            volumes_dir,
        }
    }

    fn node_dir(&self, node: usize) -> PathBuf {
        self.volumes_dir.join("nodes").join(&self.nodes[node].0)
    }

    fn staging(&self, c: &Created) -> PathBuf {
        self.node_dir(c.node).join("staging").join(&c.berth_id)
    }

    fn target(&self, c: &Created) -> PathBuf {
        self.node_dir(c.node).join("publish").join(&c.berth_id)
    }

    fn topology(&self) -> proto::TopologyRequirement {
        let (key, value) = self.zone.split_once('=').expect("a topology segment key=value");
        let t = proto::Topology {
            segments: [(key.to_string(), value.to_string())].into(),
        };
        proto::TopologyRequirement {
            requisite: vec![t.clone()],
            preferred: vec![t],
        }
    }

    /// CreateVolume, ControllerPublishVolume, NodeStageVolume and
    /// NodePublishVolume of volume `i` on node `node`, one after the other.
    pub async fn create_and_publish(&self, i: usize, node: usize) -> Result<Created, DirectError> {
        let ctl = &self.controller;
        let volume = ctl
            .create_volume(proto::CreateVolumeRequest {
                name: format!("vol-{i:06}"),
                capacity_range: Some(proto::CapacityRange {
                    required_bytes: 1 << 20,
                    limit_bytes: 0,
                }),
                volume_capabilities: vec![capability()],
                accessibility_requirements: Some(self.topology()),
                ..Default::default()
            })
            .await?
            .volume
            .ok_or(DirectError::NoVolume)?;
        let (name, node_client) = (self.nodes[node].0.clone(), &self.nodes[node].1);
        let publish_context = ctl
            .controller_publish_volume(proto::ControllerPublishVolumeRequest {
                volume_id: volume.volume_id.clone(),
                node_id: name,
                volume_capability: Some(capability()),
                readonly: false,
                volume_context: volume.volume_context.clone(),
                ..Default::default()
            })
            .await?
            .publish_context;
        let c = Created {
            berth_id: format!("direct-{i:06}"),
            volume_id: volume.volume_id,
            volume_context: volume.volume_context,
            publish_context,
            node,
        };
        let staging = self.staging(&c);
        std::fs::create_dir_all(&staging)?;
        node_client
            .node_stage_volume(proto::NodeStageVolumeRequest {
                volume_id: c.volume_id.clone(),
                publish_context: c.publish_context.clone(),
                staging_target_path: path(&staging),
                volume_capability: Some(capability()),
                volume_context: c.volume_context.clone(),
                ..Default::default()
            })
            .await?;
        let target = self.target(&c);
        std::fs::create_dir_all(target.parent().expect("a parent"))?;
        node_client
            .node_publish_volume(proto::NodePublishVolumeRequest {
                volume_id: c.volume_id.clone(),
                publish_context: c.publish_context.clone(),
                staging_target_path: path(&staging),
                target_path: path(&target),
                volume_capability: Some(capability()),
                readonly: false,
                volume_context: c.volume_context.clone(),
                ..Default::default()
            })
            .await?;
        Ok(c)
    }

    /// NodeUnpublishVolume, NodeUnstageVolume, ControllerUnpublishVolume and
    /// DeleteVolume, one after the other.
    pub async fn unpublish_and_delete(&self, c: Created) -> Result<(), DirectError> {
        let (name, node_client) = (self.nodes[c.node].0.clone(), &self.nodes[c.node].1);
        node_client
            .node_unpublish_volume(proto::NodeUnpublishVolumeRequest {
                volume_id: c.volume_id.clone(),
                target_path: path(&self.target(&c)),
            })
            .await?;
        let staging = self.staging(&c);
        node_client
            .node_unstage_volume(proto::NodeUnstageVolumeRequest {
                volume_id: c.volume_id.clone(),
                staging_target_path: path(&staging),
            })
            .await?;
        let _ = std::fs::remove_dir(&staging);
        let ctl = &self.controller;
        ctl.controller_unpublish_volume(proto::ControllerUnpublishVolumeRequest {
            volume_id: c.volume_id.clone(),
            node_id: name,
            secrets: Default::default(),
        })
        .await?;
        ctl.delete_volume(proto::DeleteVolumeRequest {
            volume_id: c.volume_id,
            secrets: Default::default(),
        })
        .await?;
        Ok(())
    }

    /// The plugin processes, for counting their CPU time.
    pub fn pids(&self) -> Vec<u32> {
        std::iter::once(&self.controller_plugin)
            .chain(self.nodes.iter().map(|(_, _, p)| p))
            .filter_map(Plugin::pid)
            .collect()
    }

    /// Volumes the plugin holds (its records on disk).
    pub fn plugin_volumes(&self) -> usize {
        crate::cluster::plugin_records(&self.volumes_dir, "volumes")
    }
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

fn client(socket: &Path) -> CsiClient {
    let endpoint = Endpoint::parse(&socket.display().to_string()).expect("a plugin socket path");
    CsiClient::lazy(endpoint, ClientOptions::default())
}

impl Drop for Direct {
    fn drop(&mut self) {
        if self.own_volumes_dir {
            let _ = std::fs::remove_dir_all(&self.volumes_dir);
        }
    }
}
