//! The volume manager: desired and observed state of every volume, kept in
//! memory and in the store, and the reconciler that drives CSI plugins until
//! they match.
//!
//! Every change goes through [`VolumeManager::modify`]: serialized per volume,
//! written to the store, and only then visible and acted on. On start, the
//! manager loads the store and queues every volume, so unfinished work resumes.

mod lifecycle;
pub mod nodes;
mod queue;

pub use lifecycle::validate_spec;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

use crate::config::Config;
use crate::csi::registry::Registry;
use crate::model::{Publication, PublishStep, VolumeRecord, VolumeSpec, new_id};
use crate::policy::Policies;
use crate::secrets::Secrets;
use crate::store::Store;
use nodes::NodeAgent;
use queue::Queue;

/// Why an operator's request was refused. The API maps these to gRPC codes.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Unavailable(String),
}

/// Every volume in memory, with indexes kept in step on every change so no
/// request or decision scans all volumes.
#[derive(Default)]
struct State {
    volumes: HashMap<String, VolumeRecord>,
    /// Operator name → id, for live volumes.
    names: HashMap<String, String>,
    /// CSI name → id: a name given to one volume is never given to another.
    csi_names: HashMap<String, String>,
    /// Plugin → node → publications there, wanted or still being undone.
    published: BTreeMap<String, BTreeMap<String, u64>>,
    /// Volumes by [`VolumeRecord::state`].
    states: BTreeMap<&'static str, u64>,
    /// Volumes waiting to retry a failed call.
    retrying: u64,
}

/// Adds one to `key`'s count, or takes one away (dropping counts of zero);
/// allocates only for a key not counted yet.
fn count<K, Q>(counts: &mut BTreeMap<K, u64>, key: &Q, add: bool)
where
    K: Ord + std::borrow::Borrow<Q>,
    Q: Ord + ToOwned<Owned = K> + ?Sized,
{
    match counts.get_mut(key) {
        Some(n) if add => *n += 1,
        Some(n) => {
            *n -= 1;
            if *n == 0 {
                counts.remove(key);
            }
        }
        None if add => {
            counts.insert(key.to_owned(), 1);
        }
        None => {}
    }
}

impl State {
    /// Stores a new or changed record. A record's spec (and so its operator
    /// name) never changes; its CSI name is set once and cleared on delete.
    fn insert(&mut self, r: VolumeRecord) {
        self.tally(&r, true);
        let Some(slot) = self.volumes.get_mut(&r.id) else {
            self.names.insert(r.spec.name.clone(), r.id.clone());
            if let Some(c) = &r.csi_name {
                self.csi_names.insert(c.clone(), r.id.clone());
            }
            self.volumes.insert(r.id.clone(), r);
            return;
        };
        let old = std::mem::replace(slot, r);
        self.tally(&old, false);
        let new = &self.volumes[&old.id];
        if new.csi_name != old.csi_name {
            if let Some(c) = &old.csi_name
                && self.csi_names.get(c) == Some(&old.id)
            {
                self.csi_names.remove(c);
            }
            if let Some(c) = &new.csi_name {
                self.csi_names.insert(c.clone(), old.id.clone());
            }
        }
    }

    fn remove(&mut self, id: &str) -> Option<VolumeRecord> {
        let old = self.volumes.remove(id)?;
        self.tally(&old, false);
        if self.names.get(&old.spec.name) == Some(&old.id) {
            self.names.remove(&old.spec.name);
        }
        if let Some(c) = &old.csi_name
            && self.csi_names.get(c) == Some(&old.id)
        {
            self.csi_names.remove(c);
        }
        Some(old)
    }

    /// Counts a record in (or out of) the publications per node, the states
    /// and the retries.
    fn tally(&mut self, r: &VolumeRecord, add: bool) {
        if !r.publications.is_empty() {
            if add && !self.published.contains_key(&r.spec.plugin) {
                self.published.insert(r.spec.plugin.clone(), BTreeMap::new());
            }
            if let Some(nodes) = self.published.get_mut(&r.spec.plugin) {
                for node in r.publications.keys() {
                    count(nodes, node.as_str(), add);
                }
            }
        }
        count(&mut self.states, &r.state(), add);
        if add {
            self.retrying += u64::from(r.retrying.is_some());
        } else {
            self.retrying -= u64::from(r.retrying.is_some());
        }
    }
}

