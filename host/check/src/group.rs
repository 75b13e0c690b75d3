//! Group snapshot cases (the GroupController service): a group of the
//! check's volume taken, taken again by the same name, read back and
//! deleted twice; an unknown group is NOT_FOUND.

use tonic::Code;

use crate::Why;
use crate::expect::{answers, succeeds};
use crate::{Rule, Run};
use berth_csi::{CsiClient, proto};
use proto::group_controller_service_capability::rpc::Type as GroupCap;

const GROUP: Rule = (
    "CreateVolumeGroupSnapshot",
    "takes a snapshot of each volume in the group",
);
const GROUP_AGAIN: Rule = (
    "CreateVolumeGroupSnapshot twice",
    "returns the same group the second time",
);
const GROUP_GET: Rule = ("GetVolumeGroupSnapshot", "answers the group by its id");
const GROUP_UNKNOWN: Rule = ("GetVolumeGroupSnapshot, unknown group", "answers NOT_FOUND");
const GROUP_DELETE: Rule = (
    "DeleteVolumeGroupSnapshot twice",
    "deletes the group, and succeeds the second time too",
);

impl Run<'_> {
    fn grouper(&self) -> Result<CsiClient, Why> {
        let client = self
            .controller
            .clone()
            .ok_or("no endpoint serves the Controller service")?;
        if self
            .fp()
            .has_group_capability(GroupCap::CreateDeleteGetVolumeGroupSnapshot)
        {
            Ok(client)
        } else {
            Err(Why::from(format!(
                "the plugin does not offer {}",
                GroupCap::CreateDeleteGetVolumeGroupSnapshot.as_str_name()
            )))
        }
    }

    fn group_request(&self, volume_id: String) -> proto::CreateVolumeGroupSnapshotRequest {
        proto::CreateVolumeGroupSnapshotRequest {
            name: format!("{}-group", self.base),
            source_volume_ids: vec![volume_id],
            secrets: self.secrets(),
            parameters: Default::default(),
        }
    }

    pub(super) async fn group_cases(&mut self) {
        let with_volume = |run: &Self| Ok::<_, Why>((run.grouper()?, run.volume_id()?));
        let mut taken: Option<proto::VolumeGroupSnapshot> = None;
        if let Some((ctl, volume_id)) = self.needs(GROUP, with_volume(self)) {
            let r = succeeds(
                ctl.create_volume_group_snapshot(self.group_request(volume_id.clone()))
                    .await,
            )
            .and_then(|resp| {
                let g = resp
                    .group_snapshot
                    .ok_or("CreateVolumeGroupSnapshot answered OK without a group")?;
                self.made.group_snapshots.push((
                    g.group_snapshot_id.clone(),
                    g.snapshots.iter().map(|s| s.snapshot_id.clone()).collect(),
                ));
                match g.snapshots.as_slice() {
                    [s] if s.source_volume_id == volume_id && !g.group_snapshot_id.is_empty() => Ok(g),
                    _ => Err(Why::from(format!(
                        "asked for a group of {volume_id}, got {:?} with snapshots of {:?}",
                        g.group_snapshot_id,
                        g.snapshots
                            .iter()
                            .map(|s| &s.source_volume_id)
                            .collect::<Vec<_>>()
                    ))),
                }
            });
            self.record(GROUP, r.as_ref().map(drop).map_err(Clone::clone));
            taken = r.ok();
        }
        let first = with_volume(self).and_then(|c| {
            taken
                .clone()
                .map(|g| (c, g))
                .ok_or_else(|| Why::from("needs the group CreateVolumeGroupSnapshot was to take"))
        });
        if let Some(((ctl, volume_id), first)) = self.needs(GROUP_AGAIN, first.clone()) {
            let r = succeeds(
                ctl.create_volume_group_snapshot(self.group_request(volume_id))
                    .await,
            )
            .and_then(|resp| match resp.group_snapshot.map(|g| g.group_snapshot_id) {
                Some(id) if id == first.group_snapshot_id => Ok(()),
                Some(id) => Err(Why::from(format!(
                    "the first call took {}, the second {id}",
                    first.group_snapshot_id
                ))),
                None => Err(Why::from("CreateVolumeGroupSnapshot answered OK without a group")),
            });
            self.record(GROUP_AGAIN, r);
        }
        if let Some(((ctl, _), first)) = self.needs(GROUP_GET, first.clone()) {
            let req = proto::GetVolumeGroupSnapshotRequest {
                group_snapshot_id: first.group_snapshot_id.clone(),
                snapshot_ids: first.snapshots.iter().map(|s| s.snapshot_id.clone()).collect(),
                secrets: self.secrets(),
            };
            let r = succeeds(ctl.get_volume_group_snapshot(req).await).and_then(|resp| {
                match resp.group_snapshot {
                    Some(g) if g.group_snapshot_id == first.group_snapshot_id => Ok(()),
                    Some(g) => Err(Why::from(format!(
                        "asked for {}, GetVolumeGroupSnapshot answered {}",
                        first.group_snapshot_id, g.group_snapshot_id
                    ))),
                    None => Err(Why::from("GetVolumeGroupSnapshot answered OK without a group")),
                }
            });
            self.record(GROUP_GET, r);
        }
        if let Some(ctl) = self.needs(GROUP_UNKNOWN, self.grouper()) {
            let req = proto::GetVolumeGroupSnapshotRequest {
                group_snapshot_id: format!("{}-no-such-group", self.base),
                snapshot_ids: vec![],
                secrets: self.secrets(),
            };
            let r = answers(
                "GetVolumeGroupSnapshot",
                ctl.get_volume_group_snapshot(req).await,
                Code::NotFound,
            );
            self.record(GROUP_UNKNOWN, r);
        }
        if let Some(((ctl, _), first)) = self.needs(GROUP_DELETE, first) {
            let req = proto::DeleteVolumeGroupSnapshotRequest {
                group_snapshot_id: first.group_snapshot_id.clone(),
                snapshot_ids: first.snapshots.iter().map(|s| s.snapshot_id.clone()).collect(),
                secrets: self.secrets(),
            };
            let mut r = succeeds(ctl.delete_volume_group_snapshot(req.clone()).await).map(drop);
            if r.is_ok() {
                self.made
                    .group_snapshots
                    .retain(|(id, _)| *id != first.group_snapshot_id);
                r = succeeds(ctl.delete_volume_group_snapshot(req).await)
                    .map(drop)
                    .map_err(|why| Why::from(format!("the second time: {}", why.0)));
            }
            self.record(GROUP_DELETE, r);
        }
    }
}
