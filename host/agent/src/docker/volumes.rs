//! What the plugin asks of Berth, and the two ways it reaches it: the API
//! socket (`berth serve`'s own node), or the node-bounded `NodeVolumes`
//! service on the cluster endpoint (an agent's node), over the session's
//! channel to whichever server leads.

use std::time::Duration;

use berth_model::{DOCKER_NODE_HEADER, NODE_HEADER};
use berth_proto::berth::v1 as api;
use berth_proto::berth::v1::berth_client::BerthClient;
use berth_proto::berth::v1::node_volumes_client::NodeVolumesClient;
use tokio::sync::watch;
use tonic::Status;
use tonic::transport::Channel;

/// The six calls the volume plugin protocol needs. Each is safe to repeat.
#[tonic::async_trait]
pub trait Volumes: Send + Sync {
    async fn get(&self, name: &str) -> Result<api::Volume, Status>;
    async fn list(&self) -> Result<Vec<api::Volume>, Status>;
    async fn create(&self, spec: api::VolumeSpec) -> Result<(), Status>;
    async fn delete(&self, name: &str) -> Result<(), Status>;
    async fn publish(&self, name: &str, node: &str) -> Result<(), Status>;
    async fn unpublish(&self, name: &str, node: &str) -> Result<(), Status>;
}

/// Through the Berth API socket, which answers for whichever server leads:
/// every call carries the `berth-docker-node` header, so the server judges
/// it as the node's Docker's (its scope, its volumes, its publications).
pub struct ApiVolumes {
    client: BerthClient<Channel>,
    node: tonic::metadata::MetadataValue<tonic::metadata::Ascii>,
}

impl ApiVolumes {
    /// `node` is a plain name (checked when the config was read).
    pub fn new(channel: Channel, node: &str) -> ApiVolumes {
        ApiVolumes {
            client: BerthClient::new(channel),
            node: node.parse().expect("a node name is plain ASCII"),
        }
    }

    fn request<M>(&self, message: M) -> tonic::Request<M> {
        let mut request = tonic::Request::new(message);
        request
            .metadata_mut()
            .insert(DOCKER_NODE_HEADER, self.node.clone());
        request
    }
}

#[tonic::async_trait]
impl Volumes for ApiVolumes {
    async fn get(&self, name: &str) -> Result<api::Volume, Status> {
        let request = self.request(api::GetVolumeRequest { name: name.into() });
        Ok(self.client.clone().get_volume(request).await?.into_inner())
    }

    async fn list(&self) -> Result<Vec<api::Volume>, Status> {
        let request = self.request(api::ListVolumesRequest::default());
        let all = self.client.clone().list_volumes(request).await?;
        Ok(all.into_inner().volumes)
    }

    async fn create(&self, spec: api::VolumeSpec) -> Result<(), Status> {
        let request = self.request(api::CreateVolumeRequest { spec: Some(spec) });
        self.client.clone().create_volume(request).await.map(drop)
    }

    async fn delete(&self, name: &str) -> Result<(), Status> {
        let request = self.request(api::DeleteVolumeRequest {
            name: name.into(),
            force: false,
        });
        self.client.clone().delete_volume(request).await.map(drop)
    }

    async fn publish(&self, name: &str, node: &str) -> Result<(), Status> {
        let request = self.request(api::PublishVolumeRequest {
            name: name.into(),
            node: node.into(),
            readonly: false,
        });
        self.client.clone().publish_volume(request).await.map(drop)
    }

    async fn unpublish(&self, name: &str, node: &str) -> Result<(), Status> {
        let request = self.request(api::UnpublishVolumeRequest {
            name: name.into(),
            node: node.into(),
        });
        self.client.clone().unpublish_volume(request).await.map(drop)
    }
}

/// Through the leader's cluster endpoint, on the channel of the agent's
/// session: a call made while there is none, or cut off by a leader's
/// death, waits for the next session (up to `wait`) and is made again.
pub struct LeaderVolumes {
    leader: watch::Receiver<Option<Channel>>,
    node: tonic::metadata::MetadataValue<tonic::metadata::Ascii>,
    wait: Duration,
}

