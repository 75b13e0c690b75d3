//! Driving each volume on the node to the level the server wants, one step
//! at a time, each step durable in the node record before it is reported.
//!
//! Stage and publish raise the wanted level; unpublish and unstage lower it.
//! Lowering needs nothing from the server (the record has the volume id and
//! the paths are the agent's), so teardown goes on while the server is away.
//! A failure is reported and waits for the server's next attempt or a new
//! desired set: whether and when to try again is the retry policy's to say,
//! for node calls as for controller calls.
//!
//! The record is written before a step that raises a volume (so it names
//! every path a plugin may have mounted, a crash between the call and the
//! record included) and after a step that lowers it; what it holds is an
//! upper bound, and undoing starts from it.

use std::sync::{Arc, Mutex};

use berth_proto::berth::v1 as wire;
use tokio::sync::mpsc;

use crate::OpenError;
use crate::calls::{self, Params, Paths};
use crate::failures::{failure_to_wire, gone_is_done, recording};
use crate::mount_check;
use crate::mounts::MountTable;
use crate::plugins::NodePlugins;
use crate::record::{Held, Level, NodeRecord};
use berth_csi::{CsiError, Failure};
use berth_model::{ById, Identified};

/// A volume this node holds or is asked to, by its Berth id. Kept boxed,
/// by the id it holds ([`ById`]): at a million volumes on one node a map
/// of whole entries was a third of a gigabyte, mostly empty slots.
#[derive(Default)]
struct Volume {
    id: String,
    /// What the node is known to hold; `Absent` with no plugin when it
    /// holds nothing yet.
    held: Option<Held>,
    /// The level the record says: at least `held`'s, higher while a raise
    /// was asked of the plugin and not confirmed, or a lowering is under way.
    recorded: Level,
    /// The most the plugin may hold, as far as this process knows: what
    /// undoing starts from (the record's level, lowered by each call done).
    bound: Level,
    wanted: Level,
    /// The server's parameters for raising, secrets included: in memory
    /// only, and only until the volume is where it is wanted.
    params: Option<Box<Params>>,
    attempt: u64,
    running: bool,
    /// The attempt whose failure waits for the server.
    stalled: Option<u64>,
}

impl Identified for Volume {
    fn id(&self) -> &str {
        &self.id
    }
}

impl Volume {
    fn named(id: &str) -> Volume {
        Volume {
            id: id.to_string(),
            ..Volume::default()
        }
    }

    fn level(&self) -> Level {
        self.held.as_ref().map_or(Level::Absent, |h| h.level)
    }

    fn stages(&self) -> bool {
        match (&self.held, &self.params) {
            (Some(h), _) if h.level > Level::Absent => h.staged,
            (_, Some(p)) => p.staged,
            (Some(h), None) => h.staged,
            (None, None) => true,
        }
    }

    /// The wanted level as this plugin has it: without staging, `Staged` is
    /// no different from `Absent`.
    fn target(&self) -> Level {
        if self.wanted == Level::Staged && !self.stages() {
            Level::Absent
        } else {
            self.wanted
        }
    }

    fn next(&self) -> Option<Step> {
        let (level, target) = (self.level(), self.target());
        if target > level {
            // Raising needs the server's parameters (and secrets), held in memory only.
            self.params.as_ref()?;
            return Some(if level == Level::Absent && self.stages() {
                Step::Stage
            } else {
                Step::Publish
            });
        }
        // Lowering starts from the most the plugin may have done.
        let top = self.bound.max(level);
        if target >= top {
            return None;
        }
        Some(if top == Level::Published {
            Step::Unpublish
        } else {
            Step::Unstage
        })
    }
}

#[derive(Clone, Copy, Debug)]
enum Step {
    Stage,
    Publish,
    Unpublish,
    Unstage,
}

pub struct Converger {
    volumes: Mutex<ById<Volume>>,
    record: NodeRecord,
    plugins: Arc<NodePlugins>,
    paths: Paths,
    link: Mutex<Option<crate::ToServer>>,
    /// Volumes the node does not show whose plugin has not confirmed it let go.
    unconfirmed: Mutex<Vec<String>>,
}

