//! The `berth serve` processes of a [`Cluster`]: one, or several sharing
//! etcd, each started, killed, frozen and asked on its own.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use berth_proto::berth::v1 as api;

use crate::{Cluster, berth_logged, bin, texts};

/// One `berth serve` of a [`Cluster`]: killed when the cluster is dropped.
pub struct ServeProcess {
    pub config: PathBuf,
    pub api: PathBuf,
    pub log: PathBuf,
    pub(crate) child: Option<Child>,
}

/// Server `i`'s state directory, relative to the cluster's.
pub(crate) fn state_dir(i: usize) -> String {
    match i {
        0 => "state".into(),
        i => format!("state-{i}"),
    }
}

impl Cluster {
    /// Starts server `i` and waits until its API accepts connections.
    pub fn start_server(&mut self, i: usize) {
        let s = &mut self.serves[i];
        s.child = Some(berth_logged("serve", &s.config, &s.log));
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::os::unix::net::UnixStream::connect(&s.api).is_err() {
            if let Some(status) = s.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!(
                    "berth serve exited with {status}: {}",
                    std::fs::read_to_string(&s.log).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "the API never came up: {}",
                std::fs::read_to_string(&s.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL of server `i`, as in a crash.
    pub fn kill_server(&mut self, i: usize) {
        if let Some(mut c) = self.serves[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGSTOP (`true`) or SIGCONT (`false`) to server `i`.
    pub fn freeze_server(&self, i: usize, frozen: bool) {
        let pid = self.serves[i].child.as_ref().expect("server running").id();
        let signal = if frozen { libc::SIGSTOP } else { libc::SIGCONT };
        // SAFETY: a signal to a child this harness started and still holds.
        unsafe { libc::kill(pid as libc::pid_t, signal) };
    }

    /// Every server's API socket.
    pub fn apis(&self) -> Vec<PathBuf> {
        self.serves.iter().map(|s| s.api.clone()).collect()
    }

    /// Runs the CLI against server `i`'s API socket.
    pub fn berth_via(&self, i: usize, args: &[&str]) -> std::process::Output {
        Command::new(bin("berth"))
            .args(args)
            .env("BERTH_API", &self.serves[i].api)
            .stdin(Stdio::null())
            .output()
            .expect("running berth")
    }

    /// Runs the CLI against server `i`'s API socket, failing the test on a non-zero exit.
    pub fn ok_via(&self, i: usize, args: &[&str]) -> String {
        let out = self.berth_via(i, args);
        let (stdout, stderr) = texts(&out);
        assert!(
            out.status.success(),
            "berth {args:?} via server {i}: {stdout}{stderr}"
        );
        stdout
    }

    /// The servers as the leader reports them, asked through server `via`
    /// (`None` while it does not answer within 2 s).
    pub fn servers_via(&self, via: usize) -> Option<Vec<api::Server>> {
        let socket = self.serves[via].api.clone();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut client = api::berth_client::BerthClient::new(berth::csi::unix_channel(&socket));
            let answer =
                tokio::time::timeout(Duration::from_secs(2), client.summary(api::SummaryRequest {})).await;
            answer.ok()?.ok().map(|s| s.into_inner().servers)
        })
    }

    /// The index of the leading server, as the first of `among` to answer says.
    pub fn leader(&self, among: &[usize]) -> Option<usize> {
        among.iter().find_map(|&via| {
            let servers = self.servers_via(via)?;
            let name = servers.iter().find(|s| s.leader)?.name.clone();
            name.strip_prefix("server-")?.parse().ok()
        })
    }

    /// The leading server, waiting up to `within` for one.
    pub fn wait_leader(&self, among: &[usize], within: Duration) -> usize {
        let deadline = Instant::now() + within;
        loop {
            if let Some(l) = self.leader(among) {
                return l;
            }
            assert!(Instant::now() < deadline, "no leader within {within:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
