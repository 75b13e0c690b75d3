//! The node plugin calls of each step, at the paths the agent owns: the
//! staging path and the target path of a volume are named by its Berth id
//! below the agent's two directories.

use std::collections::HashMap;
use std::path::Path;

use berth_csi::proto;
use berth_csi::{CsiClient, CsiError, Failure};
pub use berth_model::Paths;
use berth_model::bounds::OutOfBounds;

/// A volume id the agent will not make a path of, as a step's failure:
/// the agent's own refusal, made before any plugin is asked.
pub fn refused_id(call: &'static str, e: OutOfBounds) -> CsiError {
    CsiError {
        plugin: "agent".into(),
        call,
        failure: Failure::Local {
            code: tonic::Code::InvalidArgument,
            message: format!("refused: {e}"),
        },
    }
}

/// What a forward step needs, from the server's operation. Held in memory
/// only: it carries the volume's secrets.
#[derive(Clone)]
pub struct Params {
    pub volume_id: String,
    pub staged: bool,
    pub capability: proto::VolumeCapability,
    pub publish_context: HashMap<String, String>,
    pub volume_context: HashMap<String, String>,
    pub secrets: HashMap<String, String>,
    pub readonly: bool,
}

impl std::fmt::Debug for Params {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Params")
            .field("volume_id", &self.volume_id)
            .field("staged", &self.staged)
            .field("secrets", &self.secrets.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

fn local_io(call: &'static str, what: &Path, e: std::io::Error) -> CsiError {
    CsiError {
        plugin: "agent".into(),
        call,
        failure: Failure::Local {
            code: tonic::Code::Internal,
            message: format!("preparing {}: {e}", what.display()),
        },
    }
}

pub async fn stage(client: &CsiClient, paths: &Paths, berth_id: &str, p: &Params) -> Result<(), CsiError> {
    // The CO creates the staging directory (CSI spec).
    let staging = paths
        .staging(berth_id)
        .map_err(|e| refused_id("NodeStageVolume", e))?;
    std::fs::create_dir_all(&staging).map_err(|e| local_io("NodeStageVolume", &staging, e))?;
    client
        .node_stage_volume(proto::NodeStageVolumeRequest {
            volume_id: p.volume_id.clone(),
            publish_context: p.publish_context.clone(),
            staging_target_path: staging.display().to_string(),
            volume_capability: Some(p.capability.clone()),
            secrets: p.secrets.clone(),
            volume_context: p.volume_context.clone(),
        })
        .await
        .map(drop)
}

pub async fn publish(client: &CsiClient, paths: &Paths, berth_id: &str, p: &Params) -> Result<(), CsiError> {
    // The CO creates the target's parent; the plugin creates the target.
    let target = paths
        .target(berth_id)
        .map_err(|e| refused_id("NodePublishVolume", e))?;
    // Checked before it is made: a `mkdir` of a directory that exists fails
    // only after locking its parent, and this runs on every publish.
    if !paths.publish_dir.is_dir() {
        std::fs::create_dir_all(&paths.publish_dir).map_err(|e| local_io("NodePublishVolume", &target, e))?;
    }
    client
        .node_publish_volume(proto::NodePublishVolumeRequest {
            volume_id: p.volume_id.clone(),
            publish_context: p.publish_context.clone(),
            staging_target_path: staging_arg(paths, berth_id, p.staged)
                .map_err(|e| refused_id("NodePublishVolume", e))?,
            target_path: target.display().to_string(),
            volume_capability: Some(p.capability.clone()),
            readonly: p.readonly,
            secrets: p.secrets.clone(),
            volume_context: p.volume_context.clone(),
        })
        .await
        .map(drop)
}

pub async fn unpublish(
    client: &CsiClient,
    paths: &Paths,
    berth_id: &str,
    volume_id: &str,
) -> Result<(), CsiError> {
    let target = paths
        .target(berth_id)
        .map_err(|e| refused_id("NodeUnpublishVolume", e))?;
    client
        .node_unpublish_volume(proto::NodeUnpublishVolumeRequest {
            volume_id: volume_id.to_string(),
            target_path: target.display().to_string(),
        })
        .await
        .map(drop)
}

pub async fn unstage(
    client: &CsiClient,
    paths: &Paths,
    berth_id: &str,
    volume_id: &str,
) -> Result<(), CsiError> {
    let staging = paths
        .staging(berth_id)
        .map_err(|e| refused_id("NodeUnstageVolume", e))?;
    client
        .node_unstage_volume(proto::NodeUnstageVolumeRequest {
            volume_id: volume_id.to_string(),
            staging_target_path: staging.display().to_string(),
        })
        .await?;
    // Ours to remove, as we created it; the plugin has let go of it.
    let _ = std::fs::remove_dir(&staging);
    Ok(())
}

/// The staging path as node calls take it: empty when the plugin does not stage.
pub fn staging_arg(paths: &Paths, berth_id: &str, staged: bool) -> Result<String, OutOfBounds> {
    Ok(if staged {
        paths.staging(berth_id)?.display().to_string()
    } else {
        String::new()
    })
}
