//! The Identity service.

use std::sync::Arc;

use berth_proto::csi::v1 as csi;
use csi::plugin_capability::service::Type as ServiceType;
use tonic::{Request, Response, Status};

use crate::config::{Config, Misbehaviour};
use crate::faults::Faults;
use crate::mounts::Method;

pub struct Identity {
    config: Arc<Config>,
    faults: Arc<Faults>,
    mount_method: Method,
}

impl Identity {
    pub fn new(config: Arc<Config>, faults: Arc<Faults>, mount_method: Method) -> Self {
        Identity {
            config,
            faults,
            mount_method,
        }
    }
}

fn service(t: ServiceType) -> csi::PluginCapability {
    csi::PluginCapability {
        r#type: Some(csi::plugin_capability::Type::Service(
            csi::plugin_capability::Service { r#type: t as i32 },
        )),
    }
}

#[tonic::async_trait]
impl csi::identity_server::Identity for Identity {
    async fn get_plugin_info(
        &self,
        _: Request<csi::GetPluginInfoRequest>,
    ) -> Result<Response<csi::GetPluginInfoResponse>, Status> {
        self.faults.inject("GetPluginInfo").await?;
        let mut resp = csi::GetPluginInfoResponse {
            name: self.config.name.clone(),
            vendor_version: self.config.vendor_version.clone(),
            manifest: [
                (
                    "mount-mode".to_string(),
                    format!("{:?}", self.mount_method).to_lowercase(),
                ),
                ("source".to_string(), "berth/examples/hostpath-plugin".to_string()),
            ]
            .into(),
        };
        for m in &self.config.misbehave {
            match m {
                Misbehaviour::EmptyName => resp.name.clear(),
                Misbehaviour::BadName => resp.name = "bad_name.example.com".into(),
                Misbehaviour::EmptyVersion => resp.vendor_version.clear(),
                _ => {}
            }
        }
        Ok(Response::new(resp))
    }

    async fn get_plugin_capabilities(
        &self,
        _: Request<csi::GetPluginCapabilitiesRequest>,
    ) -> Result<Response<csi::GetPluginCapabilitiesResponse>, Status> {
        self.faults.inject("GetPluginCapabilities").await?;
        let mut capabilities = Vec::new();
        // The driver's capabilities, whichever services this process
        // serves: every process of one driver reports the same.
        capabilities.push(service(ServiceType::ControllerService));
        if !self.config.topology.is_empty() {
            capabilities.push(service(ServiceType::VolumeAccessibilityConstraints));
        }
        if self.config.offers("CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT") {
            capabilities.push(service(ServiceType::GroupControllerService));
        }
        if self.config.offers("EXPAND_VOLUME") {
            // Volumes grow while published; the spec asks expanders to say when.
            capabilities.push(csi::PluginCapability {
                r#type: Some(csi::plugin_capability::Type::VolumeExpansion(
                    csi::plugin_capability::VolumeExpansion {
                        r#type: csi::plugin_capability::volume_expansion::Type::Online as i32,
                    },
                )),
            });
        }
        Ok(Response::new(csi::GetPluginCapabilitiesResponse { capabilities }))
    }

    async fn probe(&self, _: Request<csi::ProbeRequest>) -> Result<Response<csi::ProbeResponse>, Status> {
        self.faults.inject("Probe").await?;
        Ok(Response::new(csi::ProbeResponse {
            // Unset means ready; a plugin that omits it has nothing else to say.
            ready: match self.faults.ready() {
                true if self.config.omits(crate::config::Omit::ProbeReady) => None,
                ready => Some(ready),
            },
        }))
    }
}
