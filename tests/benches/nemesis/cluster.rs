//! The system under test: three etcd members, three `berth serve` sharing
//! them, three nodes (a `berth-agent` and its node plugin each) and the
//! sample plugin's controller, each host in its own namespace. Servers and
//! agents speak TLS on the namespaces' addresses; the API sockets and the
//! plugins' sockets are unix sockets, which no partition cuts.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use berth_proto::berth::v1 as api;
use berth_tests::bin;
use berth_tests::faultfs::FaultDisk;

use crate::net::Net;
use crate::procs::{Kind, Proc};

pub const ETCD: [&str; 3] = ["e0", "e1", "e2"];
pub const SERVERS: [&str; 3] = ["s0", "s1", "s2"];
pub const NODES: [&str; 3] = ["n0", "n1", "n2"];
pub const LEASE_TTL_S: u64 = 3;

pub struct Cluster {
    pub dir: PathBuf,
    pub net: Net,
    pub procs: Vec<Proc>,
    /// The journal every plugin process appends to.
    pub journal: PathBuf,
    /// Where the plugins keep their volumes (shared by controller and nodes).
    pub plugin_state: PathBuf,
    /// The disks that fail on command, by the process whose directory they
    /// hold: each etcd member's data and each agent's record and mounts.
    pub disks: Vec<(String, FaultDisk)>,
}

/// `node-0` for host `n0`.
pub fn node_name(host: &str) -> String {
    format!("node-{}", &host[1..])
}

/// `server-0` for host `s0`.
pub fn server_name(host: &str) -> String {
    format!("server-{}", &host[1..])
}

pub fn api_socket(dir: &Path, server: &str) -> PathBuf {
    dir.join(server).join("berth.sock")
}

