//! `berth plugin check`: a conformance run against a live driver. It does what
//! the plugin's capabilities claim on a volume of its own, holds each answer
//! to the CSI spec (idempotency, NOT_FOUND, ALREADY_EXISTS, INVALID_ARGUMENT),
//! and removes everything it made, whatever failed on the way.

mod expand;
mod expect;
mod group;
mod identity;
mod modify;
mod node;
mod single_writer;
mod snapshot;
mod volume;

use std::collections::HashMap;
use std::path::PathBuf;

use serde::Serialize;

use berth_csi::fingerprint::{self, Fingerprint};
use berth_csi::{CsiClient, CsiError, proto};
use proto::controller_service_capability::rpc::Type as ControllerCap;
use proto::node_service_capability::rpc::Type as NodeCap;

/// What to check and how to shape the requests.
#[derive(Clone, Debug)]
pub struct CheckOptions {
    /// The endpoint named first: Controller (and Node, when it serves both).
    pub endpoint: CsiClient,
    /// A separate node endpoint, for drivers deployed as two processes.
    pub node_endpoint: Option<CsiClient>,
    /// The node to publish to when no endpoint serves the Node service.
    pub node_id: Option<String>,
    /// Where staging and target paths are made; the node plugin must see the
    /// same directory at the same path.
    pub work_dir: PathBuf,
    /// The capacity asked for the check's volume.
    pub size_bytes: i64,
    /// CreateVolume parameters (a StorageClass's, in Kubernetes terms).
    pub parameters: HashMap<String, String>,
    /// ControllerModifyVolume's parameters (a VolumeAttributesClass's);
    /// none skips the modification cases.
    pub mutable_parameters: HashMap<String, String>,
    /// Secrets sent with every call that carries them.
    pub secrets: HashMap<String, String>,
    /// A raw block volume instead of a mounted file system.
    pub block: bool,
    /// File system for a mounted volume; empty leaves it to the plugin.
    pub fs_type: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Passed,
    Failed,
    /// The answer differs from the spec's table where the spec's wording
    /// leaves the driver room (its own reasons, said in the case); not a failure.
    Warning,
    Skipped,
}

/// A case's name and the rule it holds the plugin to.
type Rule = (&'static str, &'static str);

/// One rule held against one call.
#[derive(Clone, Debug, Serialize)]
pub struct Case {
    /// The call and the situation, e.g. `DeleteVolume twice`.
    pub name: &'static str,
    /// What the spec asks of it, e.g. `succeeds both times`.
    pub rule: &'static str,
    pub verdict: Verdict,
    /// Why it failed, warned or was skipped; empty when it passed.
    pub reason: String,
    /// Whether the rule is one the spec says a driver MUST keep; false where
    /// its wording leaves room (a warning, never a failure).
    pub must: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub plugin: String,
    pub vendor_version: String,
    pub endpoint: String,
    pub node_endpoint: Option<String>,
    pub cases: Vec<Case>,
    pub passed: usize,
    pub failed: usize,
    pub warnings: usize,
    pub skipped: usize,
}

