//! Docker's and Podman's volume plugin protocol (JSON over HTTP/1.1 on a
//! unix socket), served for one node: each request becomes calls to Berth
//! (`volumes.rs`: the API socket for `berth serve`'s own node, the leader's
//! node-bounded service for an agent's), so a volume made through Docker is
//! named, placed and retried by the cluster's policies like any other.
//! Mount publishes the volume on this node and answers its target path;
//! Unmount unpublishes it once the last container holding it lets go,
//! counted by Docker's mount IDs and kept on disk (`holders.rs`), so a
//! restart unpublishes nothing a running container holds.

mod holders;
mod options;
mod protocol;
mod server;
mod volumes;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use berth_proto::berth::v1 as api;

pub use holders::Holders;
use options::OptionError;
use protocol::{Answer, Volume, VolumeRequest};
pub use server::{ServeError, bind, serve};
pub use volumes::{ApiVolumes, LeaderVolumes, Volumes};

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
    api: Box<dyn Volumes>,
    settings: DockerSettings,
    holders: Holders,
    /// One Mount or Unmount of a volume at a time: a Mount never finds the
    /// volume being unpublished under it by another container's Unmount.
    busy: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// A volume's last `n` events, a line each.
fn last_events(v: &api::Volume, n: usize) -> Vec<String> {
    let from = v.events.len().saturating_sub(n);
    v.events[from..]
        .iter()
        .map(|e| format!("{} {}: {}", e.step, e.code, e.message))
        .collect()
}

/// The last events of a volume, for an error Docker shows.
fn story(v: &api::Volume) -> String {
    let mut lines = last_events(v, 3);
    if !v.failure.is_empty() {
        lines.push(format!("failed: {}", v.failure));
    }
    lines.join("; ")
}

