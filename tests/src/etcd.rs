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
    /// Where `/health` is asked (plain HTTP even when clients speak TLS).
    health_port: u16,
    child: Option<Child>,
}

/// An etcd cluster of N members; every member is killed when it is dropped.
pub struct EtcdCluster {
    dir: tempfile::TempDir,
    members: Vec<Member>,
    initial_cluster: String,
    /// Clients speak TLS and must present a certificate of this CA.
    tls: bool,
}

/// The files of an etcd cluster with TLS for clients, in its directory.
pub const ETCD_CA: &str = "ca.pem";
pub const ETCD_CLIENT: (&str, &str) = ("client.pem", "client.key");

/// A CA, the members' certificate (for 127.0.0.1 and localhost) and a
/// client certificate, written to `dir`.
pub(crate) fn write_pki(dir: &std::path::Path) {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    };
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.distinguished_name.push(DnType::CommonName, "etcd test CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    std::fs::write(dir.join(ETCD_CA), ca_cert.pem()).unwrap();
    let issuer = Issuer::from_ca_cert_pem(&ca_cert.pem(), &ca_key).unwrap();
    for (cert, key, names, usage) in [
        (
            "server.pem",
            "server.key",
            vec!["127.0.0.1".to_string(), "localhost".to_string()],
            vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        ),
        (
            ETCD_CLIENT.0,
            ETCD_CLIENT.1,
            vec![],
            vec![ExtendedKeyUsagePurpose::ClientAuth],
        ),
    ] {
        let k = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(names).unwrap();
        p.distinguished_name.push(DnType::CommonName, "berth");
        p.extended_key_usages = usage;
        let c = p.signed_by(&k, &issuer).unwrap();
        std::fs::write(dir.join(cert), c.pem()).unwrap();
        std::fs::write(dir.join(key), k.serialize_pem()).unwrap();
    }
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
        EtcdCluster::start_with(members, false)
    }

    /// Members that take clients over TLS only, and only with a client
    /// certificate of their CA (`--client-cert-auth`); the files are in
    /// [`EtcdCluster::file`].
    pub fn start_tls(members: usize) -> EtcdCluster {
        EtcdCluster::start_with(members, true)
    }

    /// A file of the cluster's directory (its PKI with TLS).
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn start_with(members: usize, tls: bool) -> EtcdCluster {
        let members: Vec<Member> = (0..members)
            .map(|i| Member {
                name: format!("m{i}"),
                client_port: free_port(),
                peer_port: free_port(),
                health_port: free_port(),
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
            tls,
        };
        if tls {
            write_pki(c.dir.path());
        }
        for i in 0..c.members.len() {
            c.spawn(i);
        }
        c.wait_healthy(Duration::from_secs(30));
        c
    }

    /// Member `i`'s data directory.
    pub fn data_dir(&self, i: usize) -> PathBuf {
        self.dir.path().join(&self.members[i].name)
    }

    pub fn log(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("{}.log", self.members[i].name))
    }

    fn spawn(&mut self, i: usize) {
        let m = &self.members[i];
        let scheme = if self.tls { "https" } else { "http" };
        let client = format!("{scheme}://127.0.0.1:{}", m.client_port);
        let health = format!("http://127.0.0.1:{}", m.health_port);
        let peer = format!("http://127.0.0.1:{}", m.peer_port);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log(i))
            .unwrap();
        let mut command = Command::new("etcd");
        if self.tls {
            let file = |f: &str| self.dir.path().join(f);
            command
                .arg("--cert-file")
                .arg(file("server.pem"))
                .arg("--key-file")
                .arg(file("server.key"))
                .arg("--trusted-ca-file")
                .arg(file(ETCD_CA))
                .arg("--client-cert-auth");
        }
        let child = command
            .args(["--name", &m.name])
            .args(["--listen-metrics-urls", &health])
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
        let scheme = if self.tls { "https" } else { "http" };
        self.members
            .iter()
            .map(|m| format!("{scheme}://127.0.0.1:{}", m.client_port))
            .collect()
    }

    /// `[store]` for `berth.toml`, on these members, below `prefix` (with
    /// TLS, the CA and the client certificate too).
    pub fn store_config(&self, prefix: &str) -> String {
        let urls: Vec<String> = self.endpoints().iter().map(|u| format!("{u:?}")).collect();
        let mut text = format!("[store]\netcd = [{}]\nprefix = {prefix:?}\n", urls.join(", "));
        if self.tls {
            text.push_str(&format!(
                "ca = {:?}\ncert = {:?}\nkey = {:?}\n",
                self.file(ETCD_CA).display().to_string(),
                self.file(ETCD_CLIENT.0).display().to_string(),
                self.file(ETCD_CLIENT.1).display().to_string(),
            ));
        }
        text
    }

    /// `kill -9` of member `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGSTOP (`true`) or SIGCONT (`false`) to member `i`: its connections
    /// stay open and nothing answers, as across a partition.
    pub fn freeze(&self, i: usize, frozen: bool) {
        if let Some(child) = &self.members[i].child {
            let sig = if frozen { libc::SIGSTOP } else { libc::SIGCONT };
            // SAFETY: a plain kill(2) of our own child's pid.
            unsafe {
                libc::kill(child.id() as libc::pid_t, sig);
            }
        }
    }

    /// Member `i` again, with the data it had.
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.spawn(i);
    }

    /// Whether member `i` says it is healthy (its `/health`, which needs a quorum).
    pub fn healthy(&self, i: usize) -> bool {
        let port = self.members[i].health_port;
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

    /// Member `i`'s database file: its size on disk and the part in use
    /// (read from its metrics), in bytes; what etcd's quota is measured against.
    pub fn db_size(&self, i: usize) -> Option<(u64, u64)> {
        let port = self.members[i].health_port;
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        let metric = |name: &str| -> Option<u64> {
            let line = out.lines().find(|l| l.split_whitespace().next() == Some(name))?;
            line.split_whitespace()
                .nth(1)?
                .parse::<f64>()
                .ok()
                .map(|v| v as u64)
        };
        Some((
            metric("etcd_mvcc_db_total_size_in_bytes")?,
            metric("etcd_mvcc_db_total_size_in_use_in_bytes")?,
        ))
    }

    /// Writes `n` volumes (`record(i)` for each `i`) below `prefix` through
    /// Berth's own etcd store, many writes in flight; how long it took.
    pub fn fill(&self, prefix: &str, n: usize, record: fn(usize) -> berth::model::VolumeRecord) -> Duration {
        use berth::store::{EtcdSettings, EtcdStore, Store};
        let started = Instant::now();
        let settings = EtcdSettings::new(self.endpoints(), Some(prefix.into())).expect("etcd settings");
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(async {
            let store = std::sync::Arc::new(EtcdStore::connect(settings, None).await.expect("etcd store"));
            let mut puts: tokio::task::JoinSet<Result<(), berth::store::StoreError>> =
                tokio::task::JoinSet::new();
            for i in 0..n {
                if puts.len() >= 512
                    && let Some(put) = puts.join_next().await
                {
                    put.expect("put task").expect("put");
                }
                let store = store.clone();
                puts.spawn(async move { store.put(&record(i)).await });
            }
            while let Some(put) = puts.join_next().await {
                put.expect("put task").expect("put");
            }
        });
        started.elapsed()
    }

    /// The running members' process ids.
    pub fn pids(&self) -> Vec<u32> {
        self.members
            .iter()
            .filter_map(|m| m.child.as_ref().map(Child::id))
            .collect()
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

/// The value stored at `key` on the member at `endpoint` (plain HTTP), if any.
pub async fn stored(endpoint: &str, key: &[u8]) -> Option<Vec<u8>> {
    use berth_proto::etcd::etcdserverpb as pb;
    let mut kv = pb::kv_client::KvClient::connect(endpoint.to_string())
        .await
        .expect("an etcd member to read from");
    let read = pb::RangeRequest {
        key: key.to_vec(),
        ..Default::default()
    };
    let found = kv.range(read).await.expect("a read of one key").into_inner();
    found.kvs.into_iter().next().map(|kv| kv.value)
}

/// Puts `key` on the member at `endpoint` (plain HTTP); the revision it was put at.
pub async fn put(endpoint: &str, key: &[u8], value: &[u8]) -> i64 {
    use berth_proto::etcd::etcdserverpb as pb;
    let mut kv = pb::kv_client::KvClient::connect(endpoint.to_string())
        .await
        .expect("an etcd member to write to");
    let put = pb::PutRequest {
        key: key.to_vec(),
        value: value.to_vec(),
        ..Default::default()
    };
    let answer = kv.put(put).await.expect("a put of one key").into_inner();
    answer.header.map_or(0, |h| h.revision)
}

/// A fence as a leader's: `key` put now, its create revision.
pub async fn fence(endpoint: &str, key: &[u8]) -> berth::store::Fence {
    berth::store::Fence {
        key: key.to_vec(),
        create_revision: put(endpoint, key, b"test").await,
    }
}