/// Runs every case against the plugin. Fails only when the work directory
/// cannot be made; a plugin that cannot even be fingerprinted is a failed case.
pub async fn run(opts: &CheckOptions) -> std::io::Result<Report> {
    let base = format!(
        "berth-check-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    );
    let work_dir = opts.work_dir.join(&base);
    std::fs::create_dir_all(&work_dir)?;
    let mut run = Run {
        opts,
        base,
        work_dir,
        controller: None,
        node: None,
        fingerprint: None,
        node_fingerprint: None,
        cases: Vec::new(),
        made: Made::default(),
        volume: None,
        grown_to: None,
        staged_at: None,
        published_at: None,
        publish_context: HashMap::new(),
    };
    if run.identity().await {
        run.volume_cases().await;
        run.expand_cases(expand::Phase::Unpublished).await;
        run.modify_cases().await;
        run.publish_cases().await;
        run.node_cases().await;
        run.single_writer_cases().await;
        run.expand_cases(expand::Phase::Published).await;
        run.snapshot_cases().await;
        run.group_cases().await;
        run.unpublish_cases().await;
        run.delete_cases().await;
    }
    run.clean_up().await;
    Ok(run.report())
}

/// Everything the check made that still has to go, in the order it is undone.
#[derive(Debug, Default)]
struct Made {
    /// (volume id, target path)
    node_published: Vec<(String, String)>,
    /// (volume id, staging path)
    staged: Vec<(String, String)>,
    /// (volume id, node id)
    controller_published: Vec<(String, String)>,
    snapshots: Vec<String>,
    /// (group snapshot id, its snapshots' ids)
    group_snapshots: Vec<(String, Vec<String>)>,
    volumes: Vec<String>,
    /// Directories under the work directory, removed (never recursively) last.
    dirs: Vec<PathBuf>,
}

/// Why a case failed or was skipped: one line of the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Why(pub String);

impl std::fmt::Display for Why {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<String> for Why {
    fn from(why: String) -> Self {
        Why(why)
    }
}

impl From<&str> for Why {
    fn from(why: &str) -> Self {
        Why(why.to_string())
    }
}

/// The first of two calls that must both succeed worked: the second may run.
pub(crate) fn after_first<T>(first: bool, need: Result<T, Why>, call: &str) -> Result<T, Why> {
    need.and_then(|t| {
        if first {
            Ok(t)
        } else {
            Err(Why::from(format!("needs the first {call} to have worked")))
        }
    })
}

fn forget<T: PartialEq>(list: &mut Vec<T>, item: &T) {
    list.retain(|x| x != item);
}

pub(crate) struct Run<'a> {
    opts: &'a CheckOptions,
    /// Prefix of every name the check gives (volumes, snapshots, paths).
    base: String,
    work_dir: PathBuf,
    controller: Option<CsiClient>,
    node: Option<CsiClient>,
    fingerprint: Option<Fingerprint>,
    node_fingerprint: Option<Fingerprint>,
    cases: Vec<Case>,
    made: Made,
    /// The volume the check made, once CreateVolume worked.
    volume: Option<proto::Volume>,
    /// Its capacity once ControllerExpandVolume grew it.
    grown_to: Option<i64>,
    staged_at: Option<String>,
    published_at: Option<String>,
    publish_context: HashMap<String, String>,
}

impl Run<'_> {
    fn record(&mut self, (name, rule): Rule, outcome: Result<(), Why>) {
        let (verdict, reason) = match outcome {
            Ok(()) => (Verdict::Passed, String::new()),
            Err(why) => (Verdict::Failed, why.0),
        };
        self.cases.push(Case {
            name,
            rule,
            verdict,
            reason,
            must: true,
        });
    }

    /// An answer the spec's table does not list, where its wording leaves
    /// the driver room: `why` says what was seen and why it may be meant.
    fn warn(&mut self, (name, rule): Rule, why: String) {
        self.cases.push(Case {
            name,
            rule,
            verdict: Verdict::Warning,
            reason: why,
            must: false,
        });
    }

    fn skip(&mut self, (name, rule): Rule, why: impl Into<String>) {
        self.cases.push(Case {
            name,
            rule,
            verdict: Verdict::Skipped,
            reason: why.into(),
            must: true,
        });
    }

    /// Runs a case that needs something (a client, a capability, the volume):
    /// skipped with the reason when that is missing.
    fn needs<T>(&mut self, rule: Rule, need: Result<T, Why>) -> Option<T> {
        match need {
            Ok(t) => Some(t),
            Err(why) => {
                self.skip(rule, why.0);
                None
            }
        }
    }

    fn fp(&self) -> &Fingerprint {
        self.fingerprint.as_ref().expect("fingerprinted before any case")
    }

    /// The fingerprint that describes the Node service, if any endpoint serves it.
    fn node_fp(&self) -> Option<&fingerprint::NodeInfo> {
        self.node_fingerprint
            .as_ref()
            .and_then(|f| f.node.as_ref())
            .or(self.fp().node.as_ref())
    }

    /// The controller client when it serves the Controller service and offers `cap`.
    fn controller_with(&self, cap: ControllerCap) -> Result<CsiClient, Why> {
        let client = self
            .controller
            .clone()
            .ok_or("no endpoint serves the Controller service")?;
        if self.fp().has_controller_capability(cap) {
            Ok(client)
        } else {
            Err(Why::from(format!(
                "the plugin does not offer {}",
                cap.as_str_name()
            )))
        }
    }

    /// The node client, and whether it offers `cap` (None: no capability needed).
    fn node_with(&self, cap: Option<NodeCap>) -> Result<CsiClient, Why> {
        let client = self
            .node
            .clone()
            .ok_or("no endpoint serves the Node service; name one with --node-endpoint")?;
        match cap {
            Some(cap) if !self.node_has(cap) => Err(Why::from(format!(
                "the node plugin does not offer {}",
                cap.as_str_name()
            ))),
            _ => Ok(client),
        }
    }

    fn node_has(&self, cap: NodeCap) -> bool {
        self.node_fp()
            .is_some_and(|n| n.capabilities.iter().any(|c| c == cap.as_str_name()))
    }

    fn volume_id(&self) -> Result<String, Why> {
        self.volume
            .as_ref()
            .map(|v| v.volume_id.clone())
            .ok_or_else(|| Why::from("needs the volume CreateVolume was to make"))
    }

    fn capability(&self) -> proto::VolumeCapability {
        use proto::volume_capability::{AccessMode, AccessType, BlockVolume, MountVolume, access_mode};
        let access_type = if self.opts.block {
            AccessType::Block(BlockVolume {})
        } else {
            AccessType::Mount(MountVolume {
                fs_type: self.opts.fs_type.clone(),
                ..Default::default()
            })
        };
        proto::VolumeCapability {
            access_mode: Some(AccessMode {
                mode: access_mode::Mode::SingleNodeWriter as i32,
            }),
            access_type: Some(access_type),
        }
    }

    fn secrets(&self) -> HashMap<String, String> {
        self.opts.secrets.clone()
    }

    /// A path under the work directory for the node calls. Staging
    /// directories are made here (the CO's job); targets only get their parent.
    fn path(&mut self, name: &str, make: bool) -> std::io::Result<String> {
        let path = self.work_dir.join(name);
        let dir = if make { path.clone() } else { self.work_dir.clone() };
        std::fs::create_dir_all(&dir)?;
        if make {
            self.made.dirs.push(path.clone());
        }
        Ok(path.display().to_string())
    }

    /// Undoes whatever the cases left behind, then checks nothing is left.
    async fn clean_up(&mut self) {
        const CLEAN_UP: Rule = ("clean-up", "everything the check made is gone again");
        let mut left = Vec::new();
        let made = std::mem::take(&mut self.made);
        if let Some(node) = self.node.clone() {
            for (volume_id, target_path) in made.node_published {
                let r = node
                    .node_unpublish_volume(proto::NodeUnpublishVolumeRequest {
                        volume_id: volume_id.clone(),
                        target_path: target_path.clone(),
                    })
                    .await;
                note(
                    &mut left,
                    format!("volume {volume_id} published at {target_path}"),
                    r,
                );
            }
            for (volume_id, staging_target_path) in made.staged {
                let r = node
                    .node_unstage_volume(proto::NodeUnstageVolumeRequest {
                        volume_id: volume_id.clone(),
                        staging_target_path: staging_target_path.clone(),
                    })
                    .await;
                note(
                    &mut left,
                    format!("volume {volume_id} staged at {staging_target_path}"),
                    r,
                );
            }
        }
        if let Some(controller) = self.controller.clone() {
            for (volume_id, node_id) in made.controller_published {
                let r = controller
                    .controller_unpublish_volume(proto::ControllerUnpublishVolumeRequest {
                        volume_id: volume_id.clone(),
                        node_id: node_id.clone(),
                        secrets: self.secrets(),
                    })
                    .await;
                note(
                    &mut left,
                    format!("volume {volume_id} published to node {node_id}"),
                    r,
                );
            }
            for (group_snapshot_id, snapshot_ids) in made.group_snapshots {
                let r = controller
                    .delete_volume_group_snapshot(proto::DeleteVolumeGroupSnapshotRequest {
                        group_snapshot_id: group_snapshot_id.clone(),
                        snapshot_ids,
                        secrets: self.secrets(),
                    })
                    .await;
                note(&mut left, format!("group snapshot {group_snapshot_id}"), r);
            }
            for snapshot_id in made.snapshots {
                let r = controller
                    .delete_snapshot(proto::DeleteSnapshotRequest {
                        snapshot_id: snapshot_id.clone(),
                        secrets: self.secrets(),
                    })
                    .await;
                note(&mut left, format!("snapshot {snapshot_id}"), r);
            }
            for volume_id in made.volumes {
                let r = controller
                    .delete_volume(proto::DeleteVolumeRequest {
                        volume_id: volume_id.clone(),
                        secrets: self.secrets(),
                    })
                    .await;
                note(&mut left, format!("volume {volume_id}"), r);
            }
            left.extend(self.listed_leftovers(&controller).await);
        }
        // Never recursive: a path still mounted must not take the volume's data with it.
        for dir in made.dirs.iter().rev().chain(std::iter::once(&self.work_dir)) {
            if let Err(e) = std::fs::remove_dir(dir)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                left.push(format!("directory {}: {e}", dir.display()));
            }
        }
        let outcome = if left.is_empty() {
            Ok(())
        } else {
            Err(Why::from(format!("left behind: {}", left.join("; "))))
        };
        self.record(CLEAN_UP, outcome);
    }

    /// Volumes named by this run that ListVolumes still shows.
    async fn listed_leftovers(&self, controller: &CsiClient) -> Vec<String> {
        if !self.fp().has_controller_capability(ControllerCap::ListVolumes) {
            return Vec::new();
        }
        let Some(ours) = self.volume.as_ref().map(|v| v.volume_id.clone()) else {
            return Vec::new();
        };
        match controller.list_all_volumes().await {
            Ok(all) if all.iter().any(|v| v.volume_id == ours) => {
                vec![format!("volume {ours} (still listed)")]
            }
            Ok(_) => Vec::new(),
            Err(e) => vec![format!("could not list volumes: {}", expect::describe(&e))],
        }
    }

    fn report(self) -> Report {
        let count = |v: Verdict| self.cases.iter().filter(|c| c.verdict == v).count();
        let (plugin, vendor_version) = self
            .fingerprint
            .as_ref()
            .map(|f| (f.name.clone(), f.vendor_version.clone()))
            .unwrap_or_default();
        Report {
            plugin,
            vendor_version,
            endpoint: self.opts.endpoint.endpoint().to_string(),
            node_endpoint: self.opts.node_endpoint.as_ref().map(|c| c.endpoint().to_string()),
            passed: count(Verdict::Passed),
            failed: count(Verdict::Failed),
            warnings: count(Verdict::Warning),
            skipped: count(Verdict::Skipped),
            cases: self.cases,
        }
    }
}

/// Notes what undoing `what` left behind; NOT_FOUND means it is gone (a
/// driver may answer so for what it does not know, or no longer has).
fn note<T>(left: &mut Vec<String>, what: String, r: Result<T, CsiError>) {
    match r {
        Err(e) if e.code() == tonic::Code::NotFound => {}
        Err(e) => left.push(format!("{what} ({})", expect::describe(&e))),
        Ok(_) => {}
    }
}
