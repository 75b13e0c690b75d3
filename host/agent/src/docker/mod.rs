//! Docker's and Podman's volume plugin protocol (JSON over HTTP/1.1 on a
//! unix socket), served for one node: each request becomes calls to the
//! Berth API, so a volume made through Docker is named, placed and retried
//! by the cluster's policies like any other. Mount publishes the volume on
//! this node and answers its target path; Unmount unpublishes it once the
//! last container holding it lets go, counted by Docker's mount IDs and
//! kept on disk (`holders.rs`), so a restart unpublishes nothing a running
//! container holds.

mod holders;
mod options;
mod protocol;
mod server;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use berth_proto::berth::v1 as api;
use tonic::transport::Channel;

pub use holders::Holders;
use protocol::{Answer, Volume, VolumeRequest};
pub use server::{ServeError, bind, serve};

/// How the plugin is served.
#[derive(Clone, Debug)]
pub struct DockerSettings {
    /// The Berth node this Docker runs on: volumes are published here.
    pub node: String,
    /// Whether this Docker may create and remove volumes (else only use them).
    pub create_volumes: bool,
    /// The CSI plugin a volume is made on when `-o plugin` is not given.
    pub plugin: Option<String>,
    /// How long Create, Mount, Unmount and Remove wait for Berth.
    pub wait: Duration,
    /// Where the holders are kept.
    pub holders: PathBuf,
}

pub struct DockerPlugin {
    api: api::berth_client::BerthClient<Channel>,
    settings: DockerSettings,
    holders: Holders,
    /// One Mount or Unmount of a volume at a time: a Mount never finds the
    /// volume being unpublished under it by another container's Unmount.
    busy: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// The last events of a volume, for an error Docker shows.
fn story(v: &api::Volume) -> String {
    let mut lines: Vec<String> = v
        .events
        .iter()
        .rev()
        .take(3)
        .rev()
        .map(|e| format!("{} {}: {}", e.step, e.code, e.message))
        .collect();
    if !v.failure.is_empty() {
        lines.push(format!("failed: {}", v.failure));
    }
    lines.join("; ")
}

fn grpc(e: tonic::Status) -> String {
    e.message().to_string()
}

impl DockerPlugin {
    pub fn new(channel: Channel, settings: DockerSettings) -> std::io::Result<DockerPlugin> {
        Ok(DockerPlugin {
            api: api::berth_client::BerthClient::new(channel),
            holders: Holders::open(&settings.holders)?,
            settings,
            busy: Mutex::default(),
        })
    }

    fn client(&self) -> api::berth_client::BerthClient<Channel> {
        self.api.clone()
    }

    fn volume_lock(&self, name: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut busy = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        busy.retain(|_, l| Arc::strong_count(l) > 1);
        busy.entry(name.to_string()).or_default().clone()
    }

    async fn get(&self, name: &str) -> Result<Option<api::Volume>, String> {
        match self
            .client()
            .get_volume(api::GetVolumeRequest { name: name.into() })
            .await
        {
            Ok(v) => Ok(Some(v.into_inner())),
            Err(e) if e.code() == tonic::Code::NotFound => Ok(None),
            Err(e) => Err(grpc(e)),
        }
    }

    /// Polls the volume until `done` says so (it is `None` once gone), the
    /// volume fails, or the wait runs out; the volume's story in the error.
    async fn until(
        &self,
        name: &str,
        what: &str,
        done: impl Fn(Option<&api::Volume>) -> bool,
    ) -> Result<Option<api::Volume>, String> {
        let deadline = tokio::time::Instant::now() + self.settings.wait;
        // Soon at first (a publish on a healthy node takes milliseconds), then less often.
        let mut pause = Duration::from_millis(5);
        loop {
            let v = self.get(name).await?;
            if done(v.as_ref()) {
                return Ok(v);
            }
            if let Some(v) = v.as_ref().filter(|v| !v.failure.is_empty()) {
                return Err(format!("{name} is not {what}: {}", story(v)));
            }
            if tokio::time::Instant::now() >= deadline {
                let why = v.as_ref().map(story).unwrap_or_default();
                return Err(format!(
                    "{name} was not {what} within {}: {why}",
                    humantime::format_duration(self.settings.wait)
                ));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(200));
        }
    }

