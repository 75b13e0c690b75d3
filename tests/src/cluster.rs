//! A whole deployment for a test: the sample plugin's processes, a
//! `berth.toml`, `berth serve` and, when asked, `berth agent`s.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use berth_proto::berth::v1 as api;
use berth_proto::berth::v1::berth_client::BerthClient;
use tonic::transport::Channel;

use crate::serves::state_dir;
use crate::{
    AgentProcess, Plugin, PluginBuilder, ServeProcess, bin, free_port, guest, summary, test_dir, texts,
};

/// A whole deployment on this machine: a controller plugin, node plugins
/// sharing its state directory, a `berth.toml`, and `berth serve`.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    /// Where the plugin's volumes and the nodes' mount points are.
    pub volumes_dir: PathBuf,
    /// Removed on drop when it is not inside `dir`.
    own_volumes_dir: bool,
    pub controller: Plugin,
    pub nodes: Vec<(String, Plugin)>,
    /// With [`ClusterSpec::agents`]: the `berth agent` of each node, in node order.
    pub agents: Vec<AgentProcess>,
    /// Every `berth serve`: one, or [`ClusterSpec::servers`] sharing etcd.
    pub serves: Vec<ServeProcess>,
    /// The first server's config, API socket and log.
    pub config: PathBuf,
    pub api: PathBuf,
    pub serve_log: PathBuf,
}

/// How to build a [`Cluster`].
pub struct ClusterSpec<'a> {
    /// Flags for every plugin process (capabilities, faults...).
    pub plugin_args: Vec<&'a str>,
    /// (node name, zone) for each node.
    pub nodes: Vec<(&'a str, &'a str)>,
    /// Use the sample guests for naming, placement and retry, with these extra settings.
    pub guests: bool,
    pub retry_settings: &'a str,
    /// Extra top-level config lines.
    pub extra: &'a str,
    /// Extra lines in the plugin's `[[plugin]]` table (e.g. `deadline = "1s"`).
    pub plugin_extra: &'a str,
    pub workers: usize,
    /// The controller's topology segment (which makes it report
    /// VOLUME_ACCESSIBILITY_CONSTRAINTS); `None` for a controller without.
    pub controller_topology: Option<&'a str>,
    /// Extra flags for the node plugins only.
    pub node_args: Vec<&'a str>,
    /// Where the plugin keeps its volumes and the nodes' mount points live
    /// (default: inside the cluster's directory, on disk). Berth's store
    /// stays in the cluster's directory either way.
    pub volumes_dir: Option<&'a Path>,
    /// Where the sample guests come from (default: as built from `guests/`).
    pub guest_dir: Option<&'a Path>,
    /// `[[policy]]` (and `[oci]`) tables instead of the sample guests' own.
    pub policy_tables: Option<&'a str>,
    /// With `guests`: the candidate guest shadowing these decisions beside
    /// the samples (`mode = "shadow"`).
    pub shadow: &'a [&'a str],
    /// Tables at the end of one server's config only, by server index.
    pub server_tables: Vec<(usize, &'a str)>,
    /// Serve each node by a `berth agent` process (heartbeat timeout 1 s)
    /// instead of a `[[node]]` in `berth.toml`.
    pub agents: bool,
    /// With `agents`: they dial the TLS endpoint on loopback and join with a
    /// token, instead of the cluster's unix socket.
    pub tls: bool,
    /// With `agents`: tables at the end of a node's agent.toml, by node name.
    pub agent_tables: Vec<(&'a str, &'a str)>,
    /// A `[store]` table (e.g. [`EtcdCluster::store_config`]); the embedded store without.
    pub store: Option<String>,
    /// How many `berth serve` share the store (several need etcd); each has
    /// its own state directory, API socket and TLS port, and is named `server-<i>`.
    pub servers: usize,
}

impl Default for ClusterSpec<'_> {
    fn default() -> Self {
        ClusterSpec {
            plugin_args: vec![],
            nodes: vec![("node-a", "a"), ("node-b", "b")],
            guests: true,
            retry_settings: "base-ms = \"20\", max-ms = \"200\"",
            extra: "",
            plugin_extra: "",
            workers: 16,
            controller_topology: Some("zone=a"),
            node_args: vec![],
            volumes_dir: None,
            guest_dir: None,
            policy_tables: None,
            shadow: &[],
            server_tables: vec![],
            agents: false,
            tls: false,
            agent_tables: Vec::new(),
            store: None,
            servers: 1,
        }
    }
}

impl ClusterSpec<'_> {
    /// The default deployment with the built-in policies (no guests).
    pub fn builtin() -> Self {
        ClusterSpec {
            guests: false,
            ..ClusterSpec::default()
        }
    }
}

