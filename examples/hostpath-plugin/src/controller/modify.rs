//! ControllerModifyVolume: the mutable parameters this plugin knows
//! (`iops`, `tier`), checked, kept in the volume's record.

use std::collections::BTreeMap;

use berth_proto::csi::v1 as csi;
use tonic::{Response, Status};

use super::{Controller, require};
use crate::config::Misbehaviour;

impl Controller {
    pub(super) async fn modify_volume(
        &self,
        req: csi::ControllerModifyVolumeRequest,
    ) -> Result<Response<csi::ControllerModifyVolumeResponse>, Status> {
        self.faults.inject("ControllerModifyVolume").await?;
        self.offered("MODIFY_VOLUME")?;
        require("volume_id", &req.volume_id)?;
        self.check_secrets(&req.secrets)?;
        // A volume that does not exist is NOT_FOUND before its arguments
        // are judged; no parameter at all is a request that changes nothing.
        if self.volumes.get(&req.volume_id)?.is_none() {
            return Err(self.unknown_volume(&req.volume_id));
        }
        let changes = mutable(req.mutable_parameters)?;
        self.volumes
            .modify(&req.volume_id, changes.clone())?
            .ok_or_else(|| Status::not_found(format!("volume {} does not exist", req.volume_id)))?;
        tracing::info!(volume = %req.volume_id, ?changes, "volume modified");
        self.faults.reply("ControllerModifyVolume").await;
        Ok(Response::new(csi::ControllerModifyVolumeResponse {}))
    }

    /// A volume this call does not know: NOT_FOUND, or INTERNAL with
    /// `--misbehave internal-for-not-found`.
    pub(super) fn unknown_volume(&self, volume_id: &str) -> Status {
        let missing = format!("volume {volume_id} does not exist");
        match self.config.misbehaves(Misbehaviour::InternalForNotFound) {
            true => Status::internal(missing),
            false => Status::not_found(missing),
        }
    }
}

/// The mutable parameters this plugin knows, checked: `iops` (a whole
/// number) and `tier` (any text); others are refused, as a driver refuses
/// what it cannot change.
pub(super) fn mutable(
    parameters: std::collections::HashMap<String, String>,
) -> Result<BTreeMap<String, String>, Status> {
    for (key, value) in &parameters {
        match key.as_str() {
            "iops" if value.parse::<u32>().is_ok() => {}
            "tier" if !value.is_empty() => {}
            "iops" | "tier" => {
                return Err(Status::invalid_argument(format!(
                    "mutable parameter {key}={value:?} is not valid"
                )));
            }
            _ => {
                return Err(Status::invalid_argument(format!(
                    "{key:?} is not a mutable parameter of this plugin (iops, tier)"
                )));
            }
        }
    }
    Ok(parameters.into_iter().collect())
}
