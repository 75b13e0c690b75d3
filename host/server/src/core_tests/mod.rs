//! The core in paused time: the same manager, node directory and in-process
//! agents a term runs (`serve::term::core`, `start_node_agents`), on a store
//! in memory and a CSI plugin in the test's own runtime. Nothing is waited
//! for outside the runtime but in tokio's blocking pool (the agents' record
//! too: `Waits::InBlockingPool`), which holds the paused clock still, so it
//! moves only to Berth's own timers: a retry an hour away is tested in no
//! time, and when each call came is exact. What crosses processes stays in
//! the integration suite.

mod lifecycle;
mod plugin;
mod store;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::Config;
use crate::manager::VolumeManager;
use crate::model::{VolumeRecord, VolumeSpec};
use crate::policy::builtin::{BuiltinRetry, Builtins};
use crate::policy::{EngineOptions, Policies, PolicyEngine};
use plugin::{DRIVER, MemoryPlugin};
use store::MemoryStore;

pub struct Core {
    pub plugin: MemoryPlugin,
    store: Arc<MemoryStore>,
    pub manager: Arc<VolumeManager>,
    retry: BuiltinRetry,
    _refresh: crate::csi::registry::RefreshTasks,
    _workers: tokio::task::JoinSet<()>,
    _dir: tempfile::TempDir,
}

/// A retry policy without jitter: `base` doubling, INTERNAL given up at
/// its `internal`th attempt.
pub fn retry(base: Duration, internal: u32) -> BuiltinRetry {
    BuiltinRetry {
        base,
        max: Duration::from_secs(3600),
        max_internal_attempts: internal,
        jitter: 0.0,
    }
}

/// Starts the core with the plugin `mem`, and a node `n1` served by an
/// in-process agent when `node`. Liveness timers are an hour: a test's
/// only timers are the retries it is about.
pub async fn start(retry: BuiltinRetry, node: bool, tenure: Option<crate::manager::Tenure>) -> Core {
    let dir = tempfile::tempdir().unwrap();
    let plugin = MemoryPlugin::default();
    plugin.serve(&dir.path().join("csi.sock"));
    let store = Arc::new(MemoryStore::default());
    start_on(dir, plugin, store, retry, node, tenure).await
}

/// The core on `store` (seeded by the test) with `plugin`, no node of its own.
pub async fn start_with(plugin: MemoryPlugin, store: Arc<MemoryStore>, retry: BuiltinRetry) -> Core {
    let dir = tempfile::tempdir().unwrap();
    plugin.serve(&dir.path().join("csi.sock"));
    start_on(dir, plugin, store, retry, false, None).await
}

/// The core on a store and plugin that may have served one before.
async fn start_on(
    dir: tempfile::TempDir,
    plugin: MemoryPlugin,
    store: Arc<MemoryStore>,
    retry: BuiltinRetry,
    node: bool,
    tenure: Option<crate::manager::Tenure>,
) -> Core {
    let socket = dir.path().join("csi.sock");
    let socket = socket.display();
    let mut text = format!(
        r#"
state = "state.redb"
workers = 4
fingerprint_interval = "1h"
heartbeat_timeout = "1h"

[[plugin]]
name = "mem"
driver = "{DRIVER}"
controller = "unix://{socket}"
"#
    );
    if node {
        text +=
            &format!("\n[[node]]\nname = \"n1\"\ndir = \"n1\"\nplugins = {{ mem = \"unix://{socket}\" }}\n");
    }
    let config = Config::parse(&text, dir.path()).unwrap();
    let engine = PolicyEngine::new(EngineOptions::default()).unwrap();
    let builtins = Builtins {
        retry: retry.clone(),
        ..Builtins::default()
    };
    let policies = Arc::new(Policies::new(Arc::new(engine), builtins));
    let core = crate::serve::term::core(config, store.clone(), policies)
        .await
        .unwrap();
    if let Some(tenure) = tenure {
        core.manager.act_only_while(tenure);
    }
    let workers = core.manager.start();
    // The node's record in a store file of its own, as a server's
    // `[[node]]` keeps it; its writers wait in tokio's blocking pool, so
    // the paused clock stays put while a commit is under way.
    let records = node.then(|| {
        crate::store::RedbStore::open_waiting(
            &dir.path().join("records.redb"),
            crate::store::Waits::InBlockingPool,
        )
        .unwrap()
        .committer()
    });
    let mut agents = crate::serve::endpoints::start_node_agents(
        &core.manager,
        core.directory.clone(),
        core.deadline,
        records,
    );
    agents.connected_within(None).await.unwrap();
    Core {
        plugin,
        store,
        manager: core.manager,
        retry,
        _refresh: core.refresh,
        _workers: workers,
        _dir: dir,
    }
}

impl Core {
    /// A crash and a start: the workers and the manager gone, a new core
    /// on the same store and plugin (controller-only cores).
    pub async fn restart(self) -> Core {
        let Core {
            plugin,
            store,
            manager,
            retry,
            _refresh,
            _workers,
            _dir,
        } = self;
        drop((_workers, _refresh, manager));
        start_on(_dir, plugin, store, retry, false, None).await
    }

    pub async fn create(&self, name: &str) -> VolumeRecord {
        let spec = VolumeSpec {
            name: name.into(),
            plugin: "mem".into(),
            required_bytes: 1 << 20,
            ..VolumeSpec::default()
        };
        self.manager.requests().create(spec).await.unwrap()
    }

    /// Volume records written to the store so far.
    pub fn record_writes(&self) -> usize {
        self.store.puts(0).len()
    }

    /// What each volume write since the `since`th carried: its
    /// publications and its newest event (a failed count says which).
    pub fn writes_since(&self, since: usize) -> Vec<String> {
        self.store
            .puts(since)
            .iter()
            .map(|r| {
                let last = r
                    .events
                    .last()
                    .map(|e| format!("{} {} {}", e.step, e.code, e.message));
                format!(
                    "{} gen {}: {:?}; last event {last:?}",
                    r.spec.name, r.generation, r.publications
                )
            })
            .collect()
    }

    /// Asserts that the volume writes since the `since`th are `n`: `what` they are.
    pub fn assert_writes_since(&self, since: usize, n: usize, what: &str) {
        let writes = self.writes_since(since);
        assert_eq!(writes.len(), n, "{what}\n{}", writes.join("\n"));
    }

    /// Waits, holding the paused clock (yielding, never sleeping), until
    /// CreateVolume was called `calls` times and no worker is busy: a run
    /// that ended has parked its outcomes, and the parking's few
    /// milliseconds have not passed.
    pub async fn idle_after_creates(&self, calls: usize) {
        while self.plugin.calls("CreateVolume").len() < calls || self.manager.summary().busy > 0 {
            tokio::task::yield_now().await;
        }
    }

    /// Waits until node `n1`'s agent is linked and its plugin known.
    pub async fn node_ready(&self) {
        self.until("n1 ready", |c| {
            c.manager
                .fleet()
                .node_views(Some("mem"))
                .iter()
                .any(|v| v.node == "n1" && v.health == crate::csi::registry::Health::Healthy)
        })
        .await;
    }

    pub fn volume(&self, name: &str) -> VolumeRecord {
        self.manager.get(name).expect("the volume is known")
    }

    /// Waits (in paused time: at once) until `done`, for at most two hours.
    pub async fn until(&self, what: &str, mut done: impl FnMut(&Core) -> bool) {
        let started = Instant::now();
        while !done(self) {
            assert!(
                started.elapsed() < Duration::from_secs(7200),
                "{what}: not after two hours; calls: {:?}",
                self.plugin.log()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
