//! A real etcd cluster for the tests: `etcd` processes (the Debian package
//! `etcd-server`, which `cargo xtask test` and CI install) on loopback ports,
//! each with its data in a temporary directory.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::free_port;

struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
}

/// An etcd cluster of N members; every member is killed when it is dropped.
pub struct EtcdCluster {
    dir: tempfile::TempDir,
    members: Vec<Member>,
    initial_cluster: String,
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}

impl EtcdCluster {
    /// Starts `members` members and waits until the cluster answers.
    pub fn start(members: usize) -> EtcdCluster {
        let members: Vec<Member> = (0..members)
            .map(|i| Member {
                name: format!("m{i}"),
                client_port: free_port(),
                peer_port: free_port(),
                child: None,
            })
            .collect();
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",");
        let mut c = EtcdCluster {
            dir: tempfile::Builder::new().prefix("berth-etcd-").tempdir().unwrap(),
            members,
            initial_cluster,
        };
        for i in 0..c.members.len() {
            c.spawn(i);
        }
        c.wait_healthy(Duration::from_secs(30));
        c
    }

    fn data_dir(&self, i: usize) -> PathBuf {
        self.dir.path().join(&self.members[i].name)
    }

    pub fn log(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("{}.log", self.members[i].name))
    }

    fn spawn(&mut self, i: usize) {
        let m = &self.members[i];
        let client = format!("http://127.0.0.1:{}", m.client_port);
        let peer = format!("http://127.0.0.1:{}", m.peer_port);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log(i))
            .unwrap();
        let child = Command::new("etcd")
            .args(["--name", &m.name])
            .arg("--data-dir")
            .arg(self.data_dir(i))
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &self.initial_cluster])
            .args([
                "--initial-cluster-state",
                "new",
                "--initial-cluster-token",
                "berth-test",
            ])
            // Small and quick: elections within a second on loopback.
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("starting etcd ({e}): install the Debian package etcd-server (cargo xtask test does)")
            });
        self.members[i].child = Some(child);
    }

    /// The members' client URLs.
    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| format!("http://127.0.0.1:{}", m.client_port))
            .collect()
    }

    /// `[store]` for `berth.toml`, on these members, below `prefix`.
    pub fn store_config(&self, prefix: &str) -> String {
        let urls: Vec<String> = self.endpoints().iter().map(|u| format!("{u:?}")).collect();
        format!("[store]\netcd = [{}]\nprefix = {prefix:?}\n", urls.join(", "))
    }

    /// `kill -9` of member `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Member `i` again, with the data it had.
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.spawn(i);
    }

    /// Whether member `i` says it is healthy (its `/health`, which needs a quorum).
    pub fn healthy(&self, i: usize) -> bool {
        let port = self.members[i].client_port;
        let ask = || -> std::io::Result<String> {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
            s.set_read_timeout(Some(Duration::from_secs(2)))?;
            s.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
            let mut out = String::new();
            s.read_to_string(&mut out)?;
            Ok(out)
        };
        ask().is_ok_and(|r| r.contains("\"health\":\"true\""))
    }

    /// Waits until every running member is healthy.
    pub fn wait_healthy(&self, within: Duration) {
        let deadline = Instant::now() + within;
        let running: Vec<usize> = (0..self.members.len())
            .filter(|i| self.members[*i].child.is_some())
            .collect();
        while !running.iter().all(|i| self.healthy(*i)) {
            assert!(
                Instant::now() < deadline,
                "etcd not healthy after {within:?}:\n{}",
                running
                    .iter()
                    .map(|i| std::fs::read_to_string(self.log(*i)).unwrap_or_default())
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