impl Cluster {
    /// `controller_publish: false` runs the plugins without ControllerPublish,
    /// so that only Berth's order keeps a single-node volume on one node.
    pub fn start(dir: &Path, controller_publish: bool) -> anyhow::Result<Cluster> {
        let mut hosts: Vec<&str> = ETCD.iter().chain(&SERVERS).chain(&NODES).copied().collect();
        hosts.push("c0");
        // The network first: it takes the machine's one-run lock.
        let net = Net::new(&hosts)?;
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir.join("bin"))?;
        // The run's own copies: a build during a long run (it replaces the
        // target directory's) never changes what a restarted process runs.
        for name in ["berth", "berth-agent", "hostpath-plugin"] {
            std::fs::copy(bin(name), dir.join("bin").join(name))
                .with_context(|| format!("copying {name}"))?;
        }
        let mut c = Cluster {
            dir: dir.to_path_buf(),
            journal: dir.join("journal.jsonl"),
            plugin_state: dir.join("hostpath"),
            net,
            procs: Vec::new(),
            disks: Vec::new(),
        };
        // Before any process starts, so that none has the directories
        // without their disks.
        for owner in ETCD {
            c.on_faulty_disk(owner, &c.dir.join(owner))?;
        }
        for n in NODES {
            c.on_faulty_disk(&format!("{n}-agent"), &c.dir.join(n))?;
        }
        c.start_etcd()?;
        c.wait_etcd(Duration::from_secs(60))?;
        c.start_plugins(controller_publish)?;
        c.start_servers()?;
        c.start_agents()?;
        Ok(c)
    }

    /// `dir`, made, on a disk that fails on command (none where this
    /// process may not mount one).
    fn on_faulty_disk(&mut self, owner: &str, dir: &Path) -> anyhow::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        if let Some(disk) = FaultDisk::over(dir) {
            self.disks.push((owner.to_string(), disk));
        }
        Ok(())
    }

    fn bin(&self, name: &str) -> PathBuf {
        self.dir.join("bin").join(name)
    }

    fn add(&mut self, mut p: Proc) -> anyhow::Result<()> {
        p.start().with_context(|| format!("starting {}", p.name))?;
        self.procs.push(p);
        Ok(())
    }

    pub fn proc(&mut self, name: &str) -> &mut Proc {
        self.procs
            .iter_mut()
            .find(|p| p.name == name)
            .unwrap_or_else(|| panic!("no process {name}"))
    }

    fn etcd_urls(&self, port: u16) -> Vec<String> {
        ETCD.iter()
            .map(|e| format!("http://{}:{port}", self.net.host(e).ip))
            .collect()
    }

    fn start_etcd(&mut self) -> anyhow::Result<()> {
        let initial: Vec<String> = ETCD
            .iter()
            .zip(self.etcd_urls(2380))
            .map(|(e, url)| format!("{e}={url}"))
            .collect();
        for e in ETCD {
            let ip = self.net.host(e).ip.clone();
            let client = format!("http://{ip}:2379");
            let peer = format!("http://{ip}:2380");
            let args = [
                "--name",
                e,
                "--data-dir",
                &self.dir.join(e).display().to_string(),
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
                "--initial-cluster",
                &initial.join(","),
                "--initial-cluster-state",
                "new",
                "--initial-cluster-token",
                "berth-nemesis",
                "--heartbeat-interval",
                "100",
                "--election-timeout",
                "1000",
            ]
            .map(String::from)
            .to_vec();
            let ns = self.net.host(e).ns.clone();
            let p = Proc::new(e, Kind::Etcd, &ns, Path::new("etcd"), args, &self.dir);
            self.add(p)?;
        }
        Ok(())
    }

    /// Until every member says it is healthy (which needs a quorum).
    fn wait_etcd(&self, within: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        let ns = &self.net.host(SERVERS[0]).ns;
        let healthy = |e: &str| {
            let addr = format!("{}:2379", self.net.host(e).ip);
            crate::net::http_get(ns, &addr, "/health").is_some_and(|r| r.contains("\"health\":\"true\""))
        };
        while !ETCD.iter().all(|e| healthy(e)) {
            anyhow::ensure!(Instant::now() < deadline, "etcd not healthy within {within:?}");
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(())
    }

    fn start_plugins(&mut self, controller_publish: bool) -> anyhow::Result<()> {
        let plugin = self.bin("hostpath-plugin");
        let (state, journal) = (self.plugin_state.clone(), self.journal.clone());
        let common = |socket: PathBuf| {
            vec![
                "--endpoint".to_string(),
                socket.display().to_string(),
                "--state-dir".into(),
                state.display().to_string(),
                "--journal".into(),
                journal.display().to_string(),
                "--publish-unpublish".into(),
                controller_publish.to_string(),
            ]
        };
        let mut args = common(self.dir.join("c0.sock"));
        args.extend(["--node".into(), "false".into()]);
        let ns = self.net.host("c0").ns.clone();
        self.add(Proc::new("c0", Kind::Controller, &ns, &plugin, args, &self.dir))?;
        for n in NODES {
            let mut args = common(self.dir.join(format!("{n}-csi.sock")));
            args.extend([
                "--controller".into(),
                "false".into(),
                "--node-id".into(),
                node_name(n),
            ]);
            let ns = self.net.host(n).ns.clone();
            let name = format!("{n}-plugin");
            self.add(Proc::new(&name, Kind::NodePlugin, &ns, &plugin, args, &self.dir))?;
        }
        Ok(())
    }

    fn server_config(&self, s: &str) -> String {
        let ip = &self.net.host(s).ip;
        let etcd: Vec<String> = self.etcd_urls(2379).iter().map(|u| format!("{u:?}")).collect();
        format!(
            "state = \"{dir}/{s}/berth.redb\"\nworkers = 16\nfingerprint_interval = \"1s\"\n\
             cluster_address = \"{ip}:7443\"\ncluster_names = [\"{ip}\"]\nheartbeat_timeout = \"3s\"\n\
             [store]\netcd = [{etcd}]\nprefix = \"/berth\"\nname = \"{name}\"\nlease_ttl = \"{LEASE_TTL_S}s\"\n\
             [[plugin]]\nname = \"hostpath\"\ndriver = \"hostpath.csi.berth.dev\"\ncontroller = \"{dir}/c0.sock\"\n",
            dir = self.dir.display(),
            etcd = etcd.join(", "),
            name = server_name(s),
        )
    }

    fn start_servers(&mut self) -> anyhow::Result<()> {
        for (i, s) in SERVERS.iter().enumerate() {
            let config = self.dir.join(format!("{s}.toml"));
            std::fs::create_dir_all(self.dir.join(s))?;
            std::fs::write(&config, self.server_config(s))?;
            if i > 0 {
                // What an operator does: the first server's key-encryption key on every other.
                let kek = std::fs::read(self.dir.join("s0/cluster/kek")).context("the first server's kek")?;
                write_private(&self.dir.join(s).join("cluster"), "kek", &kek)?;
            }
            let ns = self.net.host(s).ns.clone();
            let args = vec!["serve".into(), "--config".into(), config.display().to_string()];
            self.add(
                Proc::new(s, Kind::Server, &ns, &self.bin("berth"), args, &self.dir).env("BERTH_LOG", "info"),
            )?;
            wait_for(&api_socket(&self.dir, s), Duration::from_secs(60))?;
            if i == 0 {
                wait_for(&self.dir.join("s0/cluster/kek"), Duration::from_secs(60))?;
            }
        }
        Ok(())
    }

    fn start_agents(&mut self) -> anyhow::Result<()> {
        let servers: Vec<String> = SERVERS
            .iter()
            .map(|s| format!("\"https://{}:7443\"", self.net.host(s).ip))
            .collect();
        for n in NODES {
            let token = self.join_token(&node_name(n))?;
            let config = self.dir.join(format!("{n}-agent.toml"));
            std::fs::write(
                &config,
                format!(
                    "node = \"{node}\"\nserver = [{servers}]\ntoken = \"{token}\"\ndir = \"{dir}/{n}\"\n\
                     heartbeat_interval = \"500ms\"\nfingerprint_interval = \"1s\"\n[plugins]\nhostpath = \"{dir}/{n}-csi.sock\"\n",
                    node = node_name(n),
                    servers = servers.join(", "),
                    dir = self.dir.display(),
                ),
            )?;
            let ns = self.net.host(n).ns.clone();
            let args = vec!["--config".into(), config.display().to_string()];
            let name = format!("{n}-agent");
            self.add(
                Proc::new(&name, Kind::Agent, &ns, &self.bin("berth-agent"), args, &self.dir)
                    .env("BERTH_LOG", "info"),
            )?;
        }
        Ok(())
    }

    /// A join token for `node`, asked of any server until one answers.
    fn join_token(&self, node: &str) -> anyhow::Result<String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            for s in SERVERS {
                let request = api::CreateJoinTokenRequest {
                    ttl_seconds: 600,
                    node: node.to_string(),
                    ..Default::default()
                };
                let answer = crate::block_on(async {
                    let mut client = crate::client(&api_socket(&self.dir, s));
                    tokio::time::timeout(Duration::from_secs(3), client.create_join_token(request)).await
                });
                if let Ok(Ok(r)) = answer {
                    return Ok(r.into_inner().token);
                }
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "no server made a join token within 60 s"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The name of the leading server as the first to answer says.
    pub fn leader(&self) -> Option<String> {
        SERVERS.iter().find_map(|s| {
            let summary = crate::block_on(async {
                let mut client = crate::client(&api_socket(&self.dir, s));
                tokio::time::timeout(Duration::from_secs(2), client.summary(api::SummaryRequest {})).await
            });
            let servers = summary.ok()?.ok()?.into_inner().servers;
            let name = servers.iter().find(|x| x.leader)?.name.clone();
            SERVERS
                .iter()
                .find(|h| server_name(h) == name)
                .map(|h| h.to_string())
        })
    }

    /// Every process that is not running is started again (after a kill);
    /// what was started, and what was done by hand first.
    ///
    /// An agent refuses to start beside a mounted volume path its record
    /// does not name. A plugin's lying NodeUnpublishVolume leaves exactly
    /// that; the operator does what the agent's error says (unmount the
    /// path, remove it) for such a path only. Any other path is left, and
    /// the agent with it: a record that lost a mount is Berth's fault.
    pub fn restart_dead(&mut self) -> anyhow::Result<(Vec<String>, Vec<String>)> {
        let (mut started, mut by_hand) = (Vec::new(), Vec::new());
        let mut lies = None;
        for p in &mut self.procs {
            if p.running() {
                continue;
            }
            if p.kind == Kind::Agent {
                let refused = p.refused_mounts();
                if !refused.is_empty() {
                    let journal = &self.journal;
                    let lies = lies.get_or_insert_with(|| {
                        berth_tests::nemesis::check::Lies::read(&berth_tests::nemesis::check::journal(
                            journal,
                        ))
                    });
                    for path in refused.iter().filter(|path| lies.left_mounted(path)) {
                        let _ = std::process::Command::new("umount").arg(path).status();
                        std::fs::remove_dir_all(path).or_else(|_| std::fs::remove_file(path))?;
                        by_hand.push(format!("{path} (left mounted by a lie)"));
                    }
                }
            }
            p.kill();
            p.start()?;
            started.push(p.name.clone());
        }
        Ok((started, by_hand))
    }
}

impl Drop for Cluster {
    /// Everything the run made goes, after a failure too: the processes,
    /// then what they left mounted below the run's directory (the
    /// namespaces go with `net`).
    fn drop(&mut self) {
        for p in &mut self.procs {
            p.kill();
        }
        self.disks.clear();
        for point in berth_tests::nemesis::check::mounts_below(&self.dir) {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&point)
                .status();
        }
    }
}

fn write_private(dir: &Path, name: &str, bytes: &[u8]) -> anyhow::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(dir.join(name))?;
    std::io::Write::write_all(&mut f, bytes)?;
    Ok(())
}

fn wait_for(path: &Path, within: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    while !path.exists() {
        anyhow::ensure!(
            Instant::now() < deadline,
            "{} did not appear within {within:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}