/// Where the plugin's volumes and the nodes' mount points go: inside `dir`,
/// or in a directory of their own in [`ClusterSpec::volumes_dir`].
pub(crate) fn volumes_dir_in(dir: &Path, spec: &ClusterSpec) -> PathBuf {
    spec.volumes_dir.map_or_else(
        || dir.to_path_buf(),
        |d| {
            tempfile::Builder::new()
                .prefix("berth-volumes-")
                .tempdir_in(d)
                .expect("volumes directory")
                .keep()
        },
    )
}

/// The controller plugin and one node plugin per [`ClusterSpec::nodes`], in
/// that order, sharing one state directory below `volumes_dir`.
pub(crate) fn spawn_plugins(dir: &Path, volumes_dir: &Path, spec: &ClusterSpec) -> (Plugin, Vec<Plugin>) {
    let state = volumes_dir.join("hostpath");
    let mut controller = PluginBuilder::new(dir, "ctrl")
        .state_dir(&state)
        .args(&["--node", "false"]);
    if let Some(t) = spec.controller_topology {
        controller = controller.args(&["--topology", t]);
    }
    let controller = controller.args(&spec.plugin_args).spawn();
    let nodes = spec
        .nodes
        .iter()
        .map(|(name, zone)| {
            PluginBuilder::new(dir, name)
                .state_dir(&state)
                .args(&["--controller", "false", "--node-id", name])
                .args(&["--topology", &format!("zone={zone}")])
                .args(&spec.plugin_args)
                .args(&spec.node_args)
                .spawn()
        })
        .collect();
    (controller, nodes)
}

/// `volume create NAME` of the `hostpath` plugin inside topology `segment`.
pub fn create_args<'a>(name: &'a str, segment: &'a str) -> [&'a str; 7] {
    [
        "volume",
        "create",
        name,
        "--plugin",
        "hostpath",
        "--requisite",
        segment,
    ]
}

impl Cluster {
    /// The built-in deployment serving `/metrics` and `/readyz` on a port
    /// of its own; the cluster and the port.
    pub fn builtin_with_metrics() -> (Cluster, u16) {
        let port = crate::free_port();
        let extra = format!("metrics = \"127.0.0.1:{port}\"");
        let c = Cluster::start(ClusterSpec {
            extra: &extra,
            ..ClusterSpec::builtin()
        });
        (c, port)
    }

