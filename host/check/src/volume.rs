//! Controller cases on the check's volume: CreateVolume and its idempotency,
//! validation, ControllerGetVolume, ListVolumes, and DeleteVolume.

use tonic::Code;

use crate::Why;
use crate::expect::{answers, refuses_missing, succeeds};
use crate::{Rule, Run, after_first, forget};
use berth_csi::{CsiClient, proto};
use proto::controller_service_capability::rpc::Type as ControllerCap;
use proto::plugin_capability::service::Type as ServiceCap;

const CREATE: Rule = ("CreateVolume", "makes a volume of at least the required capacity");
const CREATE_AGAIN: Rule = ("CreateVolume twice", "returns the same volume the second time");
const CREATE_CONFLICT: Rule = (
    "CreateVolume, same name, larger size",
    "answers ALREADY_EXISTS for a known name with an incompatible capacity",
);
const CREATE_NO_NAME: Rule = ("CreateVolume without name", "answers INVALID_ARGUMENT");
const CREATE_NO_CAPABILITIES: Rule = (
    "CreateVolume without volume_capabilities",
    "answers INVALID_ARGUMENT",
);
const VALIDATE: Rule = (
    "ValidateVolumeCapabilities",
    "confirms the capability the volume was made with",
);
const VALIDATE_UNKNOWN: Rule = ("ValidateVolumeCapabilities, unknown volume", "answers NOT_FOUND");
const VALIDATE_MISSING: Rule = (
    "ValidateVolumeCapabilities missing a field",
    "answers INVALID_ARGUMENT without volume_id or volume_capabilities",
);
const GET: Rule = ("ControllerGetVolume", "returns the volume");
const GET_UNKNOWN: Rule = ("ControllerGetVolume, unknown volume", "answers NOT_FOUND");
const LIST: Rule = ("ListVolumes", "lists the volume, across pages");
const DELETE: Rule = ("DeleteVolume", "deletes the volume");
const DELETE_AGAIN: Rule = ("DeleteVolume twice", "succeeds the second time too");
const DELETE_UNKNOWN: Rule = ("DeleteVolume, unknown volume", "succeeds (nothing to delete)");
const DELETE_MISSING: Rule = ("DeleteVolume without volume_id", "answers INVALID_ARGUMENT");