impl Converger {
    /// Asks again, for each volume the node did not show at start, that its
    /// plugin let go ([`mount_check::let_go`]). True when one was recorded
    /// lower: the server hears it when the agent registers again.
    pub async fn confirm_lost(self: &Arc<Self>) -> bool {
        let ids = std::mem::take(&mut *self.unconfirmed.lock().unwrap_or_else(|p| p.into_inner()));
        if ids.is_empty() {
            return false;
        }
        let mounts = match MountTable::read() {
            Ok(m) => m,
            Err(e) => {
                tracing::debug!(error = %e, "cannot read the mount table; unconfirmed volumes wait");
                self.unconfirmed
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .extend(ids);
                return false;
            }
        };
        let (mut lowered, mut still) = (false, Vec::new());
        // One failure per plugin a round: a hung plugin costs one deadline.
        let mut failed = std::collections::BTreeSet::new();
        for id in ids {
            // Taken as a drive takes a volume; one being driven (the server
            // undoing it) is asked about next time.
            let held = {
                let mut volumes = self.lock();
                match volumes.get_mut(&id) {
                    Some(v) if v.running => {
                        still.push(id);
                        continue;
                    }
                    Some(v) if v.held.as_ref().is_some_and(|h| failed.contains(&h.plugin)) => {
                        still.push(id);
                        continue;
                    }
                    Some(v) if v.level() > Level::Absent => {
                        v.running = true;
                        v.held.clone()
                    }
                    _ => None,
                }
            };
            let Some(mut h) = held else { continue };
            let before = h.level;
            let result = match mount_check::shown(&self.paths, &mounts, &id, &h) {
                true => Ok(false),
                false => {
                    mount_check::let_go(&self.record, &self.plugins, &self.paths, &mounts, &id, &mut h).await
                }
            };
            if let Some(v) = self.lock().get_mut(&id) {
                v.running = false;
                if h.level != before {
                    (v.recorded, v.bound) = (h.level, h.level);
                    v.held = Some(h.clone());
                }
            }
            lowered |= h.level != before;
            if let Err(e) = result {
                tracing::debug!(volume = %id, error = %e, "the plugin has not confirmed it let go yet");
                failed.insert(h.plugin.clone());
                still.push(id.clone());
            }
            self.kick(&id);
        }
        self.unconfirmed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(still);
        lowered
    }

    /// Whether the node record takes writes.
    pub fn record_health(&self) -> Result<(), berth_store::CommitError> {
        self.record.health()
    }

