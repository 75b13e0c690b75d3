//! Publishing cases: ControllerPublish to a node, NodeStage and NodePublish at
//! real paths under the work directory, NodeGetVolumeStats, and undoing each twice.

use tonic::Code;

use crate::Why;
use crate::expect::{answers, refuses_missing, succeeds};
use crate::{Rule, Run, after_first, forget};
use berth_csi::{CsiClient, proto};
use proto::controller_service_capability::rpc::Type as ControllerCap;
use proto::node_service_capability::rpc::Type as NodeCap;

const PUBLISH: Rule = ("ControllerPublishVolume", "publishes the volume to the node");
const PUBLISH_AGAIN: Rule = ("ControllerPublishVolume twice", "succeeds the second time too");
const PUBLISH_UNKNOWN_VOLUME: Rule = ("ControllerPublishVolume, unknown volume", "answers NOT_FOUND");
const PUBLISH_UNKNOWN_NODE: Rule = ("ControllerPublishVolume, unknown node", "answers NOT_FOUND");
const PUBLISH_MISSING: Rule = (
    "ControllerPublishVolume missing a field",
    "answers INVALID_ARGUMENT without volume_id, node_id or volume_capability",
);
const STAGE: Rule = ("NodeStageVolume", "stages the volume at the staging path");
const STAGE_AGAIN: Rule = ("NodeStageVolume twice", "succeeds the second time too");
const STAGE_UNKNOWN: Rule = ("NodeStageVolume, unknown volume", "answers NOT_FOUND");
const STAGE_MISSING: Rule = (
    "NodeStageVolume missing a field",
    "answers INVALID_ARGUMENT without volume_id, staging_target_path or volume_capability",
);
const NODE_PUBLISH: Rule = ("NodePublishVolume", "makes the volume appear at the target path");
const NODE_PUBLISH_AGAIN: Rule = ("NodePublishVolume twice", "succeeds the second time too");
const NODE_PUBLISH_UNKNOWN: Rule = ("NodePublishVolume, unknown volume", "answers NOT_FOUND");
const NODE_PUBLISH_MISSING: Rule = (
    "NodePublishVolume missing a field",
    "answers INVALID_ARGUMENT without volume_id, target_path or volume_capability",
);
const STATS: Rule = ("NodeGetVolumeStats", "reports usage of the published volume");
const STATS_UNKNOWN: Rule = ("NodeGetVolumeStats, unknown volume", "answers NOT_FOUND");
const STATS_NO_PATH: Rule = (
    "NodeGetVolumeStats, path that does not exist",
    "answers NOT_FOUND for the published volume at a path it is not at",
);
const NODE_UNPUBLISH: Rule = ("NodeUnpublishVolume", "unpublishes and removes the target path");
const NODE_UNPUBLISH_AGAIN: Rule = ("NodeUnpublishVolume twice", "succeeds the second time too");
const NODE_UNPUBLISH_MISSING: Rule = (
    "NodeUnpublishVolume missing a field",
    "answers INVALID_ARGUMENT without volume_id or target_path",
);
const UNSTAGE: Rule = ("NodeUnstageVolume", "unstages the volume");
const UNSTAGE_AGAIN: Rule = ("NodeUnstageVolume twice", "succeeds the second time too");
const UNSTAGE_MISSING: Rule = (
    "NodeUnstageVolume missing a field",
    "answers INVALID_ARGUMENT without volume_id or staging_target_path",
);
const UNPUBLISH: Rule = (
    "ControllerUnpublishVolume",
    "unpublishes the volume from the node",
);
const UNPUBLISH_AGAIN: Rule = ("ControllerUnpublishVolume twice", "succeeds the second time too");
const UNPUBLISH_MISSING: Rule = (
    "ControllerUnpublishVolume without volume_id",
    "answers INVALID_ARGUMENT",
);

