//! Modification cases: ControllerModifyVolume with the mutable parameters the
//! operator names (`--mutable-parameter`; which keys a driver can change is
//! its own), on the check's volume and on one that does not exist.

use tonic::Code;

use crate::Why;
use crate::expect::{answers, refuses_missing, succeeds};
use crate::{Rule, Run};
use berth_csi::{CsiClient, proto};
use proto::controller_service_capability::rpc::Type as ControllerCap;

const MODIFY: Rule = (
    "ControllerModifyVolume",
    "changes the volume's mutable parameters",
);
const MODIFY_AGAIN: Rule = ("ControllerModifyVolume twice", "succeeds the second time too");
const MODIFY_UNKNOWN: Rule = ("ControllerModifyVolume, unknown volume", "answers NOT_FOUND");
const MODIFY_MISSING: Rule = (
    "ControllerModifyVolume missing a field",
    "answers INVALID_ARGUMENT without volume_id",
);
const MODIFY_NOTHING: Rule = (
    "ControllerModifyVolume with no parameter",
    "succeeds and changes nothing (an empty mutable_parameters is a valid request)",
);

impl Run<'_> {
    /// The controller, and the parameters to send: both needed by every case.
    fn modifier(&self) -> Result<CsiClient, Why> {
        let ctl = self.controller_with(ControllerCap::ModifyVolume)?;
        if self.opts.mutable_parameters.is_empty() {
            return Err(Why::from(
                "needs --mutable-parameter KEY=VALUE: which parameters a driver can change is its own",
            ));
        }
        Ok(ctl)
    }

    fn modify_request(&self, volume_id: String) -> proto::ControllerModifyVolumeRequest {
        proto::ControllerModifyVolumeRequest {
            volume_id,
            secrets: self.secrets(),
            mutable_parameters: self.opts.mutable_parameters.clone(),
        }
    }

    pub(super) async fn modify_cases(&mut self) {
        let on_volume = |run: &Self| Ok::<_, Why>((run.modifier()?, run.volume_id()?));
        let mut modified = false;
        if let Some((ctl, volume_id)) = self.needs(MODIFY, on_volume(self)) {
            let r = succeeds(ctl.controller_modify_volume(self.modify_request(volume_id)).await);
            modified = r.is_ok();
            self.record(MODIFY, r.map(drop));
        }
        let again = on_volume(self).and_then(|c| match modified {
            true => Ok(c),
            false => Err(Why::from("needs the first ControllerModifyVolume to have worked")),
        });
        if let Some((ctl, volume_id)) = self.needs(MODIFY_AGAIN, again) {
            let r = succeeds(ctl.controller_modify_volume(self.modify_request(volume_id)).await);
            self.record(MODIFY_AGAIN, r.map(drop));
        }
        if let Some(ctl) = self.needs(MODIFY_UNKNOWN, self.modifier()) {
            let req = self.modify_request(self.unknown_volume());
            let r = answers(
                "ControllerModifyVolume",
                ctl.controller_modify_volume(req).await,
                Code::NotFound,
            );
            self.record(MODIFY_UNKNOWN, r);
        }
        if let Some((ctl, volume_id)) = self.needs(MODIFY_MISSING, on_volume(self)) {
            let r = refuses_missing(
                "ControllerModifyVolume",
                &self.modify_request(volume_id),
                &[("volume_id", |r| r.volume_id.clear())],
                |req| ctl.controller_modify_volume(req),
            )
            .await;
            self.record(MODIFY_MISSING, r);
        }
        // Sends no parameter: needs none named.
        let bare = |run: &Self| {
            Ok::<_, Why>((
                run.controller_with(ControllerCap::ModifyVolume)?,
                run.volume_id()?,
            ))
        };
        if let Some((ctl, volume_id)) = self.needs(MODIFY_NOTHING, bare(self)) {
            let mut req = self.modify_request(volume_id);
            req.mutable_parameters.clear();
            let r = succeeds(ctl.controller_modify_volume(req).await);
            self.record(MODIFY_NOTHING, r.map(drop));
        }
    }
}
