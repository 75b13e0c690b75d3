//! The volume calls a node's Docker makes, whichever way they arrive: an
//! agent's `NodeVolumes` (the node from its certificate), or the whole API
//! with the `berth-docker-node` header (`berth serve`'s own Docker plugin,
//! a caller that could do everything and asks to be bounded). Both go to
//! the manager's Docker requests, and answer with [`docker_view`]: only
//! what Docker's protocol shows.

use berth_proto::berth::v1 as api;
use tonic::{Request, Status};

use super::codes::{Refusal, status};
use super::convert::{spec_from_api, volume_summary};
use super::{BerthApi, volume_to_api};
use crate::manager::{RequestError, VolumeManager};
use crate::model::{DOCKER_NODE_HEADER, VolumeRecord};

/// One of the volume calls Docker's protocol needs.
pub(super) enum DockerCall {
    Get(String),
    Create(Box<api::VolumeSpec>),
    Delete(String),
    Publish { name: String, readonly: bool },
    Unpublish(String),
}

/// The node whose Docker a call of the whole API is made for, when it
/// carries the header (a plain node name, or the call is refused).
pub(super) fn docker_node<T>(request: &Request<T>) -> Result<Option<String>, Status> {
    let Some(value) = request.metadata().get(DOCKER_NODE_HEADER) else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .filter(|n| crate::model::bounds::name(n).is_ok())
        .map(|n| Some(n.to_string()))
        .ok_or_else(|| {
            status(Refusal::Missing(
                "a plain node name in the berth-docker-node header",
            ))
        })
}

/// A volume as a node's Docker may see it: its name, plugin, size, access,
/// labels, state, events and where it is published, with the target path
/// on `node` only; never its parameters, secret's name, CSI name, context,
/// decisions or other nodes' paths.
pub(super) fn docker_view(m: &VolumeManager, r: &VolumeRecord, node: &str, events: bool) -> api::Volume {
    let full = match events {
        true => volume_to_api(m, r),
        false => volume_summary(m, r),
    };
    let spec = full.spec.unwrap_or_default();
    api::Volume {
        id: full.id,
        spec: Some(api::VolumeSpec {
            name: spec.name,
            plugin: spec.plugin,
            required_bytes: spec.required_bytes,
            limit_bytes: spec.limit_bytes,
            access_mode: spec.access_mode,
            block: spec.block,
            fs_type: spec.fs_type,
            labels: spec.labels,
            ..api::VolumeSpec::default()
        }),
        state: full.state,
        volume_id: full.volume_id,
        capacity_bytes: full.capacity_bytes,
        publications: full
            .publications
            .into_iter()
            .map(|p| match p.node == node {
                true => p,
                false => api::Publication {
                    target_path: String::new(),
                    by: String::new(),
                    ..p
                },
            })
            .collect(),
        failure: full.failure,
        generation: full.generation,
        waiting: full.waiting,
        waiting_since_ms: full.waiting_since_ms,
        expanding: full.expanding,
        events: full.events,
        made_by: full.made_by,
        ..api::Volume::default()
    }
}

impl BerthApi {
    /// Makes `call` for `node`'s Docker, bounded to what that Docker may touch.
    pub(super) async fn docker_call(&self, node: &str, call: DockerCall) -> Result<api::Volume, Status> {
        let asker = berth_manager::admission::Asker {
            identity: format!("docker:{node}"),
            policies: Vec::new(),
        };
        berth_manager::admission::asked_by(asker, self.docker_call_as(node, call)).await
    }

    async fn docker_call_as(&self, node: &str, call: DockerCall) -> Result<api::Volume, Status> {
        let m = &self.manager;
        let r = match call {
            DockerCall::Get(name) => m.docker().docker_get(node, &name),
            DockerCall::Create(spec) => {
                if !spec.docker_scope.is_empty() {
                    return Err(status(RequestError::Invalid(
                        "docker_scope: the operator's to set, through the API".into(),
                    )));
                }
                let spec = spec_from_api(*spec).map_err(status)?;
                m.docker().docker_create(node, spec).await
            }
            DockerCall::Delete(name) => m.docker().docker_delete(node, &name).await,
            DockerCall::Publish { name, readonly } => m.docker().docker_publish(node, &name, readonly).await,
            DockerCall::Unpublish(name) => m.docker().docker_unpublish(node, &name).await,
        }
        .map_err(status)?;
        Ok(docker_view(m, &r, node, true))
    }

    /// The volumes `node`'s Docker may see.
    pub(super) fn docker_list(&self, node: &str) -> api::ListVolumesResponse {
        let m = &self.manager;
        api::ListVolumesResponse {
            volumes: m
                .docker()
                .docker_list(node)
                .iter()
                .map(|r| docker_view(m, r, node, false))
                .collect(),
            // Docker's plugin protocol lists in one answer.
            next_token: String::new(),
        }
    }
}
