//! A CSI plugin in the test's own runtime: controller and node on one unix
//! socket, volumes kept in memory, each answer immediate. Everything it does
//! is Berth's business to react to, so paused time holds: the only waits are
//! Berth's own. A test scripts failures per call and reads when each call came.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};

use berth_proto::csi::v1 as csi;
use csi::controller_server::{Controller, ControllerServer};
use csi::identity_server::{Identity, IdentityServer};
use csi::node_server::{Node, NodeServer};
use tokio::time::Instant;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Code, Request, Response, Status};

pub const DRIVER: &str = "memory.csi.berth.dev";

#[derive(Default)]
struct State {
    /// Created volumes: CSI name → id.
    volumes: BTreeMap<String, String>,
    /// A call's next answers (a code, how many times; `usize::MAX`: until
    /// healed), before it does anything.
    faults: HashMap<&'static str, (Code, usize)>,
    /// Every call, in order, with when it came.
    calls: Vec<(&'static str, Instant)>,
    /// Offers VOLUME_ACCESSIBILITY_CONSTRAINTS: creating a volume asks placement.
    constrained: bool,
}

#[derive(Clone, Default)]
pub struct MemoryPlugin {
    state: Arc<Mutex<State>>,
}

impl MemoryPlugin {
    /// A plugin whose volumes are not equally reachable from every node.
    pub fn constrained() -> MemoryPlugin {
        let p = MemoryPlugin::default();
        p.state.lock().unwrap().constrained = true;
        p
    }

    /// Serves the plugin on `socket` until the runtime ends.
    pub fn serve(&self, socket: &Path) {
        let listener = tokio::net::UnixListener::bind(socket).expect("binding the plugin's socket");
        let router = tonic::transport::Server::builder()
            .add_service(IdentityServer::new(self.clone()))
            .add_service(ControllerServer::new(self.clone()))
            .add_service(NodeServer::new(self.clone()));
        tokio::spawn(router.serve_with_incoming(UnixListenerStream::new(listener)));
    }

    /// The next `times` calls of `call` answer `code` (`usize::MAX`: every
    /// call until healed).
    pub fn fail(&self, call: &'static str, code: Code, times: usize) {
        self.state.lock().unwrap().faults.insert(call, (code, times));
    }

    /// Calls of `call` answer normally again.
    pub fn heal(&self, call: &'static str) {
        self.state.lock().unwrap().faults.remove(call);
    }

    /// When each call of `call` came.
    pub fn calls(&self, call: &str) -> Vec<Instant> {
        let s = self.state.lock().unwrap();
        s.calls
            .iter()
            .filter(|(c, _)| *c == call)
            .map(|(_, at)| *at)
            .collect()
    }

    /// The names of every call, in order.
    pub fn log(&self) -> Vec<&'static str> {
        self.state.lock().unwrap().calls.iter().map(|(c, _)| *c).collect()
    }

    pub fn volumes(&self) -> usize {
        self.state.lock().unwrap().volumes.len()
    }

    /// Logs the call and answers its scripted failure, if one is due.
    fn called(&self, call: &'static str) -> Result<(), Status> {
        let mut s = self.state.lock().unwrap();
        s.calls.push((call, Instant::now()));
        match s.faults.get_mut(call) {
            Some((code, left)) if *left > 0 => {
                if *left != usize::MAX {
                    *left -= 1;
                }
                Err(Status::new(*code, format!("{call} failed as the test asked")))
            }
            _ => Ok(()),
        }
    }
}

type Answer<T> = Result<Response<T>, Status>;

fn unimplemented<T>() -> Answer<T> {
    Err(Status::unimplemented("not offered"))
}

#[tonic::async_trait]
impl Identity for MemoryPlugin {
    async fn get_plugin_info(
        &self,
        _: Request<csi::GetPluginInfoRequest>,
    ) -> Answer<csi::GetPluginInfoResponse> {
        Ok(Response::new(csi::GetPluginInfoResponse {
            name: DRIVER.into(),
            vendor_version: "1.0.0".into(),
            manifest: Default::default(),
        }))
    }