    pub fn start(spec: ClusterSpec) -> Cluster {
        let dir = test_dir();
        let volumes_dir = volumes_dir_in(dir.path(), &spec);
        let (controller, node_plugins) = spawn_plugins(dir.path(), &volumes_dir, &spec);
        let mut nodes = Vec::new();
        let mut agent_nodes = Vec::new();
        let mut node_config = String::new();
        assert!(
            spec.servers == 1 || spec.store.is_some(),
            "several servers share etcd"
        );
        let tls_ports: Vec<u16> = match spec.tls {
            true => (0..spec.servers).map(|_| free_port()).collect(),
            false => Vec::new(),
        };
        let cluster_config = |i: usize| match (spec.agents, tls_ports.get(i)) {
            (false, _) => String::new(),
            (true, None) => format!(
                "cluster = \"{}/cluster.sock\"\nheartbeat_timeout = \"1s\"\n",
                state_dir(i)
            ),
            (true, Some(port)) => {
                format!("cluster_address = \"127.0.0.1:{port}\"\nheartbeat_timeout = \"1s\"\n")
            }
        };
        for ((name, zone), p) in spec.nodes.iter().zip(node_plugins) {
            let node_dir = volumes_dir.join("nodes").join(name);
            if spec.agents {
                agent_nodes.push((name.to_string(), zone.to_string(), node_dir, p.endpoint()));
                nodes.push((name.to_string(), p));
                continue;
            }
            node_config.push_str(&format!(
                "[[node]]\nname = \"{name}\"\ndir = \"{}/nodes/{name}\"\nlabels = {{ zone-label = \"{zone}\" }}\nplugins = {{ hostpath = \"{}\" }}\n",
                volumes_dir.display(),
                p.endpoint()
            ));
            nodes.push((name.to_string(), p));
        }
        let guest = |name: &str| match spec.guest_dir {
            Some(d) => d.join(format!("{name}.wasm")),
            None => guest(name),
        };
        let guests = if let Some(tables) = spec.policy_tables {
            tables.to_string()
        } else if spec.guests {
            let mut tables = format!(
                "[[policy]]\nmodule = \"{}\"\nsettings = {{ prefix = \"pv\" }}\n[[policy]]\nmodule = \"{}\"\n[[policy]]\nmodule = \"{}\"\nsettings = {{ {} }}\n",
                guest("berth_naming_guest").display(),
                guest("berth_placement_guest").display(),
                guest("berth_retry_guest").display(),
                spec.retry_settings
            );
            if !spec.shadow.is_empty() {
                let decisions: Vec<String> = spec.shadow.iter().map(|d| format!("{d:?}")).collect();
                tables += &format!(
                    "[[policy]]\nname = \"candidate\"\nmodule = \"{}\"\nmode = \"shadow\"\ndecisions = [{}]\nsettings = {{ prefix = \"pv\", {} }}\n",
                    guest("berth_candidate_guest").display(),
                    decisions.join(", "),
                    spec.retry_settings
                );
            }
            tables
        } else {
            String::new()
        };
        let mut serves = Vec::new();
        for i in 0..spec.servers {
            let store = match (&spec.store, spec.servers) {
                (Some(store), n) if n > 1 => format!("{store}name = \"server-{i}\"\n"),
                (store, _) => store.clone().unwrap_or_default(),
            };
            let (config, log) = match i {
                0 => (dir.path().join("berth.toml"), dir.path().join("serve.log")),
                i => (
                    dir.path().join(format!("berth-{i}.toml")),
                    dir.path().join(format!("serve-{i}.log")),
                ),
            };
            std::fs::write(
                &config,
                format!(
                    "state = \"{}/berth.redb\"\nworkers = {}\nfingerprint_interval = \"500ms\"\nsecrets_dir = \"secrets\"\n{}\n{}{}[[plugin]]\nname = \"hostpath\"\ndriver = \"hostpath.csi.berth.dev\"\ncontroller = \"{}\"\n{}\n{node_config}{guests}",
                    state_dir(i),
                    spec.workers,
                    spec.extra,
                    cluster_config(i),
                    store,
                    controller.endpoint(),
                    spec.plugin_extra
                ) + &spec
                    .server_tables
                    .iter()
                    .filter(|(s, _)| *s == i)
                    .map(|(_, t)| format!("\n{t}"))
                    .collect::<String>(),
            )
            .unwrap();
            serves.push(ServeProcess {
                config,
                api: dir.path().join(state_dir(i)).join("berth.sock"),
                log,
                child: None,
            });
        }
        std::fs::create_dir_all(dir.path().join("secrets")).unwrap();
        let mut c = Cluster {
            own_volumes_dir: spec.volumes_dir.is_some(),
            volumes_dir,
            api: serves[0].api.clone(),
            serve_log: serves[0].log.clone(),
            config: serves[0].config.clone(),
            serves,
            dir,
            controller,
            nodes,
            agents: Vec::new(),
        };
        for i in 0..spec.servers {
            c.start_server(i);
            if i == 0 && spec.tls && spec.servers > 1 {
                c.share_kek();
            }
        }
        // In-process nodes are ready by the API's first answer: nothing to wait for.
        if !agent_nodes.is_empty() {
            let server = match tls_ports.is_empty() {
                false => tls_ports
                    .iter()
                    .map(|port| format!("https://127.0.0.1:{port}"))
                    .collect::<Vec<_>>()
                    .join(","),
                true => (0..spec.servers)
                    .map(|i| {
                        format!(
                            "unix://{}",
                            c.dir.path().join(state_dir(i)).join("cluster.sock").display()
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(","),
            };
            for (name, zone, node_dir, plugin) in &agent_nodes {
                let token = spec.tls.then(|| c.join_token(name));
                let mut a = AgentProcess::new(
                    c.dir.path(),
                    name,
                    zone,
                    &server,
                    node_dir,
                    plugin,
                    token.as_deref(),
                );
                for (_, table) in spec.agent_tables.iter().filter(|(n, _)| n == name) {
                    let mut text = std::fs::read_to_string(&a.config).unwrap();
                    text.push_str(table);
                    std::fs::write(&a.config, text).unwrap();
                }
                a.start();
                c.agents.push(a);
            }
            let names: Vec<String> = c.agents.iter().map(|a| a.name.clone()).collect();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            c.wait_nodes(&names, "ready", Duration::from_secs(30));
        }
        c
    }

    /// What an operator does when a cluster of several servers starts: the
    /// key-encryption key the first server made (under which the cluster
    /// CA's key is sealed in etcd) copied to every other server.
    pub fn share_kek(&self) {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let made = std::fs::read(self.dir.path().join(state_dir(0)).join("cluster/kek"))
            .expect("the first server made the key-encryption key");
        for i in 1..self.serves.len() {
            let dir = self.dir.path().join(state_dir(i)).join("cluster");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(dir.join("kek"))
                .unwrap();
            std::io::Write::write_all(&mut f, &made).unwrap();
        }
    }

    /// Starts the first server again.
    pub fn start_serve(&mut self) {
        self.start_server(0);
    }

    /// The process id of `berth serve`, while it runs.
    pub fn serve_pid(&self) -> Option<u32> {
        self.serves[0].child.as_ref().map(Child::id)
    }

    /// Every Berth process running (servers, agents) and every plugin
    /// process: what a benchmark's CPU time is counted over.
    pub fn pids(&self) -> (Vec<u32>, Vec<u32>) {
        let berth = self
            .serves
            .iter()
            .filter_map(|s| s.child.as_ref().map(Child::id))
            .chain(self.agents.iter().filter_map(AgentProcess::pid))
            .collect();
        let plugins = std::iter::once(&self.controller)
            .chain(self.nodes.iter().map(|(_, p)| p))
            .filter_map(Plugin::pid)
            .collect();
        (berth, plugins)
    }

    /// Where `berth serve` keeps its store.
    pub fn store_path(&self) -> PathBuf {
        self.dir.path().join("state/berth.redb")
    }

    /// SIGKILL, as in a crash: nothing is flushed or cleaned up.
    pub fn kill_serve(&mut self) {
        self.kill_server(0);
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.serve_log).unwrap_or_default()
    }

    /// Runs the CLI against this cluster's API.
    pub fn berth(&self, args: &[&str]) -> Output {
        Command::new(bin("berth"))
            .args(args)
            .env("BERTH_API", &self.api)
            .stdin(Stdio::null())
            .output()
            .expect("running berth")
    }

    /// Starts the CLI against this cluster's API without waiting for it.
    pub fn spawn_berth(&self, args: &[&str]) -> std::process::Child {
        Command::new(bin("berth"))
            .args(args)
            .env("BERTH_API", &self.api)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("running berth")
    }

    /// Creates a volume of the `hostpath` plugin inside topology `segment`
    /// (e.g. `zone=a`) and waits until it is available.
    pub fn create_in(&self, name: &str, segment: &str) {
        self.ok(&[&create_args(name, segment)[..], &["--wait"]].concat());
    }

    /// Runs the CLI and returns stdout, failing the test on a non-zero exit.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.berth(args);
        let (stdout, stderr) = texts(&out);
        assert!(
            out.status.success(),
            "berth {args:?} failed: {stdout}{stderr}\nserve log:\n{}",
            self.log()
        );
        stdout
    }

    /// A client of the API (it connects on first use).
    pub fn client(&self) -> BerthClient<Channel> {
        BerthClient::new(berth::csi::unix_channel(&self.api))
    }

    /// The API's summary, asked now; `None` while the API does not answer.
    pub fn summary(&self) -> Option<api::SummaryResponse> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async { summary(&mut self.client()).await.ok() })
    }

    /// Every volume as JSON.
    pub fn volumes(&self) -> Vec<serde_json::Value> {
        serde_json::from_str(&self.ok(&["volume", "list", "-o", "json"])).unwrap()
    }

    /// Every volume's name.
    pub fn volume_names(&self) -> Vec<String> {
        self.volumes()
            .iter()
            .map(|v| v["name"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// Asks for a volume of the `hostpath` plugin inside topology `segment`
    /// without waiting for it: whether the request was acknowledged.
    pub fn try_create_in(&self, name: &str, segment: &str) -> bool {
        self.berth(&create_args(name, segment)).status.success()
    }

    /// Waits until `pred` holds for the volume list, failing after 60 s.
    pub fn wait_until(&self, what: &str, pred: impl Fn(&[serde_json::Value]) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let v = self.volumes();
            if pred(&v) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}: {v:#?}\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Volumes the plugin holds (its records on disk).
    pub fn plugin_volumes(&self) -> usize {
        self.plugin_records("volumes")
    }

    /// Snapshots the plugin holds (its records on disk).
    pub fn plugin_snapshots(&self) -> usize {
        self.plugin_records("snapshots")
    }

    fn plugin_records(&self, kind: &str) -> usize {
        plugin_records(&self.volumes_dir, kind)
    }

    /// The plugin's data directory of a volume id.
    pub fn volume_data(&self, volume_id: &str) -> PathBuf {
        self.volumes_dir.join("hostpath/data").join(volume_id)
    }
}

/// The plugin's records of one kind (its `.json` files) below `volumes_dir`.
pub(crate) fn plugin_records(volumes_dir: &Path, kind: &str) -> usize {
    std::fs::read_dir(volumes_dir.join("hostpath").join(kind))
        .map(|d| {
            d.filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "json"))
            })
            .count()
        })
        .unwrap_or(0)
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.serves.len() {
            // A frozen server would not die of SIGKILL until woken.
            if self.serves[i].child.is_some() {
                self.freeze_server(i, false);
            }
            self.kill_server(i);
        }
        if self.own_volumes_dir {
            let _ = std::fs::remove_dir_all(&self.volumes_dir);
        }
    }
}