impl Run<'_> {
    pub(super) async fn volume_cases(&mut self) {
        let creator = self.controller_with(ControllerCap::CreateDeleteVolume);
        if let Some(ctl) = self.needs(CREATE, creator.clone()) {
            let r = self.create(&ctl).await;
            self.record(CREATE, r);
        }
        let with_volume = creator.and_then(|c| self.volume_id().map(|_| c));
        if let Some(ctl) = self.needs(CREATE_AGAIN, with_volume.clone()) {
            let r = self.create_again(&ctl).await;
            self.record(CREATE_AGAIN, r);
        }
        if let Some(ctl) = self.needs(CREATE_CONFLICT, with_volume.clone()) {
            let r = self.create_conflict(&ctl).await;
            self.record(CREATE_CONFLICT, r);
        }
        if let Some(ctl) = self.needs(CREATE_NO_NAME, with_volume.clone()) {
            let req = self.create_request(String::new(), self.opts.size_bytes);
            let r = self.create_refused(&ctl, req).await;
            self.record(CREATE_NO_NAME, r);
        }
        if let Some(ctl) = self.needs(CREATE_NO_CAPABILITIES, with_volume) {
            let mut req = self.create_request(format!("{}-no-capabilities", self.base), self.opts.size_bytes);
            req.volume_capabilities.clear();
            let r = self.create_refused(&ctl, req).await;
            self.record(CREATE_NO_CAPABILITIES, r);
        }
        self.validate_cases().await;
        self.get_and_list_cases().await;
    }

    pub(super) fn create_request(&self, name: String, required_bytes: i64) -> proto::CreateVolumeRequest {
        proto::CreateVolumeRequest {
            name,
            capacity_range: Some(proto::CapacityRange {
                required_bytes,
                limit_bytes: 0,
            }),
            volume_capabilities: vec![self.capability()],
            parameters: self.opts.parameters.clone(),
            secrets: self.secrets(),
            accessibility_requirements: self.accessibility(),
            ..Default::default()
        }
    }

    /// Where the volume must be reachable from: the checked node's topology,
    /// so that the node calls can use it.
    fn accessibility(&self) -> Option<proto::TopologyRequirement> {
        if !self
            .fp()
            .has_plugin_capability(ServiceCap::VolumeAccessibilityConstraints)
        {
            return None;
        }
        let segments = &self.node_fp()?.accessible_topology;
        if segments.is_empty() {
            return None;
        }
        let topology = proto::Topology {
            segments: segments.clone().into_iter().collect(),
        };
        Some(proto::TopologyRequirement {
            requisite: vec![topology.clone()],
            preferred: vec![topology],
        })
    }

    /// Keeps any volume a CreateVolume answer names, for the clean-up.
    pub(super) fn created(&mut self, resp: &proto::CreateVolumeResponse) -> Option<proto::Volume> {
        let v = resp.volume.clone()?;
        if !v.volume_id.is_empty() && !self.made.volumes.contains(&v.volume_id) {
            self.made.volumes.push(v.volume_id.clone());
        }
        Some(v)
    }

    async fn create(&mut self, ctl: &CsiClient) -> Result<(), Why> {
        let required = self.opts.size_bytes;
        let req = self.create_request(format!("{}-volume", self.base), required);
        let resp = succeeds(ctl.create_volume(req).await)?;
        let v = self
            .created(&resp)
            .ok_or("CreateVolume answered OK without a volume")?;
        if v.volume_id.is_empty() {
            return Err(Why::from("CreateVolume answered a volume without a volume_id"));
        }
        if v.capacity_bytes != 0 && v.capacity_bytes < required {
            return Err(Why::from(format!(
                "asked for at least {required} bytes, CreateVolume made {}",
                v.capacity_bytes
            )));
        }
        self.volume = Some(v);
        Ok(())
    }

    async fn create_again(&mut self, ctl: &CsiClient) -> Result<(), Why> {
        let first = self.volume_id()?;
        let req = self.create_request(format!("{}-volume", self.base), self.opts.size_bytes);
        let resp = succeeds(ctl.create_volume(req).await)?;
        match self.created(&resp) {
            Some(v) if v.volume_id == first => Ok(()),
            Some(v) => Err(Why::from(format!(
                "the first call made {first}, the second {}: a retried CreateVolume would leak volumes",
                v.volume_id
            ))),
            None => Err(Why::from("CreateVolume answered OK without a volume")),
        }
    }

    async fn create_conflict(&mut self, ctl: &CsiClient) -> Result<(), Why> {
        let have = self
            .volume
            .as_ref()
            .map_or(0, |v| v.capacity_bytes)
            .max(self.opts.size_bytes);
        let larger = have.saturating_mul(4);
        let mut req = self.create_request(format!("{}-volume", self.base), larger);
        if let Some(range) = req.capacity_range.as_mut() {
            range.limit_bytes = larger;
        }
        match ctl.create_volume(req).await {
            Ok(resp) => {
                let v = self.created(&resp).unwrap_or_default();
                Err(Why::from(format!(
                    "CreateVolume answered OK with volume {:?} of {} bytes; the name already has a volume of {have}",
                    v.volume_id, v.capacity_bytes
                )))
            }
            r => answers("CreateVolume", r, Code::AlreadyExists),
        }
    }

    /// A CreateVolume that must answer INVALID_ARGUMENT; a volume it makes anyway is removed later.
    async fn create_refused(&mut self, ctl: &CsiClient, req: proto::CreateVolumeRequest) -> Result<(), Why> {
        match ctl.create_volume(req).await {
            Ok(resp) => {
                let id = self.created(&resp).map(|v| v.volume_id).unwrap_or_default();
                Err(Why::from(format!(
                    "CreateVolume answered OK and made volume {id:?}"
                )))
            }
            r => answers("CreateVolume", r, Code::InvalidArgument),
        }
    }

    async fn validate_cases(&mut self) {
        let ctl = self
            .controller
            .clone()
            .ok_or_else(|| Why::from("no endpoint serves the Controller service"));
        let with_volume = ctl.clone().and_then(|c| self.volume_id().map(|id| (c, id)));
        if let Some((ctl, volume_id)) = self.needs(VALIDATE, with_volume.clone()) {
            let r = ctl
                .validate_volume_capabilities(self.validate_request(volume_id))
                .await;
            let r = succeeds(r).and_then(|resp| match resp.confirmed {
                Some(_) => Ok(()),
                None => Err(Why::from(format!("not confirmed: {:?}", resp.message))),
            });
            self.record(VALIDATE, r);
        }
        if let Some(ctl) = self.needs(VALIDATE_UNKNOWN, ctl) {
            let req = self.validate_request(self.unknown_volume());
            let r = answers(
                "ValidateVolumeCapabilities",
                ctl.validate_volume_capabilities(req).await,
                Code::NotFound,
            );
            self.record(VALIDATE_UNKNOWN, r);
        }
        if let Some((ctl, volume_id)) = self.needs(VALIDATE_MISSING, with_volume) {
            let r = refuses_missing(
                "ValidateVolumeCapabilities",
                &self.validate_request(volume_id),
                &[
                    ("volume_id", |r| r.volume_id.clear()),
                    ("volume_capabilities", |r| r.volume_capabilities.clear()),
                ],
                |req| ctl.validate_volume_capabilities(req),
            )
            .await;
            self.record(VALIDATE_MISSING, r);
        }
    }

    fn validate_request(&self, volume_id: String) -> proto::ValidateVolumeCapabilitiesRequest {
        proto::ValidateVolumeCapabilitiesRequest {
            volume_context: self
                .volume
                .as_ref()
                .map(|v| v.volume_context.clone())
                .unwrap_or_default(),
            volume_id,
            volume_capabilities: vec![self.capability()],
            parameters: self.opts.parameters.clone(),
            secrets: self.secrets(),
            mutable_parameters: Default::default(),
        }
    }

    /// A volume id no plugin has: the run's unique prefix.
    pub(super) fn unknown_volume(&self) -> String {
        format!("{}-no-such-volume", self.base)
    }

    async fn get_and_list_cases(&mut self) {
        let getter = self.controller_with(ControllerCap::GetVolume);
        if let Some((ctl, volume_id)) = self.needs(
            GET,
            getter.clone().and_then(|c| self.volume_id().map(|id| (c, id))),
        ) {
            let req = proto::ControllerGetVolumeRequest {
                volume_id: volume_id.clone(),
            };
            let r = succeeds(ctl.controller_get_volume(req).await).and_then(|resp| {
                match resp.volume.map(|v| v.volume_id) {
                    Some(id) if id == volume_id => Ok(()),
                    other => Err(Why::from(format!("asked for {volume_id}, got {other:?}"))),
                }
            });
            self.record(GET, r);
        }
        if let Some(ctl) = self.needs(GET_UNKNOWN, getter) {
            let req = proto::ControllerGetVolumeRequest {
                volume_id: self.unknown_volume(),
            };
            let r = ctl.controller_get_volume(req).await;
            let abnormal = r
                .as_ref()
                .ok()
                .and_then(|resp| resp.status.as_ref()?.volume_condition.as_ref())
                .filter(|c| c.abnormal);
            match abnormal {
                // A driver that reports volume health may say "missing" this way on purpose.
                Some(c) => self.warn(
                    GET_UNKNOWN,
                    format!(
                        "answered OK with an abnormal volume condition ({:?}) where the spec's table says NOT_FOUND",
                        c.message
                    ),
                ),
                None => self.record(GET_UNKNOWN, answers("ControllerGetVolume", r, Code::NotFound)),
            }
        }
        let lister = self.controller_with(ControllerCap::ListVolumes);
        if let Some((ctl, volume_id)) =
            self.needs(LIST, lister.and_then(|c| self.volume_id().map(|id| (c, id))))
        {
            let r = match ctl.list_all_volumes().await {
                Ok(all) if all.iter().any(|v| v.volume_id == volume_id) => Ok(()),
                Ok(all) => Err(Why::from(format!(
                    "{volume_id} is not among the {} listed",
                    all.len()
                ))),
                Err(e) => Err(crate::expect::describe(&e)),
            };
            self.record(LIST, r);
        }
    }

    pub(super) async fn delete_cases(&mut self) {
        let deleter = self.controller_with(ControllerCap::CreateDeleteVolume);
        let with_volume = deleter.clone().and_then(|c| self.volume_id().map(|id| (c, id)));
        let mut deleted = false;
        if let Some((ctl, volume_id)) = self.needs(DELETE, with_volume.clone()) {
            let r = succeeds(ctl.delete_volume(self.delete_request(volume_id.clone())).await);
            deleted = r.is_ok();
            if deleted {
                forget(&mut self.made.volumes, &volume_id);
            }
            self.record(DELETE, r.map(drop));
        }
        let deleted_volume = after_first(deleted, with_volume, "DeleteVolume");
        if let Some((ctl, volume_id)) = self.needs(DELETE_AGAIN, deleted_volume) {
            let r = succeeds(ctl.delete_volume(self.delete_request(volume_id)).await);
            self.record(DELETE_AGAIN, r.map(drop));
        }
        if let Some(ctl) = self.needs(DELETE_UNKNOWN, deleter.clone()) {
            let r = succeeds(
                ctl.delete_volume(self.delete_request(self.unknown_volume()))
                    .await,
            );
            self.record(DELETE_UNKNOWN, r.map(drop));
        }
        if let Some(ctl) = self.needs(DELETE_MISSING, deleter) {
            let r = answers(
                "DeleteVolume",
                ctl.delete_volume(self.delete_request(String::new())).await,
                Code::InvalidArgument,
            );
            self.record(DELETE_MISSING, r);
        }
    }

    fn delete_request(&self, volume_id: String) -> proto::DeleteVolumeRequest {
        proto::DeleteVolumeRequest {
            volume_id,
            secrets: self.secrets(),
        }
    }
}