impl Run<'_> {
    /// A call that should have been refused and was answered OK may have
    /// done something: the clean-up undoes it.
    fn undo_if_done<T, E>(&mut self, answer: &Result<T, E>, remember: impl FnOnce(&mut crate::Made)) {
        if answer.is_ok() {
            remember(&mut self.made);
        }
    }

    /// The node to publish to: the node plugin's id, else `--node-id`.
    pub(super) fn node_id(&self) -> Result<String, Why> {
        self.node_fp()
            .map(|n| n.node_id.clone())
            .or_else(|| self.opts.node_id.clone())
            .ok_or_else(|| Why::from("no node to publish to: give --node-endpoint or --node-id"))
    }

    fn publisher(&self) -> Result<(CsiClient, String, String), Why> {
        let ctl = self.controller_with(ControllerCap::PublishUnpublishVolume)?;
        Ok((ctl, self.volume_id()?, self.node_id()?))
    }

    pub(super) fn publish_request(
        &self,
        volume_id: String,
        node_id: String,
    ) -> proto::ControllerPublishVolumeRequest {
        proto::ControllerPublishVolumeRequest {
            volume_id,
            node_id,
            volume_capability: Some(self.capability()),
            readonly: false,
            secrets: self.secrets(),
            volume_context: self.volume_context(),
        }
    }

    fn volume_context(&self) -> std::collections::HashMap<String, String> {
        self.volume
            .as_ref()
            .map(|v| v.volume_context.clone())
            .unwrap_or_default()
    }

    pub(super) async fn publish_cases(&mut self) {
        let mut published = false;
        if let Some((ctl, volume_id, node_id)) = self.needs(PUBLISH, self.publisher()) {
            self.made
                .controller_published
                .push((volume_id.clone(), node_id.clone()));
            let r = succeeds(
                ctl.controller_publish_volume(self.publish_request(volume_id, node_id))
                    .await,
            );
            if let Ok(resp) = &r {
                self.publish_context = resp.publish_context.clone();
                published = true;
            }
            self.record(PUBLISH, r.map(drop));
        }
        let again = after_first(published, self.publisher(), "ControllerPublishVolume");
        if let Some((ctl, volume_id, node_id)) = self.needs(PUBLISH_AGAIN, again) {
            let r = ctl
                .controller_publish_volume(self.publish_request(volume_id, node_id))
                .await;
            self.record(PUBLISH_AGAIN, succeeds(r).map(drop));
        }
        if let Some((ctl, _, node_id)) = self.needs(PUBLISH_UNKNOWN_VOLUME, self.publisher()) {
            let volume_id = self.unknown_volume();
            let req = self.publish_request(volume_id.clone(), node_id.clone());
            let r = ctl.controller_publish_volume(req).await;
            self.undo_if_done(&r, |made| made.controller_published.push((volume_id, node_id)));
            self.record(
                PUBLISH_UNKNOWN_VOLUME,
                answers("ControllerPublishVolume", r, Code::NotFound),
            );
        }
        if let Some((ctl, volume_id, _)) = self.needs(PUBLISH_UNKNOWN_NODE, self.publisher()) {
            let node_id = format!("{}-no-such-node", self.base);
            let req = self.publish_request(volume_id.clone(), node_id.clone());
            let r = ctl.controller_publish_volume(req).await;
            self.undo_if_done(&r, |made| made.controller_published.push((volume_id, node_id)));
            self.record(
                PUBLISH_UNKNOWN_NODE,
                answers("ControllerPublishVolume", r, Code::NotFound),
            );
        }
        if let Some((ctl, volume_id, node_id)) = self.needs(PUBLISH_MISSING, self.publisher()) {
            let r = refuses_missing(
                "ControllerPublishVolume",
                &self.publish_request(volume_id, node_id),
                &[
                    ("volume_id", |r| r.volume_id.clear()),
                    ("node_id", |r| r.node_id.clear()),
                    ("volume_capability", |r| r.volume_capability = None),
                ],
                |req| ctl.controller_publish_volume(req),
            )
            .await;
            self.record(PUBLISH_MISSING, r);
        }
    }

    fn stager(&self) -> Result<(CsiClient, String), Why> {
        Ok((
            self.node_with(Some(NodeCap::StageUnstageVolume))?,
            self.volume_id()?,
        ))
    }

    pub(super) fn stage_request(&self, volume_id: String, path: String) -> proto::NodeStageVolumeRequest {
        proto::NodeStageVolumeRequest {
            volume_id,
            publish_context: self.publish_context.clone(),
            staging_target_path: path,
            volume_capability: Some(self.capability()),
            secrets: self.secrets(),
            volume_context: self.volume_context(),
        }
    }

    fn node_publisher(&self) -> Result<(CsiClient, String), Why> {
        if self.node_has(NodeCap::StageUnstageVolume) && self.staged_at.is_none() {
            return Err(Why::from("needs the volume staged (NodeStageVolume)"));
        }
        Ok((self.node_with(None)?, self.volume_id()?))
    }

    pub(super) fn node_publish_request(
        &self,
        volume_id: String,
        target: String,
    ) -> proto::NodePublishVolumeRequest {
        proto::NodePublishVolumeRequest {
            volume_id,
            publish_context: self.publish_context.clone(),
            staging_target_path: self.staged_at.clone().unwrap_or_default(),
            target_path: target,
            volume_capability: Some(self.capability()),
            readonly: false,
            secrets: self.secrets(),
            volume_context: self.volume_context(),
        }
    }

    pub(super) async fn node_cases(&mut self) {
        if let Some((node, volume_id)) = self.needs(STAGE, self.stager()) {
            let r = self.stage(&node, volume_id).await;
            self.record(STAGE, r);
        }
        let again = after_first(self.staged_at.is_some(), self.stager(), "NodeStageVolume");
        if let Some((node, volume_id)) = self.needs(STAGE_AGAIN, again) {
            let req = self.stage_request(volume_id, self.staged_at.clone().unwrap_or_default());
            self.record(STAGE_AGAIN, succeeds(node.node_stage_volume(req).await).map(drop));
        }
        let stager = self.node_with(Some(NodeCap::StageUnstageVolume));
        if let Some(node) = self.needs(STAGE_UNKNOWN, stager) {
            let r = match self.path("staging-unknown", true) {
                Ok(path) => {
                    let volume_id = self.unknown_volume();
                    let req = self.stage_request(volume_id.clone(), path.clone());
                    let r = node.node_stage_volume(req).await;
                    self.undo_if_done(&r, |made| made.staged.push((volume_id, path)));
                    answers("NodeStageVolume", r, Code::NotFound)
                }
                Err(e) => Err(Why::from(format!("making the staging directory: {e}"))),
            };
            self.record(STAGE_UNKNOWN, r);
        }
        if let Some((node, volume_id)) = self.needs(STAGE_MISSING, self.stager()) {
            let path = self.staged_at.clone().unwrap_or_default();
            let r = refuses_missing(
                "NodeStageVolume",
                &self.stage_request(volume_id, path),
                &[
                    ("volume_id", |r| r.volume_id.clear()),
                    ("staging_target_path", |r| r.staging_target_path.clear()),
                    ("volume_capability", |r| r.volume_capability = None),
                ],
                |req| node.node_stage_volume(req),
            )
            .await;
            self.record(STAGE_MISSING, r);
        }
        self.node_publish_cases().await;
        self.stats_cases().await;
    }

    async fn stage(&mut self, node: &CsiClient, volume_id: String) -> Result<(), Why> {
        let path = self
            .path("staging", true)
            .map_err(|e| format!("making the staging directory: {e}"))?;
        self.made.staged.push((volume_id.clone(), path.clone()));
        succeeds(
            node.node_stage_volume(self.stage_request(volume_id, path.clone()))
                .await,
        )?;
        self.staged_at = Some(path);
        Ok(())
    }

    async fn node_publish_cases(&mut self) {
        if let Some((node, volume_id)) = self.needs(NODE_PUBLISH, self.node_publisher()) {
            let r = self.node_publish(&node, volume_id).await;
            self.record(NODE_PUBLISH, r);
        }
        let again = after_first(
            self.published_at.is_some(),
            self.node_publisher(),
            "NodePublishVolume",
        );
        if let Some((node, volume_id)) = self.needs(NODE_PUBLISH_AGAIN, again) {
            let req = self.node_publish_request(volume_id, self.published_at.clone().unwrap_or_default());
            let r = succeeds(node.node_publish_volume(req).await);
            self.record(NODE_PUBLISH_AGAIN, r.map(drop));
        }
        if let Some(node) = self.needs(NODE_PUBLISH_UNKNOWN, self.node_with(None)) {
            let r = match self.path("target-unknown", false) {
                Ok(target) => {
                    let unknown = self.unknown_volume();
                    self.made.node_published.push((unknown.clone(), target.clone()));
                    let req = self.node_publish_request(unknown, target);
                    answers(
                        "NodePublishVolume",
                        node.node_publish_volume(req).await,
                        Code::NotFound,
                    )
                }
                Err(e) => Err(Why::from(format!("making the target's parent directory: {e}"))),
            };
            self.record(NODE_PUBLISH_UNKNOWN, r);
        }
        if let Some((node, volume_id)) = self.needs(NODE_PUBLISH_MISSING, self.node_publisher()) {
            let r = match self.path("target-missing", false) {
                Ok(target) => {
                    self.made.node_published.push((volume_id.clone(), target.clone()));
                    refuses_missing(
                        "NodePublishVolume",
                        &self.node_publish_request(volume_id, target),
                        &[
                            ("volume_id", |r| r.volume_id.clear()),
                            ("target_path", |r| r.target_path.clear()),
                            ("volume_capability", |r| r.volume_capability = None),
                        ],
                        |req| node.node_publish_volume(req),
                    )
                    .await
                }
                Err(e) => Err(Why::from(format!("making the target's parent directory: {e}"))),
            };
            self.record(NODE_PUBLISH_MISSING, r);
        }
    }

    async fn node_publish(&mut self, node: &CsiClient, volume_id: String) -> Result<(), Why> {
        let target = self
            .path("target", false)
            .map_err(|e| format!("making the target's parent directory: {e}"))?;
        self.made.node_published.push((volume_id.clone(), target.clone()));
        succeeds(
            node.node_publish_volume(self.node_publish_request(volume_id, target.clone()))
                .await,
        )?;
        if std::fs::symlink_metadata(&target).is_err() {
            return Err(Why::from(format!(
                "NodePublishVolume answered OK but {target} does not exist"
            )));
        }
        self.published_at = Some(target);
        Ok(())
    }

    async fn stats_cases(&mut self) {
        let stats = self.node_with(Some(NodeCap::GetVolumeStats));
        let published = stats.clone().and_then(|n| {
            let at = self
                .published_at
                .clone()
                .ok_or("needs the volume published (NodePublishVolume)")?;
            Ok((n, self.volume_id()?, at))
        });
        if let Some((node, volume_id, _)) = self.needs(STATS_NO_PATH, published.clone()) {
            let req = proto::NodeGetVolumeStatsRequest {
                volume_id,
                volume_path: self.work_dir.join("no-such-path").display().to_string(),
                staging_target_path: self.staged_at.clone().unwrap_or_default(),
            };
            let r = answers(
                "NodeGetVolumeStats",
                node.node_get_volume_stats(req).await,
                Code::NotFound,
            );
            self.record(STATS_NO_PATH, r);
        }
        if let Some((node, volume_id, volume_path)) = self.needs(STATS, published) {
            let req = proto::NodeGetVolumeStatsRequest {
                volume_id,
                volume_path,
                staging_target_path: self.staged_at.clone().unwrap_or_default(),
            };
            let r = succeeds(node.node_get_volume_stats(req).await).and_then(|resp| {
                if resp.usage.is_empty() {
                    Err(Why::from("NodeGetVolumeStats answered no usage".to_string()))
                } else {
                    Ok(())
                }
            });
            self.record(STATS, r);
        }
        if let Some(node) = self.needs(STATS_UNKNOWN, stats) {
            let req = proto::NodeGetVolumeStatsRequest {
                volume_id: self.unknown_volume(),
                volume_path: self.work_dir.join("target-unknown").display().to_string(),
                staging_target_path: String::new(),
            };
            let r = answers(
                "NodeGetVolumeStats",
                node.node_get_volume_stats(req).await,
                Code::NotFound,
            );
            self.record(STATS_UNKNOWN, r);
        }
    }

    pub(super) async fn unpublish_cases(&mut self) {
        self.node_unpublish_cases().await;
        self.unstage_cases().await;
        self.controller_unpublish_cases().await;
    }

    async fn node_unpublish_cases(&mut self) {
        let published = self.node_with(None).and_then(|n| {
            let at = self
                .published_at
                .clone()
                .ok_or("needs the volume published (NodePublishVolume)")?;
            Ok((n, self.volume_id()?, at))
        });
        let request = |volume_id: String, target_path: String| proto::NodeUnpublishVolumeRequest {
            volume_id,
            target_path,
        };
        let mut first = false;
        if let Some((node, volume_id, target)) = self.needs(NODE_UNPUBLISH, published.clone()) {
            let r = succeeds(node.node_unpublish_volume(request(volume_id.clone(), target.clone())).await)
                .and_then(|_| match std::fs::symlink_metadata(&target) {
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                    _ => Err(Why::from(format!(
                        "NodeUnpublishVolume answered OK but left {target} behind (the spec: the plugin removes it)"
                    ))),
                });
            if r.is_ok() {
                forget(&mut self.made.node_published, &(volume_id, target));
                first = true;
            }
            self.record(NODE_UNPUBLISH, r);
        }
        let again = after_first(first, published.clone(), "NodeUnpublishVolume");
        if let Some((node, volume_id, target)) = self.needs(NODE_UNPUBLISH_AGAIN, again) {
            let r = succeeds(node.node_unpublish_volume(request(volume_id, target)).await);
            self.record(NODE_UNPUBLISH_AGAIN, r.map(drop));
        }
        if let Some((node, volume_id, target)) = self.needs(NODE_UNPUBLISH_MISSING, published) {
            let r = refuses_missing(
                "NodeUnpublishVolume",
                &request(volume_id, target),
                &[
                    ("volume_id", |r| r.volume_id.clear()),
                    ("target_path", |r| r.target_path.clear()),
                ],
                |req| node.node_unpublish_volume(req),
            )
            .await;
            self.record(NODE_UNPUBLISH_MISSING, r);
        }
    }

    async fn unstage_cases(&mut self) {
        let staged = self.stager().and_then(|(n, volume_id)| {
            let at = self
                .staged_at
                .clone()
                .ok_or("needs the volume staged (NodeStageVolume)")?;
            Ok((n, volume_id, at))
        });
        let request = |volume_id: String, staging_target_path: String| proto::NodeUnstageVolumeRequest {
            volume_id,
            staging_target_path,
        };
        let mut first = false;
        if let Some((node, volume_id, path)) = self.needs(UNSTAGE, staged.clone()) {
            let r = succeeds(
                node.node_unstage_volume(request(volume_id.clone(), path.clone()))
                    .await,
            );
            if r.is_ok() {
                forget(&mut self.made.staged, &(volume_id, path));
                first = true;
            }
            self.record(UNSTAGE, r.map(drop));
        }
        let again = after_first(first, staged.clone(), "NodeUnstageVolume");
        if let Some((node, volume_id, path)) = self.needs(UNSTAGE_AGAIN, again) {
            let r = succeeds(node.node_unstage_volume(request(volume_id, path)).await);
            self.record(UNSTAGE_AGAIN, r.map(drop));
        }
        if let Some((node, volume_id, path)) = self.needs(UNSTAGE_MISSING, staged) {
            let r = refuses_missing(
                "NodeUnstageVolume",
                &request(volume_id, path),
                &[
                    ("volume_id", |r| r.volume_id.clear()),
                    ("staging_target_path", |r| r.staging_target_path.clear()),
                ],
                |req| node.node_unstage_volume(req),
            )
            .await;
            self.record(UNSTAGE_MISSING, r);
        }
    }

    async fn controller_unpublish_cases(&mut self) {
        let request = |volume_id: String, node_id: String, secrets| proto::ControllerUnpublishVolumeRequest {
            volume_id,
            node_id,
            secrets,
        };
        let mut first = false;
        if let Some((ctl, volume_id, node_id)) = self.needs(UNPUBLISH, self.publisher()) {
            let req = request(volume_id.clone(), node_id.clone(), self.secrets());
            let r = succeeds(ctl.controller_unpublish_volume(req).await);
            if r.is_ok() {
                forget(&mut self.made.controller_published, &(volume_id, node_id));
                first = true;
            }
            self.record(UNPUBLISH, r.map(drop));
        }
        let again = after_first(first, self.publisher(), "ControllerUnpublishVolume");
        if let Some((ctl, volume_id, node_id)) = self.needs(UNPUBLISH_AGAIN, again) {
            let req = request(volume_id, node_id, self.secrets());
            let r = succeeds(ctl.controller_unpublish_volume(req).await);
            self.record(UNPUBLISH_AGAIN, r.map(drop));
        }
        if let Some((ctl, _, node_id)) = self.needs(UNPUBLISH_MISSING, self.publisher()) {
            let req = request(String::new(), node_id, self.secrets());
            let r = answers(
                "ControllerUnpublishVolume",
                ctl.controller_unpublish_volume(req).await,
                Code::InvalidArgument,
            );
            self.record(UNPUBLISH_MISSING, r);
        }
    }
}