impl LeaderVolumes {
    /// `node` is a plain name (checked when the agent's config was read).
    pub fn new(leader: watch::Receiver<Option<Channel>>, node: &str, wait: Duration) -> LeaderVolumes {
        LeaderVolumes {
            leader,
            node: node.parse().expect("a node name is plain ASCII"),
            wait,
        }
    }

    async fn call<T, M, F, Fut>(&self, message: M, call: F) -> Result<T, Status>
    where
        M: Clone + Send,
        F: Fn(NodeVolumesClient<Channel>, tonic::Request<M>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let deadline = tokio::time::Instant::now() + self.wait;
        let mut leader = self.leader.clone();
        loop {
            let channel = match tokio::time::timeout_at(deadline, leader.wait_for(Option::is_some)).await {
                Ok(Ok(channel)) => channel.clone().expect("waited for a channel"),
                _ => {
                    return Err(Status::unavailable(format!(
                        "this agent has had no session with a Berth server for {}",
                        humantime::format_duration(self.wait)
                    )));
                }
            };
            let mut request = tonic::Request::new(message.clone());
            request.metadata_mut().insert(NODE_HEADER, self.node.clone());
            match call(NodeVolumesClient::new(channel), request).await {
                Err(s) if cut_off(&s) && tokio::time::Instant::now() < deadline => {
                    tracing::debug!(error = %s, "a Docker request's call to the leader is made again");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                answer => return answer.map(tonic::Response::into_inner),
            }
        }
    }
}

/// Whether a call failed on its way to the leader rather than being answered
/// by it: UNAVAILABLE, or a status tonic made from a transport error (it
/// carries that error as its source; one the server sent does not). A
/// connection the leader's death cut mid-call comes back as `UNKNOWN:
/// transport error`.
fn cut_off(status: &Status) -> bool {
    status.code() == tonic::Code::Unavailable || std::error::Error::source(status).is_some()
}

#[tonic::async_trait]
impl Volumes for LeaderVolumes {
    async fn get(&self, name: &str) -> Result<api::Volume, Status> {
        let request = api::GetVolumeRequest { name: name.into() };
        self.call(request, |mut c, r| async move { c.get_volume(r).await })
            .await
    }

    async fn list(&self) -> Result<Vec<api::Volume>, Status> {
        let all = self
            .call(api::ListVolumesRequest::default(), |mut c, r| async move {
                c.list_volumes(r).await
            })
            .await?;
        Ok(all.volumes)
    }

    async fn create(&self, spec: api::VolumeSpec) -> Result<(), Status> {
        let request = api::CreateVolumeRequest { spec: Some(spec) };
        self.call(request, |mut c, r| async move { c.create_volume(r).await })
            .await
            .map(drop)
    }

    async fn delete(&self, name: &str) -> Result<(), Status> {
        let request = api::DeleteVolumeRequest {
            name: name.into(),
            force: false,
        };
        self.call(request, |mut c, r| async move { c.delete_volume(r).await })
            .await
            .map(drop)
    }

    async fn publish(&self, name: &str, node: &str) -> Result<(), Status> {
        let request = api::PublishVolumeRequest {
            name: name.into(),
            node: node.into(),
            readonly: false,
        };
        self.call(request, |mut c, r| async move { c.publish_volume(r).await })
            .await
            .map(drop)
    }

    async fn unpublish(&self, name: &str, node: &str) -> Result<(), Status> {
        let request = api::UnpublishVolumeRequest {
            name: name.into(),
            node: node.into(),
        };
        self.call(request, |mut c, r| async move { c.unpublish_volume(r).await })
            .await
            .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_cut_off_on_its_way_is_made_again_and_an_answer_is_not() {
        let lost = Status::from_error(Box::new(std::io::Error::other("connection reset")));
        assert_eq!(lost.code(), tonic::Code::Unknown);
        assert!(cut_off(&lost), "a transport error, whatever its code");
        assert!(cut_off(&Status::unavailable("no leader yet")));
        for answered in [
            Status::unknown("the server's own UNKNOWN"),
            Status::not_found("no such volume"),
            Status::failed_precondition("not published here"),
        ] {
            assert!(!cut_off(&answered), "{answered}");
        }
    }
}
