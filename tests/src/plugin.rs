//! The sample CSI plugin as a process of the tests: its command line, its
//! socket, state directory and log.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::bin;

/// A sample CSI plugin process. Killed when dropped.
pub struct Plugin {
    child: Option<Child>,
    pub socket: PathBuf,
    pub state_dir: PathBuf,
    pub log: PathBuf,
    args: Vec<String>,
}

/// Builds the command line of a sample plugin.
pub struct PluginBuilder {
    socket: PathBuf,
    state_dir: PathBuf,
    log: PathBuf,
    args: Vec<String>,
}

impl PluginBuilder {
    /// A plugin whose socket, state and log live under `dir`, named `id`.
    pub fn new(dir: &Path, id: &str) -> Self {
        PluginBuilder {
            socket: dir.join(format!("{id}.sock")),
            state_dir: dir.join("state"),
            log: dir.join(format!("{id}.log")),
            args: vec!["--mount-mode".into(), "symlink".into()],
        }
    }

    pub fn state_dir(mut self, dir: &Path) -> Self {
        self.state_dir = dir.to_path_buf();
        self
    }

    pub fn arg(mut self, a: &str) -> Self {
        self.args.push(a.to_string());
        self
    }

    pub fn args(mut self, a: &[&str]) -> Self {
        self.args.extend(a.iter().map(|s| s.to_string()));
        self
    }

    /// Starts the plugin and waits until its socket accepts connections.
    pub fn spawn(self) -> Plugin {
        let mut p = self.build();
        p.start();
        p
    }

    /// Starts the plugin without waiting for its socket.
    pub fn spawn_unready(self) -> Plugin {
        let mut p = self.build();
        p.launch();
        p
    }

    fn build(self) -> Plugin {
        Plugin {
            child: None,
            socket: self.socket,
            state_dir: self.state_dir,
            log: self.log,
            args: self.args,
        }
    }
}

impl Plugin {
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    fn launch(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("plugin log file");
        let child = Command::new(bin("hostpath-plugin"))
            .arg("--endpoint")
            .arg(&self.socket)
            .arg("--state-dir")
            .arg(&self.state_dir)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .expect("starting hostpath-plugin");
        self.child = Some(child);
    }

    fn start(&mut self) {
        self.launch();
        self.wait_ready();
    }

    /// Waits until the socket of a plugin started with `spawn_unready` accepts connections.
    pub fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::os::unix::net::UnixStream::connect(&self.socket).is_err() {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!("hostpath-plugin exited with {status}: {}", self.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "plugin socket never came up: {}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The running process, if any.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL: no cleanup, the socket file stays behind as after a crash.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the same plugin again (same flags, socket and state).
    pub fn restart(&mut self) {
        self.kill();
        self.start();
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Plugin {
    fn drop(&mut self) {
        self.kill();
    }
}