    /// The target path on this node, when the volume is published here.
    fn published_here<'a>(&self, v: &'a api::Volume) -> Option<&'a str> {
        v.publications
            .iter()
            .find(|p| p.node == self.settings.node && p.state == "published")
            .map(|p| p.target_path.as_str())
    }

    fn held_here(&self, v: &api::Volume) -> bool {
        v.publications.iter().any(|p| p.node == self.settings.node)
    }

    async fn create(&self, req: VolumeRequest) -> Answer {
        if !self.settings.create_volumes {
            return Answer::error(format!(
                "this node's Docker may use Berth's volumes but not create them (create_volumes = true in [docker] allows it on node {})",
                self.settings.node
            ));
        }
        let opts = req.opts.unwrap_or_default();
        let spec = match options::spec(&req.name, &opts, self.settings.plugin.as_deref()) {
            Ok(s) => s,
            Err(e) => return Answer::error(e),
        };
        if let Err(e) = self
            .client()
            .create_volume(api::CreateVolumeRequest { spec: Some(spec) })
            .await
        {
            return Answer::error(grpc(e));
        }
        let ready = |v: Option<&api::Volume>| {
            v.is_some_and(|v| matches!(v.state.as_str(), "available" | "published"))
        };
        match self.until(&req.name, "created", ready).await {
            Ok(_) => Answer::default(),
            Err(e) => Answer::error(e),
        }
    }

    async fn remove(&self, req: VolumeRequest) -> Answer {
        if !self.settings.create_volumes {
            return Answer::error(format!(
                "this node's Docker may not remove Berth's volumes (create_volumes = true in [docker] allows it on node {})",
                self.settings.node
            ));
        }
        let held = self.holders.count(&req.name);
        if held > 0 {
            return Answer::error(format!(
                "{} is in use by {held} container(s) on this node",
                req.name
            ));
        }
        if let Err(e) = self
            .client()
            .delete_volume(api::DeleteVolumeRequest {
                name: req.name.clone(),
            })
            .await
        {
            return Answer::error(grpc(e));
        }
        match self.until(&req.name, "deleted", |v| v.is_none()).await {
            Ok(_) => Answer::default(),
            Err(e) => Answer::error(e),
        }
    }

    async fn mount(&self, req: VolumeRequest) -> Answer {
        let lock = self.volume_lock(&req.name);
        let _one = lock.lock().await;
        // The holder first: after a crash, its Unmount still finds it.
        if let Err(e) = self.holders.add(&req.name, &req.id) {
            return Answer::error(format!("keeping track of {}: {e}", req.name));
        }
        let published = async {
            self.client()
                .publish_volume(api::PublishVolumeRequest {
                    name: req.name.clone(),
                    node: self.settings.node.clone(),
                    readonly: false,
                })
                .await
                .map_err(grpc)?;
            let v = self
                .until(&req.name, "published here", |v| {
                    v.is_some_and(|v| self.published_here(v).is_some())
                })
                .await?;
            Ok::<_, String>(
                v.as_ref()
                    .and_then(|v| self.published_here(v))
                    .unwrap_or_default()
                    .to_string(),
            )
        }
        .await;
        match published {
            Ok(path) => Answer {
                mountpoint: Some(path),
                ..Answer::default()
            },
            Err(e) => {
                let _ = self.holders.remove(&req.name, &req.id);
                Answer::error(e)
            }
        }
    }

    async fn unmount(&self, req: VolumeRequest) -> Answer {
        let lock = self.volume_lock(&req.name);
        let _one = lock.lock().await;
        match self.holders.remove(&req.name, &req.id) {
            Ok(0) => {}
            Ok(_) => return Answer::default(),
            Err(e) => return Answer::error(format!("keeping track of {}: {e}", req.name)),
        }
        let unpublished = async {
            self.client()
                .unpublish_volume(api::UnpublishVolumeRequest {
                    name: req.name.clone(),
                    node: self.settings.node.clone(),
                })
                .await
                .map_err(grpc)?;
            self.until(&req.name, "unpublished here", |v| {
                v.is_none_or(|v| !self.held_here(v))
            })
            .await
        }
        .await;
        match unpublished {
            Ok(_) => Answer::default(),
            Err(e) => Answer::error(e),
        }
    }

    async fn path(&self, req: VolumeRequest) -> Answer {
        match self.get(&req.name).await {
            Ok(Some(v)) => Answer {
                mountpoint: Some(self.published_here(&v).unwrap_or_default().to_string()),
                ..Answer::default()
            },
            Ok(None) => Answer::error(format!("no volume named {}", req.name)),
            Err(e) => Answer::error(e),
        }
    }

    fn docker_volume(&self, v: &api::Volume, status: bool) -> Volume {
        let spec = v.spec.clone().unwrap_or_default();
        Volume {
            mountpoint: self.published_here(v).unwrap_or_default().to_string(),
            status: status.then(|| {
                let nodes: Vec<&str> = v.publications.iter().map(|p| p.node.as_str()).collect();
                let events: Vec<String> = v
                    .events
                    .iter()
                    .rev()
                    .take(5)
                    .rev()
                    .map(|e| format!("{} {}: {}", e.step, e.code, e.message))
                    .collect();
                serde_json::json!({
                    "state": v.state,
                    "plugin": spec.plugin,
                    "capacity_bytes": v.capacity_bytes,
                    "volume_id": v.volume_id,
                    "published_on": nodes,
                    "failure": v.failure,
                    "events": events,
                })
            }),
            name: spec.name,
        }
    }

    async fn get_one(&self, req: VolumeRequest) -> Answer {
        match self.get(&req.name).await {
            Ok(Some(v)) => Answer {
                volume: Some(self.docker_volume(&v, true)),
                ..Answer::default()
            },
            Ok(None) => Answer::error(format!("no volume named {}", req.name)),
            Err(e) => Answer::error(e),
        }
    }

    async fn list(&self) -> Answer {
        match self.client().list_volumes(api::ListVolumesRequest {}).await {
            Ok(all) => Answer {
                volumes: Some(
                    all.into_inner()
                        .volumes
                        .iter()
                        .filter(|v| v.state != "deleting")
                        .map(|v| self.docker_volume(v, false))
                        .collect(),
                ),
                ..Answer::default()
            },
            Err(e) => Answer::error(grpc(e)),
        }
    }

    /// Answers one request of the protocol: its path and JSON body.
    pub async fn answer(&self, path: &str, body: &[u8]) -> Result<String, String> {
        let request = || -> Result<VolumeRequest, String> {
            if body.iter().all(u8::is_ascii_whitespace) {
                return Ok(VolumeRequest::default());
            }
            serde_json::from_slice(body).map_err(|e| format!("the request is not the JSON expected: {e}"))
        };
        let answer = match path {
            "/Plugin.Activate" => return Ok(protocol::ACTIVATE.into()),
            "/VolumeDriver.Capabilities" => return Ok(protocol::CAPABILITIES.into()),
            "/VolumeDriver.Create" => self.create(request()?).await,
            "/VolumeDriver.Remove" => self.remove(request()?).await,
            "/VolumeDriver.Mount" => self.mount(request()?).await,
            "/VolumeDriver.Unmount" => self.unmount(request()?).await,
            "/VolumeDriver.Path" => self.path(request()?).await,
            "/VolumeDriver.Get" => self.get_one(request()?).await,
            "/VolumeDriver.List" => self.list().await,
            other => return Err(format!("{other} is not part of the volume plugin protocol")),
        };
        if !answer.err.is_empty() {
            tracing::warn!(request = path, error = %answer.err, "a Docker request failed");
        }
        serde_json::to_string(&answer).map_err(|e| e.to_string())
    }
}
