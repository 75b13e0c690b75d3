//! The single-writer case: a volume made, published and staged in the
//! SINGLE_NODE_SINGLE_WRITER access mode, published at one target path, must
//! be refused at a second (FAILED_PRECONDITION). It needs a volume of its
//! own, since the check's volume is made in SINGLE_NODE_WRITER.

use tonic::Code;

use crate::Why;
use crate::expect::{answers, succeeds};
use crate::{Rule, Run};
use berth_csi::{CsiClient, proto};
use proto::controller_service_capability::rpc::Type as ControllerCap;
use proto::node_service_capability::rpc::Type as NodeCap;
use proto::volume_capability::access_mode::Mode;

const SECOND_WRITER: Rule = (
    "NodePublishVolume, single writer at a second target",
    "answers FAILED_PRECONDITION for a SINGLE_NODE_SINGLE_WRITER volume already published at another target path",
);

/// The clients the case needs: the controller to make the volume, the node
/// offering SINGLE_NODE_MULTI_WRITER (the capability that brings the mode).
fn needs(run: &Run<'_>) -> Result<(CsiClient, CsiClient), Why> {
    let node = run.node_with(Some(NodeCap::SingleNodeMultiWriter))?;
    let ctl = run.controller_with(ControllerCap::CreateDeleteVolume)?;
    Ok((ctl, node))
}

impl Run<'_> {
    fn single_writer(&self) -> proto::VolumeCapability {
        let mut cap = self.capability();
        if let Some(m) = cap.access_mode.as_mut() {
            m.mode = Mode::SingleNodeSingleWriter as i32;
        }
        cap
    }

    pub(super) async fn single_writer_cases(&mut self) {
        if let Some((ctl, node)) = self.needs(SECOND_WRITER, needs(self)) {
            let r = self.second_writer(&ctl, &node).await;
            self.record(SECOND_WRITER, r);
        }
    }

    /// Makes the volume ready on the node at one target path (every step
    /// remembered for the clean-up), then asks for a second.
    async fn second_writer(&mut self, ctl: &CsiClient, node: &CsiClient) -> Result<(), Why> {
        let cap = self.single_writer();
        let mut create = self.create_request(format!("{}-single-writer", self.base), self.opts.size_bytes);
        create.volume_capabilities = vec![cap.clone()];
        let resp = succeeds(ctl.create_volume(create).await).map_err(|why| setting_up(&why))?;
        let volume = self
            .created(&resp)
            .ok_or("setting up: CreateVolume answered OK without a volume")?;
        let volume_id = volume.volume_id;
        let mut publish_context = Default::default();
        if self
            .fp()
            .has_controller_capability(ControllerCap::PublishUnpublishVolume)
        {
            let node_id = self.node_id()?;
            let mut req = self.publish_request(volume_id.clone(), node_id.clone());
            req.volume_capability = Some(cap.clone());
            req.volume_context = volume.volume_context.clone();
            self.made.controller_published.push((volume_id.clone(), node_id));
            let resp = succeeds(ctl.controller_publish_volume(req).await).map_err(|why| setting_up(&why))?;
            publish_context = resp.publish_context;
        }
        let mut staging = String::new();
        if self.node_has(NodeCap::StageUnstageVolume) {
            staging = self
                .path("single-writer-staging", true)
                .map_err(|e| format!("setting up: making the staging directory: {e}"))?;
            let mut req = self.stage_request(volume_id.clone(), staging.clone());
            req.volume_capability = Some(cap.clone());
            req.publish_context = publish_context.clone();
            req.volume_context = volume.volume_context.clone();
            self.made.staged.push((volume_id.clone(), staging.clone()));
            succeeds(node.node_stage_volume(req).await).map_err(|why| setting_up(&why))?;
        }
        let publish_at = |this: &mut Self, name: &str| -> Result<proto::NodePublishVolumeRequest, Why> {
            let target = this
                .path(name, false)
                .map_err(|e| format!("making the target's parent directory: {e}"))?;
            let mut req = this.node_publish_request(volume_id.clone(), target.clone());
            req.volume_capability = Some(cap.clone());
            req.publish_context = publish_context.clone();
            req.staging_target_path = staging.clone();
            req.volume_context = volume.volume_context.clone();
            this.made.node_published.push((volume_id.clone(), target));
            Ok(req)
        };
        let first = publish_at(self, "single-writer-target")?;
        succeeds(node.node_publish_volume(first).await).map_err(|why| setting_up(&why))?;
        let second = publish_at(self, "single-writer-second-target")?;
        answers(
            "NodePublishVolume",
            node.node_publish_volume(second).await,
            Code::FailedPrecondition,
        )
    }
}

fn setting_up(why: &Why) -> Why {
    Why::from(format!("setting up: {why}"))
}