    /// Loads the record and checks it against the mount table
    /// ([`mount_check::check`]): a volume whose target or staging path no
    /// longer shows it is let go through its plugin and recorded lower, so
    /// the server has it done again.
    pub async fn open(
        record: NodeRecord,
        plugins: Arc<NodePlugins>,
        paths: Paths,
        record_place: &str,
    ) -> Result<Arc<Self>, OpenError> {
        let mut held = record.load().await?;
        held.retain(|id, _| match berth_model::bounds::plain("volume id", id) {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(error = %e, "the node record holds a volume id that is not a plain name; it is left alone");
                false
            }
        });
        let unconfirmed = mount_check::check(&record, &plugins, &paths, record_place, &mut held).await?;
        let volumes = held
            .into_iter()
            .filter(|(_, h)| h.level > Level::Absent)
            .map(|(id, h)| Volume {
                id,
                recorded: h.level,
                bound: h.level,
                wanted: h.level,
                held: Some(h),
                ..Volume::default()
            })
            .collect();
        Ok(Arc::new(Converger {
            volumes: Mutex::new(volumes),
            record,
            plugins,
            paths,
            link: Mutex::new(None),
            unconfirmed: Mutex::new(unconfirmed),
        }))
    }

    pub fn paths(&self) -> &Paths {
        &self.paths
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ById<Volume>> {
        self.volumes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reports go to `link` from now on (or nowhere, with `None`).
    pub fn set_link(&self, link: Option<crate::ToServer>) {
        *self.link.lock().unwrap_or_else(|p| p.into_inner()) = link;
    }

    /// A report on the session. With its queue full (the server not reading)
    /// the report is dropped: the session is about to be given up, and the
    /// next one registers with what the node holds, which says the same.
    fn send(&self, message: wire::agent_message::Message) {
        if let Some(link) = &*self.link.lock().unwrap_or_else(|p| p.into_inner())
            && let Err(mpsc::error::TrySendError::Full(_)) = link.try_send(wire::AgentMessage {
                message: Some(message),
            })
        {
            tracing::warn!("the server is not reading this session; a report waits for the next one");
        }
    }

    /// What the node holds, for registering.
    pub fn held(&self) -> Vec<wire::Held> {
        self.lock()
            .values()
            .filter_map(|v| {
                let h = v.held.as_ref().filter(|h| h.level > Level::Absent)?;
                Some(wire::Held {
                    berth_id: v.id.clone(),
                    plugin: h.plugin.to_string(),
                    volume_id: h.volume_id.clone(),
                    level: h.level.to_wire(),
                })
            })
            .collect()
    }

    /// A complete desired set: listed volumes go to their level, the rest are torn down.
    pub fn apply_set(self: &Arc<Self>, set: wire::DesiredSet) {
        let listed = set.volumes.len();
        // Only what has something to do is driven (or dropped): a node that
        // agrees with the set, the usual restart, costs no task per volume.
        let ids: Vec<String> = {
            let mut volumes = self.lock();
            for v in volumes.values_mut() {
                v.wanted = Level::Absent;
                v.stalled = None;
            }
            for d in set.volumes {
                if let Err(e) = berth_model::bounds::plain("volume id", &d.berth_id) {
                    tracing::warn!(error = %e, "the desired set names a volume id that is not a plain name; left out");
                    continue;
                }
                let id = d.berth_id;
                volumes.get_or_insert_with(&id, || Volume::named(&id)).wanted = Level::from_wire(d.level);
            }
            volumes
                .values()
                .filter(|v| v.next().is_some() || v.level() == Level::Absent)
                .map(|v| v.id.clone())
                .collect()
        };
        tracing::info!(
            version = set.version,
            volumes = listed,
            driving = ids.len(),
            "desired set received"
        );
        for id in ids {
            self.kick(&id);
        }
        if listed >= berth_metrics::allocator::TRIM_FROM {
            berth_metrics::allocator::release_freed();
        }
    }

    /// One operation: raises or lowers the volume's wanted level. Answered at
    /// once when the node is already there.
    pub fn apply_op(self: &Arc<Self>, op: wire::Operation) {
        use wire::OperationKind as Kind;
        let kind = Kind::try_from(op.kind).unwrap_or(Kind::Unspecified);
        if let Err(e) = berth_model::bounds::plain("volume id", &op.berth_id) {
            tracing::warn!(error = %e, "an operation names a volume id that is not a plain name; refused");
            let call = match kind {
                Kind::Stage => "NodeStageVolume",
                Kind::Publish => "NodePublishVolume",
                Kind::Unpublish => "NodeUnpublishVolume",
                Kind::Unstage | Kind::Unspecified => "NodeUnstageVolume",
            };
            let failure = calls::refused_id(call, e);
            self.report(&op.berth_id, op.attempt, Level::Absent, Some(&failure));
            return;
        }
        {
            let mut volumes = self.lock();
            let v = volumes.get_or_insert_with(&op.berth_id, || Volume::named(&op.berth_id));
            v.attempt = op.attempt;
            v.stalled = None;
            match kind {
                Kind::Stage | Kind::Publish => {
                    let level = if kind == Kind::Stage {
                        Level::Staged
                    } else {
                        Level::Published
                    };
                    v.wanted = v.wanted.max(level);
                    v.params = Some(Box::new(Params {
                        volume_id: op.volume_id,
                        staged: op.staged,
                        capability: op.capability.unwrap_or_default(),
                        publish_context: op.publish_context,
                        volume_context: op.volume_context,
                        secrets: op.secrets,
                        readonly: op.readonly,
                    }));
                    if v.held.is_none() {
                        v.held = Some(Held {
                            plugin: op.plugin.into(),
                            volume_id: v.params.as_ref().map(|p| p.volume_id.clone()).unwrap_or_default(),
                            level: Level::Absent,
                            staged: op.staged,
                        });
                    }
                }
                Kind::Unpublish => v.wanted = v.wanted.min(Level::Staged),
                Kind::Unstage => v.wanted = Level::Absent,
                Kind::Unspecified => {}
            }
            if v.next().is_none() {
                v.params = None;
                let level = v.level();
                let attempt = v.attempt;
                drop(volumes);
                self.report(&op.berth_id, attempt, level, None);
                return;
            }
        }
        self.kick(&op.berth_id);
    }

    fn report(&self, berth_id: &str, attempt: u64, level: Level, failure: Option<&CsiError>) {
        self.send(wire::agent_message::Message::Report(wire::Report {
            berth_id: berth_id.to_string(),
            attempt,
            level: level.to_wire(),
            failure: failure.map(failure_to_wire),
        }));
    }

    /// Starts driving the volume unless it is already being driven or has
    /// nothing to do.
    fn kick(self: &Arc<Self>, id: &str) {
        {
            let mut volumes = self.lock();
            let Some(v) = volumes.get_mut(id) else { return };
            if v.running || v.stalled.is_some_and(|a| a == v.attempt) || v.next().is_none() {
                if v.level() == Level::Absent && v.wanted == Level::Absent && !v.running {
                    volumes.remove(id);
                }
                return;
            }
            v.running = true;
        }
        let me = self.clone();
        let id = id.to_string();
        tokio::spawn(async move { me.drive(id).await });
    }

    async fn drive(self: Arc<Self>, id: String) {
        loop {
            let (step, target, held, params, attempt) = {
                let mut volumes = self.lock();
                let Some(v) = volumes.get_mut(&id) else { return };
                let Some(step) = v.next().filter(|_| v.stalled != Some(v.attempt)) else {
                    v.running = false;
                    if v.next().is_none() {
                        v.params = None;
                    }
                    if v.level() == Level::Absent && v.wanted == Level::Absent {
                        volumes.remove(&id);
                    }
                    return;
                };
                (
                    step,
                    v.target(),
                    v.held.clone().unwrap_or_else(|| Held {
                        plugin: Default::default(),
                        volume_id: String::new(),
                        level: Level::Absent,
                        staged: true,
                    }),
                    v.params.clone(),
                    v.attempt,
                )
            };
            let raises = matches!(step, Step::Stage | Step::Publish);
            let mut now = held.clone();
            if let Some(p) = &params
                && held.level == Level::Absent
            {
                now.staged = p.staged;
                now.volume_id = p.volume_id.clone();
            }
            // A raise is recorded before its first call, at the level it
            // goes to: one write names every path the plugin may mount on
            // the way (stage, then publish).
            let ahead = match raises {
                true => {
                    now.level = target;
                    self.write_ahead(&id, &now).await
                }
                false => Ok(()),
            };
            // What the node holds after the call (when it was made and
            // answered OK), and what failed: the call, or recording it.
            let (done, failed) = match ahead {
                Ok(()) => match self.call(step, &id, &held, params.as_deref()).await {
                    Ok(level) => {
                        now.level = level;
                        // A lowering is recorded once it is where it goes: the
                        // record above it meanwhile only makes a restart undo
                        // from higher, which the mount table then corrects.
                        let written = match raises || level > target {
                            true => Ok(()),
                            false => self.record.put(&id, &now).await.map_err(recording),
                        };
                        (Some(now), written.err())
                    }
                    Err(e) => (None, Some(e)),
                },
                Err(e) => (None, Some(e)),
            };
            let (level, failure, arrived) = {
                let mut volumes = self.lock();
                let Some(v) = volumes.get_mut(&id) else { return };
                // A call done is what the node holds, recorded or not: a
                // lowering whose record failed is done all the same (the
                // record stays higher, which a restart undoes again), and
                // a raise asked next starts from where the node is.
                if let Some(now) = &done {
                    v.held = Some(now.clone());
                    if !raises {
                        v.bound = now.level;
                        if now.level <= target && failed.is_none() {
                            v.recorded = now.level;
                        }
                    }
                }
                if failed.is_some() {
                    v.stalled = Some(attempt);
                    v.running = false;
                }
                (v.level(), failed.as_ref(), v.next().is_none())
            };
            if let Some(e) = failure {
                tracing::warn!(id = %id, ?step, attempt, error = %e, "node step failed");
            }
            // Reported where the volume arrives, or where a call failed.
            if failure.is_some() || arrived {
                self.report(&id, attempt, level, failure);
            }
            if failure.is_some() {
                return;
            }
        }
    }

    /// Records `now` (a raise about to be asked) unless the record already
    /// says as much.
    async fn write_ahead(&self, id: &str, now: &Held) -> Result<(), CsiError> {
        if let Some(v) = self.lock().get_mut(id)
            && v.recorded >= now.level
        {
            // Written already (an earlier raise, or a lowering that failed).
            v.bound = v.bound.max(now.level);
            return Ok(());
        }
        self.record.put(id, now).await.map_err(recording)?;
        if let Some(v) = self.lock().get_mut(id) {
            v.recorded = v.recorded.max(now.level);
            v.bound = v.bound.max(now.level);
        }
        Ok(())
    }

    /// Makes the step's call; the level it leaves the volume at.
    async fn call(
        &self,
        step: Step,
        id: &str,
        held: &Held,
        params: Option<&Params>,
    ) -> Result<Level, CsiError> {
        let plugin = &held.plugin;
        let client = self.plugins.client(plugin).ok_or_else(|| CsiError {
            plugin: plugin.to_string(),
            call: "node step",
            failure: Failure::Unreachable(format!("the agent has no node plugin {plugin:?}")),
        })?;
        let paths = &self.paths;
        match (step, params) {
            (Step::Stage, Some(p)) => calls::stage(&client, paths, id, p).await.map(|()| Level::Staged),
            (Step::Publish, Some(p)) => calls::publish(&client, paths, id, p)
                .await
                .map(|()| Level::Published),
            (Step::Unpublish, _) => {
                let below = if held.staged { Level::Staged } else { Level::Absent };
                gone_is_done(id, calls::unpublish(&client, paths, id, &held.volume_id).await).map(|()| below)
            }
            (Step::Unstage, _) => gone_is_done(id, calls::unstage(&client, paths, id, &held.volume_id).await)
                .map(|()| Level::Absent),
            (_, None) => Ok(held.level),
        }
    }
}
