//! Agent processes for the tests (the `berth-agent` binary nodes install):
//! one per node, each with its own config, log and sample node plugin,
//! dialing the cluster's `berth serve`.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use berth_proto::berth::v1 as api;

use crate::{Cluster, agent_logged};

/// A `berth agent` process. Killed when dropped.
pub struct AgentProcess {
    pub name: String,
    pub config: PathBuf,
    pub log: PathBuf,
    child: Option<Child>,
}

impl AgentProcess {
    /// Writes the agent's config; [`AgentProcess::start`] runs it.
    /// `server` as agent.toml takes it (`unix:///...` or `https://host:port`;
    /// several, separated by commas, for several servers).
    pub fn new(
        dir: &Path,
        name: &str,
        zone: &str,
        server: &str,
        node_dir: &Path,
        plugin: &str,
        token: Option<&str>,
    ) -> Self {
        let token = token.map_or(String::new(), |t| format!("token = \"{t}\"\n"));
        let server = match server.split(',').collect::<Vec<_>>()[..] {
            [one] => format!("\"{one}\""),
            ref many => format!(
                "[{}]",
                many.iter()
                    .map(|s| format!("\"{s}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        Self::with_config(
            dir,
            name,
            &format!(
                "node = \"{name}\"\nlabels = {{ zone-label = \"{zone}\" }}\nserver = {server}\n{token}dir = \"{}\"\nheartbeat_interval = \"200ms\"\nfingerprint_interval = \"500ms\"\n[plugins]\nhostpath = \"{plugin}\"\n",
                node_dir.display()
            ),
        )
    }

    /// Waits (up to 20 s) for the process to exit by itself.
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        let started = std::time::Instant::now();
        loop {
            if let Some(status) = self.exited() {
                return status;
            }
            assert!(
                started.elapsed() < std::time::Duration::from_secs(20),
                "the agent never stopped: {}",
                self.log_text()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Whether the process has exited, and how.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    /// An agent with the config `text`, written under `dir`.
    pub fn with_config(dir: &Path, name: &str, text: &str) -> Self {
        let config = dir.join(format!("agent-{name}.toml"));
        std::fs::write(&config, text).unwrap();
        AgentProcess {
            name: name.to_string(),
            log: dir.join(format!("agent-{name}.log")),
            config,
            child: None,
        }
    }

    pub fn start(&mut self) {
        self.child = Some(agent_logged(&self.config, &self.log, &[]));
    }

    /// Started again serving `/metrics` and `/readyz` on `port` (loopback):
    /// `metrics` is a top-level key, so it goes first in agent.toml.
    pub fn serve_metrics(&mut self, port: u16) {
        self.kill();
        let text = std::fs::read_to_string(&self.config).unwrap();
        std::fs::write(&self.config, format!("metrics = \"127.0.0.1:{port}\"\n{text}")).unwrap();
        self.start();
    }

    /// Starts it with `env` set besides the test's own environment.
    pub fn start_with(&mut self, env: &[(&str, &Path)]) {
        self.child = Some(agent_logged(&self.config, &self.log, env));
    }

    /// SIGTERM: the agent stops as a service manager stops it.
    pub fn terminate(&self) {
        self.signal(libc::SIGTERM);
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(std::process::Child::id)
    }

    /// SIGKILL: nothing is flushed or cleaned up.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn signal(&self, sig: libc::c_int) {
        if let Some(c) = &self.child {
            // SAFETY: a plain kill(2) on our own child's pid.
            unsafe { libc::kill(c.id() as libc::pid_t, sig) };
        }
    }

    /// SIGSTOP: the process is frozen, its connections stay open.
    pub fn freeze(&self) {
        self.signal(libc::SIGSTOP);
    }

    pub fn thaw(&self) {
        self.signal(libc::SIGCONT);
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        self.thaw();
        self.kill();
    }
}

impl Cluster {
    /// Every node as `berth node list` has it.
    pub fn node_list(&self) -> Vec<api::Node> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            self.client()
                .list_nodes(api::ListNodesRequest {})
                .await
                .map(|r| r.into_inner().nodes)
                .unwrap_or_default()
        })
    }

    /// The state `berth node list` gives a node ("ready", "down", "unknown").
    pub fn node_state(&self, node: &str) -> Option<String> {
        self.node_list()
            .into_iter()
            .find(|n| n.name == node)
            .map(|n| n.state)
    }

    /// Waits until every node in `nodes` is in `state`, failing after `within`.
    pub fn wait_nodes(&self, nodes: &[&str], state: &str, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let list = self.node_list();
            let ok = nodes
                .iter()
                .all(|n| list.iter().any(|m| m.name == *n && m.state == state));
            if ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "nodes {nodes:?} not {state} after {within:?}: {list:#?}\n{}\n{}",
                self.log(),
                self.agents
                    .iter()
                    .map(|a| format!("agent {}:\n{}", a.name, crate::storm::tail(&a.log_text())))
                    .chain(self.serves.iter().skip(1).map(|s| format!(
                        "{}:\n{}",
                        s.log.display(),
                        crate::storm::tail(&std::fs::read_to_string(&s.log).unwrap_or_default())
                    )))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A join token for `node` from `berth cluster token`, asked again while
    /// no term answers yet (a first leader compiling large policy modules).
    pub fn join_token(&self, node: &str) -> String {
        let args = ["cluster", "token", "--node", node, "--ttl", "10m"];
        let deadline = std::time::Instant::now() + Duration::from_secs(180);
        loop {
            let out = self.berth(&args);
            let (stdout, stderr) = crate::texts(&out);
            if out.status.success() {
                return stdout.trim().to_string();
            }
            assert!(
                stderr.contains("UNAVAILABLE") && std::time::Instant::now() < deadline,
                "berth {args:?} failed: {stderr}\nserve log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub fn agent(&mut self, name: &str) -> &mut AgentProcess {
        self.agents
            .iter_mut()
            .find(|a| a.name == name)
            .unwrap_or_else(|| panic!("no agent {name}"))
    }
}