/// Why a request of Docker's was not done, as Docker shows it.
#[derive(Debug, thiserror::Error)]
enum RequestError {
    #[error("{}", .0.message())]
    Berth(#[from] tonic::Status),
    #[error(transparent)]
    Option(#[from] OptionError),
    #[error("{name} is not {what}: {story}")]
    Failed {
        name: String,
        what: &'static str,
        story: String,
    },
    #[error("{name} was not {what} within {}: {story}", humantime::format_duration(*.wait))]
    TimedOut {
        name: String,
        what: &'static str,
        wait: Duration,
        story: String,
    },
    #[error("keeping track of {name}: {source}")]
    Holders {
        name: String,
        #[source]
        source: std::io::Error,
    },
    #[error("no volume named {0}")]
    NoVolume(String),
    #[error("{0}")]
    Refused(String),
}

impl From<RequestError> for Answer {
    fn from(e: RequestError) -> Answer {
        Answer::error(e.to_string())
    }
}

/// A request Docker sent that the protocol has no answer for.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("the request is not the JSON expected: {0}")]
    Json(#[from] serde_json::Error),
    #[error("{0} is not part of the volume plugin protocol")]
    UnknownPath(String),
}

impl DockerPlugin {
    pub fn new(api: Box<dyn Volumes>, settings: DockerSettings) -> std::io::Result<DockerPlugin> {
        Ok(DockerPlugin {
            api,
            holders: Holders::open(&settings.holders)?,
            settings,
            busy: Mutex::default(),
        })
    }

    fn volume_lock(&self, name: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut busy = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        busy.retain(|_, l| Arc::strong_count(l) > 1);
        busy.entry(name.to_string()).or_default().clone()
    }

    async fn get(&self, name: &str) -> Result<Option<api::Volume>, RequestError> {
        match self.api.get(name).await {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.code() == tonic::Code::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Polls the volume until `done` says so (it is `None` once gone), the
    /// volume fails, or the wait runs out; the volume's story in the error.
    async fn until(
        &self,
        name: &str,
        what: &'static str,
        done: impl Fn(Option<&api::Volume>) -> bool,
    ) -> Result<Option<api::Volume>, RequestError> {
        let deadline = tokio::time::Instant::now() + self.settings.wait;
        // Soon at first (a publish on a healthy node takes milliseconds), then less often.
        let mut pause = Duration::from_millis(5);
        loop {
            let v = self.get(name).await?;
            if done(v.as_ref()) {
                return Ok(v);
            }
            if let Some(v) = v.as_ref().filter(|v| !v.failure.is_empty()) {
                return Err(RequestError::Failed {
                    name: name.into(),
                    what,
                    story: story(v),
                });
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(RequestError::TimedOut {
                    name: name.into(),
                    what,
                    wait: self.settings.wait,
                    story: v.as_ref().map(story).unwrap_or_default(),
                });
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

    async fn create(&self, req: VolumeRequest) -> Result<Answer, RequestError> {
        if !self.settings.create_volumes {
            return Err(RequestError::Refused(format!(
                "this node's Docker may use Berth's volumes but not create them (create_volumes = true in [docker] allows it on node {})",
                self.settings.node
            )));
        }
        let opts = req.opts.unwrap_or_default();
        let spec = options::spec(&req.name, &opts, self.settings.plugin.as_deref())?;
        self.api.create(spec).await?;
        let ready = |v: Option<&api::Volume>| {
            v.is_some_and(|v| matches!(v.state.as_str(), "available" | "published"))
        };
        self.until(&req.name, "created", ready).await?;
        Ok(Answer::default())
    }

    async fn remove(&self, req: VolumeRequest) -> Result<Answer, RequestError> {
        if !self.settings.create_volumes {
            return Err(RequestError::Refused(format!(
                "this node's Docker may not remove Berth's volumes (create_volumes = true in [docker] allows it on node {})",
                self.settings.node
            )));
        }
        let held = self.holders.count(&req.name);
        if held > 0 {
            return Err(RequestError::Refused(format!(
                "{} is in use by {held} container(s) on this node",
                req.name
            )));
        }
        // Another node's containers may hold it: never deleted under them.
        if let Some(v) = self.get(&req.name).await? {
            let on: Vec<&str> = v.publications.iter().map(|p| p.node.as_str()).collect();
            if !on.is_empty() {
                return Err(RequestError::Refused(format!(
                    "{} is published on {} (in use there): unmount it there first",
                    req.name,
                    on.join(", ")
                )));
            }
        }
        self.api.delete(&req.name).await?;
        self.until(&req.name, "deleted", |v| v.is_none()).await?;
        Ok(Answer::default())
    }

    async fn mount(&self, req: VolumeRequest) -> Result<Answer, RequestError> {
        let lock = self.volume_lock(&req.name);
        let _one = lock.lock().await;
        let holders = |source| RequestError::Holders {
            name: req.name.clone(),
            source,
        };
        // The holder first: after a crash, its Unmount still finds it.
        self.holders.add(&req.name, &req.id).map_err(holders)?;
        let published = async {
            self.api.publish(&req.name, &self.settings.node).await?;
            let v = self
                .until(&req.name, "published here", |v| {
                    v.is_some_and(|v| self.published_here(v).is_some())
                })
                .await?;
            Ok::<_, RequestError>(
                v.as_ref()
                    .and_then(|v| self.published_here(v))
                    .unwrap_or_default()
                    .to_string(),
            )
        }
        .await;
        match published {
            Ok(path) => Ok(Answer {
                mountpoint: Some(path),
                ..Answer::default()
            }),
            Err(e) => {
                let _ = self.holders.remove(&req.name, &req.id);
                Err(e)
            }
        }
    }

    async fn unmount(&self, req: VolumeRequest) -> Result<Answer, RequestError> {
        let lock = self.volume_lock(&req.name);
        let _one = lock.lock().await;
        let left = self
            .holders
            .remove(&req.name, &req.id)
            .map_err(|source| RequestError::Holders {
                name: req.name.clone(),
                source,
            })?;
        if left > 0 {
            return Ok(Answer::default());
        }
        // An operator's publication here is the operator's to undo.
        if let Some(v) = self.get(&req.name).await?
            && let Some(p) = v.publications.iter().find(|p| p.node == self.settings.node)
            && p.by == "api"
        {
            tracing::info!(volume = %req.name, "the last container let go; the volume stays published here for the operator's publication");
            return Ok(Answer::default());
        }
        self.api.unpublish(&req.name, &self.settings.node).await?;
        self.until(&req.name, "unpublished here", |v| {
            v.is_none_or(|v| !self.held_here(v))
        })
        .await?;
        Ok(Answer::default())
    }

    async fn path(&self, req: VolumeRequest) -> Result<Answer, RequestError> {
        let v = self
            .get(&req.name)
            .await?
            .ok_or(RequestError::NoVolume(req.name))?;
        Ok(Answer {
            mountpoint: Some(self.published_here(&v).unwrap_or_default().to_string()),
            ..Answer::default()
        })
    }

    fn docker_volume(&self, v: &api::Volume, status: bool) -> Volume {
        let spec = v.spec.clone().unwrap_or_default();
        let created_at = berth_model::id_created_ms(&v.id).map_or(String::new(), |ms| {
            humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
                .to_string()
        });
        Volume {
            mountpoint: self.published_here(v).unwrap_or_default().to_string(),
            created_at,
            status: status.then(|| {
                let nodes: Vec<&str> = v.publications.iter().map(|p| p.node.as_str()).collect();
                let events = last_events(v, 5);
                serde_json::json!({
                    "state": v.state,
                    "plugin": spec.plugin,
                    "capacity_bytes": v.capacity_bytes,
                    "volume_id": v.volume_id,
                    "published_on": nodes,
                    // Berth's labels (`-o label.K=V`); Docker's own
                    // `--label`s are Docker's, under Labels.
                    "labels": spec.labels,
                    "failure": v.failure,
                    "events": events,
                })
            }),
            name: spec.name,
        }
    }

    async fn get_one(&self, req: VolumeRequest) -> Result<Answer, RequestError> {
        let v = self
            .get(&req.name)
            .await?
            .ok_or(RequestError::NoVolume(req.name))?;
        Ok(Answer {
            volume: Some(self.docker_volume(&v, true)),
            ..Answer::default()
        })
    }

    async fn list(&self) -> Result<Answer, RequestError> {
        let all = self.api.list().await?;
        Ok(Answer {
            volumes: Some(
                all.iter()
                    .filter(|v| v.state != "deleting")
                    .map(|v| self.docker_volume(v, false))
                    .collect(),
            ),
            ..Answer::default()
        })
    }

    /// Answers one request of the protocol: its path and JSON body.
    pub async fn answer(&self, path: &str, body: &[u8]) -> Result<String, ProtocolError> {
        let request = || -> Result<VolumeRequest, ProtocolError> {
            if body.iter().all(u8::is_ascii_whitespace) {
                return Ok(VolumeRequest::default());
            }
            Ok(serde_json::from_slice(body)?)
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
            other => return Err(ProtocolError::UnknownPath(other.to_string())),
        };
        let answer = answer.unwrap_or_else(|e| {
            tracing::warn!(request = path, error = %e, "a Docker request failed");
            e.into()
        });
        Ok(serde_json::to_string(&answer)?)
    }
}