    async fn get_plugin_capabilities(
        &self,
        _: Request<csi::GetPluginCapabilitiesRequest>,
    ) -> Answer<csi::GetPluginCapabilitiesResponse> {
        use csi::plugin_capability::{Service, Type, service};
        let service = csi::PluginCapability {
            r#type: Some(Type::Service(Service {
                r#type: service::Type::ControllerService as i32,
            })),
        };
        let mut capabilities = vec![service];
        if self.state.lock().unwrap().constrained {
            capabilities.push(csi::PluginCapability {
                r#type: Some(Type::Service(Service {
                    r#type: service::Type::VolumeAccessibilityConstraints as i32,
                })),
            });
        }
        Ok(Response::new(csi::GetPluginCapabilitiesResponse { capabilities }))
    }

    async fn probe(&self, _: Request<csi::ProbeRequest>) -> Answer<csi::ProbeResponse> {
        Ok(Response::new(csi::ProbeResponse { ready: Some(true) }))
    }
}

#[tonic::async_trait]
impl Controller for MemoryPlugin {
    async fn create_volume(&self, r: Request<csi::CreateVolumeRequest>) -> Answer<csi::CreateVolumeResponse> {
        self.called("CreateVolume")?;
        let r = r.into_inner();
        let capacity = r.capacity_range.map_or(0, |c| c.required_bytes);
        let mut s = self.state.lock().unwrap();
        let id = s
            .volumes
            .entry(r.name.clone())
            .or_insert_with(|| format!("mem-{}", r.name))
            .clone();
        Ok(Response::new(csi::CreateVolumeResponse {
            volume: Some(csi::Volume {
                volume_id: id,
                capacity_bytes: capacity,
                ..Default::default()
            }),
        }))
    }

    async fn delete_volume(&self, r: Request<csi::DeleteVolumeRequest>) -> Answer<csi::DeleteVolumeResponse> {
        self.called("DeleteVolume")?;
        let id = r.into_inner().volume_id;
        self.state.lock().unwrap().volumes.retain(|_, v| *v != id);
        Ok(Response::new(csi::DeleteVolumeResponse {}))
    }

    async fn controller_publish_volume(
        &self,
        _: Request<csi::ControllerPublishVolumeRequest>,
    ) -> Answer<csi::ControllerPublishVolumeResponse> {
        self.called("ControllerPublishVolume")?;
        Ok(Response::new(csi::ControllerPublishVolumeResponse::default()))
    }

    async fn controller_unpublish_volume(
        &self,
        _: Request<csi::ControllerUnpublishVolumeRequest>,
    ) -> Answer<csi::ControllerUnpublishVolumeResponse> {
        self.called("ControllerUnpublishVolume")?;
        Ok(Response::new(csi::ControllerUnpublishVolumeResponse {}))
    }

    async fn controller_get_capabilities(
        &self,
        _: Request<csi::ControllerGetCapabilitiesRequest>,
    ) -> Answer<csi::ControllerGetCapabilitiesResponse> {
        use csi::controller_service_capability::{Rpc, Type, rpc};
        let capabilities = [rpc::Type::CreateDeleteVolume, rpc::Type::PublishUnpublishVolume]
            .into_iter()
            .map(|t| csi::ControllerServiceCapability {
                r#type: Some(Type::Rpc(Rpc { r#type: t as i32 })),
            })
            .collect();
        Ok(Response::new(csi::ControllerGetCapabilitiesResponse {
            capabilities,
        }))
    }