/// Counts for operators and monitoring, without listing every volume.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub volumes: u64,
    pub states: BTreeMap<&'static str, u64>,
    /// Volumes with work queued or running.
    pub busy: u64,
    /// Volumes waiting to retry a failed call.
    pub retrying: u64,
}

pub struct VolumeManager {
    config: Config,
    store: Store,
    registry: Arc<Registry>,
    policies: Arc<Policies>,
    secrets: Secrets,
    nodes: Arc<dyn NodeAgent>,
    state: Mutex<State>,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    queue: Queue,
    /// Turns for guest decisions.
    deciding: tokio::sync::Semaphore,
    /// Bumped on every change, for watchers.
    changes: watch::Sender<u64>,
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl VolumeManager {
    /// Loads every volume from the store; call [`VolumeManager::start`] to reconcile.
    pub fn new(
        config: Config,
        store: Store,
        registry: Arc<Registry>,
        policies: Arc<Policies>,
        nodes: Arc<dyn NodeAgent>,
    ) -> Result<Arc<Self>, String> {
        let mut state = State::default();
        for r in store.load()? {
            state.insert(r);
        }
        let (changes, _) = watch::channel(0);
        Ok(Arc::new(VolumeManager {
            secrets: Secrets::new(config.secrets_dir.clone()),
            config,
            store,
            registry,
            policies,
            nodes,
            state: Mutex::new(state),
            locks: Mutex::new(HashMap::new()),
            queue: Queue::default(),
            deciding: tokio::sync::Semaphore::new(
                std::thread::available_parallelism().map_or(2, std::num::NonZero::get),
            ),
            changes,
        }))
    }

    /// Starts the workers and queues every stored volume.
    pub fn start(self: &Arc<Self>) -> tokio::task::JoinSet<()> {
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..self.config.workers {
            let m = self.clone();
            workers.spawn(async move {
                loop {
                    let id = m.queue.take().await;
                    m.reconcile(&id).await;
                    m.queue.done(&id);
                }
            });
        }
        let ids: Vec<String> = self.lock().volumes.keys().cloned().collect();
        tracing::info!(
            volumes = ids.len(),
            workers = self.config.workers,
            "reconciler started"
        );
        for id in ids {
            self.queue.push(&id);
        }
        workers
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// The node plugin of `plugin` on `node`, as registered.
    pub fn node_plugin(&self, node: &str, plugin: &str) -> Option<Arc<crate::csi::registry::Plugin>> {
        self.nodes.plugin(node, plugin)
    }

    /// Where a volume is (or would be) published on a node.
    pub fn target_path(&self, node: &str, berth_id: &str) -> std::path::PathBuf {
        self.nodes.target_path(node, berth_id)
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Volumes that still have work queued or running.
    pub fn busy(&self) -> usize {
        self.queue.len()
    }

    pub fn get(&self, name: &str) -> Option<VolumeRecord> {
        let s = self.lock();
        s.names.get(name).and_then(|id| s.volumes.get(id)).cloned()
    }

    fn generation(&self, id: &str) -> Option<u64> {
        self.lock().volumes.get(id).map(|v| v.generation)
    }

    pub(crate) fn by_id(&self, id: &str) -> Option<VolumeRecord> {
        self.lock().volumes.get(id).cloned()
    }

    pub fn list(&self) -> Vec<VolumeRecord> {
        let mut v: Vec<VolumeRecord> = self.lock().volumes.values().cloned().collect();
        v.sort_by(|a, b| a.spec.name.cmp(&b.spec.name));
        v
    }

    /// Volumes of `plugin` published (or being published, or being undone) on `node`.
    pub fn published_on(&self, plugin: &str, node: &str) -> u64 {
        self.lock()
            .published
            .get(plugin)
            .and_then(|nodes| nodes.get(node))
            .copied()
            .unwrap_or(0)
    }

    /// Claims a CSI name for volume `id`; false when another volume has it.
    /// The claim is undone by [`VolumeManager::release_csi_name`] if the
    /// name is not recorded after all.
    pub(crate) fn claim_csi_name(&self, name: &str, id: &str) -> bool {
        let mut s = self.lock();
        match s.csi_names.get(name) {
            Some(owner) => owner == id,
            None => {
                s.csi_names.insert(name.to_string(), id.to_string());
                true
            }
        }
    }

    pub(crate) fn release_csi_name(&self, name: &str, id: &str) {
        let mut s = self.lock();
        let recorded = s.volumes.get(id).and_then(|v| v.csi_name.as_deref()) == Some(name);
        if !recorded && s.csi_names.get(name).is_some_and(|owner| owner == id) {
            s.csi_names.remove(name);
        }
    }

    pub fn summary(&self) -> Summary {
        let (volumes, states, retrying) = {
            let s = self.lock();
            (s.volumes.len() as u64, s.states.clone(), s.retrying)
        };
        Summary {
            volumes,
            states,
            busy: self.queue.len() as u64,
            retrying,
        }
    }

    fn volume_lock(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.locks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(id.to_string())
            .or_default()
            .clone()
    }

    /// Applies `change` to the latest record, makes it durable, then publishes
    /// it and queues the volume. Returns what `change` returned.
    pub(crate) async fn modify<T>(
        &self,
        id: &str,
        change: impl FnOnce(&mut VolumeRecord) -> Result<T, RequestError>,
    ) -> Result<(T, VolumeRecord), RequestError> {
        let lock = self.volume_lock(id);
        let _held = lock.lock().await;
        let mut record = self
            .by_id(id)
            .ok_or_else(|| RequestError::NotFound(format!("volume {id} no longer exists")))?;
        let out = change(&mut record)?;
        record.generation += 1;
        self.store
            .put(record.clone())
            .await
            .map_err(|e| RequestError::Unavailable(format!("the store refused the change: {e}")))?;
        self.lock().insert(record.clone());
        self.changes.send_modify(|g| *g += 1);
        self.queue.push(id);
        Ok((out, record))
    }

    /// Removes a volume for good (after DeleteVolume, or if it never existed on a plugin).
    pub(crate) async fn forget(&self, id: &str) -> Result<(), String> {
        let lock = self.volume_lock(id);
        let _held = lock.lock().await;
        self.store.remove(id).await?;
        self.lock().remove(id);
        self.locks.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
        self.changes.send_modify(|g| *g += 1);
        Ok(())
    }

    // ------------------------------------------------------------ requests

    pub async fn create(&self, spec: VolumeSpec) -> Result<VolumeRecord, RequestError> {
        lifecycle::validate_spec(&spec, &self.config)?;
        let id = new_id();
        let record = VolumeRecord::new(id.clone(), spec.clone());
        {
            let mut s = self.lock();
            if let Some(existing) = s.names.get(&spec.name).and_then(|i| s.volumes.get(i)) {
                if existing.spec == spec && !existing.deleting {
                    // Creating the same volume again is not an error.
                    return Ok(existing.clone());
                }
                return Err(RequestError::Conflict(format!(
                    "a volume named {:?} already exists with a different spec{}",
                    spec.name,
                    if existing.deleting { " (being deleted)" } else { "" }
                )));
            }
            // Reserve the name before the write, so two requests cannot both take it.
            s.insert(record.clone());
        }
        if let Err(e) = self.store.put(record.clone()).await {
            self.lock().remove(&id);
            return Err(RequestError::Unavailable(format!(
                "the store refused the volume: {e}"
            )));
        }
        self.changes.send_modify(|g| *g += 1);
        self.queue.push(&id);
        Ok(record)
    }

    fn id_of(&self, name: &str) -> Result<String, RequestError> {
        self.lock()
            .names
            .get(name)
            .cloned()
            .ok_or_else(|| RequestError::NotFound(format!("no volume named {name:?}")))
    }

    pub async fn delete(&self, name: &str) -> Result<VolumeRecord, RequestError> {
        let id = self.id_of(name)?;
        self.modify(&id, |r| {
            r.deleting = true;
            // Deleting is the operator's answer to a give-up too.
            r.failure = None;
            r.retrying = None;
            for p in r.publications.values_mut() {
                p.unwant();
            }
            Ok(())
        })
        .await
        .map(|(_, r)| r)
    }

    pub async fn publish(
        &self,
        name: &str,
        node: Option<&str>,
        readonly: bool,
    ) -> Result<VolumeRecord, RequestError> {
        let id = self.id_of(name)?;
        let current = self
            .by_id(&id)
            .ok_or_else(|| RequestError::NotFound(format!("no volume named {name:?}")))?;
        let node = match node {
            Some(n) => {
                let cfg = self
                    .config
                    .node(n)
                    .ok_or_else(|| RequestError::Invalid(format!("node: there is no node named {n:?}")))?;
                if !cfg.plugins.contains_key(&current.spec.plugin) {
                    return Err(RequestError::Invalid(format!(
                        "node: {n:?} has no node plugin for {:?}",
                        current.spec.plugin
                    )));
                }
                n.to_string()
            }
            None => lifecycle::choose_node(self, &current).await?,
        };
        self.modify(&id, |r| {
            if r.deleting {
                return Err(RequestError::Conflict(format!(
                    "volume {name:?} is being deleted"
                )));
            }
            let single = matches!(
                r.spec.access_mode.as_str(),
                "single-node-writer"
                    | "single-node-reader-only"
                    | "single-node-single-writer"
                    | "single-node-multi-writer"
            );
            if single && r.publications.iter().any(|(n, p)| p.wanted && n != &node) {
                return Err(RequestError::Conflict(format!(
                    "volume {name:?} is {} and already published to another node",
                    r.spec.access_mode
                )));
            }
            let p = r.publications.get_or_insert_with(&node, || Publication {
                wanted: true,
                readonly,
                step: PublishStep::None,
                publish_context: Default::default(),
            });
            p.want(readonly);
            Ok(())
        })
        .await
        .map(|(_, r)| r)
    }

    pub async fn unpublish(&self, name: &str, node: &str) -> Result<VolumeRecord, RequestError> {
        let id = self.id_of(name)?;
        self.modify(&id, |r| match r.publications.get_mut(node) {
            Some(p) => {
                p.unwant();
                Ok(())
            }
            None => Err(RequestError::NotFound(format!(
                "volume {name:?} is not published to {node:?}"
            ))),
        })
        .await
        .map(|(_, r)| r)
    }

    pub async fn retry(&self, name: &str) -> Result<VolumeRecord, RequestError> {
        let id = self.id_of(name)?;
        self.modify(&id, |r| {
            r.failure = None;
            r.retrying = None;
            Ok(())
        })
        .await
        .map(|(_, r)| r)
    }

    /// Queues a volume again after `delay`.
    fn wake_after(self: &Arc<Self>, id: &str, delay: Duration) {
        let m = Arc::downgrade(self);
        let id = id.to_string();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            if let Some(m) = m.upgrade() {
                m.queue.push(&id);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Retrying;

    fn publication() -> Publication {
        Publication {
            wanted: true,
            readonly: false,
            step: PublishStep::None,
            publish_context: Default::default(),
        }
    }

    #[test]
    fn indexes_follow_every_change_and_empty_out() {
        let mut s = State::default();
        let mut r = VolumeRecord::new(
            "id1".into(),
            VolumeSpec {
                name: "data".into(),
                plugin: "hp".into(),
                ..Default::default()
            },
        );
        s.insert(r.clone());
        assert_eq!(s.names.get("data"), Some(&"id1".to_string()));
        assert_eq!(s.states.get("pending"), Some(&1));
        r.csi_name = Some("pv-data".into());
        r.publications.insert("n1".into(), publication());
        r.retrying = Some(Retrying {
            operation: "CreateVolume".into(),
            attempt: 1,
            first_failure_ms: 0,
            next_attempt_ms: 0,
            last_error: String::new(),
        });
        s.insert(r.clone());
        assert_eq!(s.csi_names.get("pv-data"), Some(&"id1".to_string()));
        assert_eq!(s.published["hp"]["n1"], 1);
        assert_eq!(
            (s.states.get("pending"), s.states.get("creating")),
            (None, Some(&1))
        );
        assert_eq!(s.retrying, 1);
        r.csi_name = None;
        r.publications.clear();
        r.retrying = None;
        s.insert(r);
        assert!(s.csi_names.is_empty(), "a cleared CSI name is free again");
        assert!(s.published["hp"].is_empty());
        s.remove("id1");
        assert!(s.volumes.is_empty() && s.names.is_empty() && s.states.is_empty());
        assert_eq!(s.retrying, 0);
    }
}
