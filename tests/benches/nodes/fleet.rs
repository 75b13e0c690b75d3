//! The fleet: many nodes' agents in this one process, each with the
//! agent's own session code (`berth_agent::dial::run`: joining with a
//! token, then a session over mutual TLS with its own certificate, its own
//! heartbeats and its own redials), their records sharing one store file as
//! a server's in-process nodes do.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use berth::agent::config::ServerAddress;
use berth::agent::record::RecordPlace;
use berth::agent::{Agent, AgentSpec};
use berth::csi::Endpoint;
use berth::model::Paths;
use berth::store::{Committer, RedbStore};

/// The agents and their sessions' tasks.
pub struct Fleet {
    dir: PathBuf,
    store: PathBuf,
    records: Arc<Committer>,
    /// Kept open: its committer writes the records.
    _db: RedbStore,
    agents: Vec<Arc<Agent>>,
    sessions: Vec<tokio::task::JoinHandle<()>>,
    /// Why agents gave up (a server refused them), by node.
    refusals: Arc<std::sync::Mutex<Vec<String>>>,
    pub heartbeat: Duration,
}

impl Fleet {
    pub fn new(dir: &Path, heartbeat: Duration) -> Fleet {
        let store = dir.join("fleet-records.redb");
        let db = RedbStore::open(&store).expect("the fleet's record store");
        Fleet {
            dir: dir.to_path_buf(),
            records: db.committer(),
            store,
            _db: db,
            agents: Vec::new(),
            sessions: Vec::new(),
            refusals: Default::default(),
            heartbeat,
        }
    }

    /// Opens the agent of node `name`, with `plugins` (none: a node that
    /// holds no volumes, which costs the server its session alone).
    pub async fn open(&mut self, name: &str, plugins: BTreeMap<String, Endpoint>) {
        let node_dir = self.dir.join("nodes").join(name);
        let agent = Agent::open(AgentSpec {
            node: name.to_string(),
            labels: BTreeMap::new(),
            record: RecordPlace::Store {
                committer: self.records.clone(),
                store: self.store.clone(),
                node: name.to_string(),
                file: node_dir.join("agent.redb"),
            },
            paths: Paths::under(&node_dir),
            plugins,
            plugin_dir: None,
            fingerprint_interval: Duration::from_secs(30),
            heartbeat_interval: self.heartbeat,
            deadline: Duration::from_secs(15),
            seed: Default::default(),
        })
        .await
        .unwrap_or_else(|e| panic!("agent {name}: {e}"));
        self.agents.push(agent);
    }

    /// Starts every agent's session (those that have none) with `servers`;
    /// agents without credentials join with `tokens`, one use each.
    pub fn dial(&mut self, servers: &[u16], tokens: &[String], uses: usize) {
        let servers: Vec<ServerAddress> = servers
            .iter()
            .map(|port| ServerAddress::Tls {
                host: "127.0.0.1".into(),
                port: *port,
            })
            .collect();
        for (i, agent) in self.agents.iter().enumerate().skip(self.sessions.len()) {
            let token = tokens.get(i / uses).cloned();
            let dir = self.dir.join("nodes").join(agent.name());
            let (agent, servers, refusals) = (agent.clone(), servers.clone(), self.refusals.clone());
            self.sessions.push(tokio::spawn(async move {
                let name = agent.name().to_string();
                let why = berth::agent::dial::run(agent, servers, token, dir).await;
                refusals
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(format!("{name}: {why}"));
            }));
        }
    }

    /// Whether an agent gave up (a server refused it): its reason.
    pub fn refused(&self) -> Option<String> {
        let refusals = self.refusals.lock().unwrap_or_else(|p| p.into_inner());
        (!refusals.is_empty()).then(|| {
            format!(
                "{} agents refused by the server, the first {}",
                refusals.len(),
                refusals[0]
            )
        })
    }
}

impl Drop for Fleet {
    /// The sessions end with the fleet: none dials a later run's server.
    fn drop(&mut self) {
        for s in &self.sessions {
            s.abort();
        }
    }
}