    async fn validate_volume_capabilities(
        &self,
        _: Request<csi::ValidateVolumeCapabilitiesRequest>,
    ) -> Answer<csi::ValidateVolumeCapabilitiesResponse> {
        unimplemented()
    }
    async fn list_volumes(&self, _: Request<csi::ListVolumesRequest>) -> Answer<csi::ListVolumesResponse> {
        unimplemented()
    }
    async fn get_capacity(&self, _: Request<csi::GetCapacityRequest>) -> Answer<csi::GetCapacityResponse> {
        unimplemented()
    }
    async fn create_snapshot(
        &self,
        _: Request<csi::CreateSnapshotRequest>,
    ) -> Answer<csi::CreateSnapshotResponse> {
        unimplemented()
    }
    async fn delete_snapshot(
        &self,
        _: Request<csi::DeleteSnapshotRequest>,
    ) -> Answer<csi::DeleteSnapshotResponse> {
        unimplemented()
    }
    async fn list_snapshots(
        &self,
        _: Request<csi::ListSnapshotsRequest>,
    ) -> Answer<csi::ListSnapshotsResponse> {
        unimplemented()
    }
    async fn controller_expand_volume(
        &self,
        _: Request<csi::ControllerExpandVolumeRequest>,
    ) -> Answer<csi::ControllerExpandVolumeResponse> {
        unimplemented()
    }
    async fn controller_get_volume(
        &self,
        _: Request<csi::ControllerGetVolumeRequest>,
    ) -> Answer<csi::ControllerGetVolumeResponse> {
        unimplemented()
    }
    async fn controller_modify_volume(
        &self,
        _: Request<csi::ControllerModifyVolumeRequest>,
    ) -> Answer<csi::ControllerModifyVolumeResponse> {
        unimplemented()
    }
    async fn get_snapshot(&self, _: Request<csi::GetSnapshotRequest>) -> Answer<csi::GetSnapshotResponse> {
        unimplemented()
    }
}

#[tonic::async_trait]
impl Node for MemoryPlugin {
    async fn node_stage_volume(
        &self,
        _: Request<csi::NodeStageVolumeRequest>,
    ) -> Answer<csi::NodeStageVolumeResponse> {
        self.called("NodeStageVolume")?;
        Ok(Response::new(csi::NodeStageVolumeResponse {}))
    }

    async fn node_unstage_volume(
        &self,
        _: Request<csi::NodeUnstageVolumeRequest>,
    ) -> Answer<csi::NodeUnstageVolumeResponse> {
        self.called("NodeUnstageVolume")?;
        Ok(Response::new(csi::NodeUnstageVolumeResponse {}))
    }

    async fn node_publish_volume(
        &self,
        _: Request<csi::NodePublishVolumeRequest>,
    ) -> Answer<csi::NodePublishVolumeResponse> {
        self.called("NodePublishVolume")?;
        Ok(Response::new(csi::NodePublishVolumeResponse {}))
    }

    async fn node_unpublish_volume(
        &self,
        _: Request<csi::NodeUnpublishVolumeRequest>,
    ) -> Answer<csi::NodeUnpublishVolumeResponse> {
        self.called("NodeUnpublishVolume")?;
        Ok(Response::new(csi::NodeUnpublishVolumeResponse {}))
    }

    async fn node_get_capabilities(
        &self,
        _: Request<csi::NodeGetCapabilitiesRequest>,
    ) -> Answer<csi::NodeGetCapabilitiesResponse> {
        use csi::node_service_capability::{Rpc, Type, rpc};
        Ok(Response::new(csi::NodeGetCapabilitiesResponse {
            capabilities: vec![csi::NodeServiceCapability {
                r#type: Some(Type::Rpc(Rpc {
                    r#type: rpc::Type::StageUnstageVolume as i32,
                })),
            }],
        }))
    }

    async fn node_get_info(&self, _: Request<csi::NodeGetInfoRequest>) -> Answer<csi::NodeGetInfoResponse> {
        Ok(Response::new(csi::NodeGetInfoResponse {
            node_id: "memory-node".into(),
            ..Default::default()
        }))
    }

    async fn node_get_volume_stats(
        &self,
        _: Request<csi::NodeGetVolumeStatsRequest>,
    ) -> Answer<csi::NodeGetVolumeStatsResponse> {
        unimplemented()
    }
    async fn node_expand_volume(
        &self,
        _: Request<csi::NodeExpandVolumeRequest>,
    ) -> Answer<csi::NodeExpandVolumeResponse> {
        unimplemented()
    }
}
