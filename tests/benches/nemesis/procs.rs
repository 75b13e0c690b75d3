//! The nemesis's processes, each started in its host's network namespace
//! (`nsenter --net`, which execs it: the pid is the process's own), logging
//! to a file of its own; killed (-9), stopped and continued by pid. They
//! share this process's mount namespace, as a node's processes share the
//! node's: a node plugin's mounts outlive it (`ip netns exec` would give
//! each start a mount namespace of its own, its mounts gone with it).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// What a process is, for choosing faults and reading the timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Etcd,
    Server,
    Agent,
    NodePlugin,
    Controller,
}

pub struct Proc {
    pub name: String,
    pub kind: Kind,
    ns: String,
    program: PathBuf,
    args: Vec<String>,
    /// Flags added for the fault in force (a plugin's misbehaviour); none
    /// once healed.
    extra: Vec<String>,
    env: Vec<(String, String)>,
    log: PathBuf,
    child: Option<Child>,
    stopped: bool,
}

impl Proc {
    pub fn new(name: &str, kind: Kind, ns: &str, program: &Path, args: Vec<String>, dir: &Path) -> Proc {
        Proc {
            name: name.to_string(),
            kind,
            ns: ns.to_string(),
            program: program.to_path_buf(),
            args,
            extra: Vec::new(),
            env: Vec::new(),
            log: dir.join(format!("{name}.log")),
            child: None,
            stopped: false,
        }
    }

    /// The paths the agent's last start refused to go on with: mounted
    /// volume paths its record does not name (its own error's list).
    pub fn refused_mounts(&self) -> Vec<String> {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        // Its last start's, not an earlier one's.
        let last = log
            .lines()
            .rev()
            .find(|l| l.contains("does not name") || l.contains("agent started"));
        let Some(line) = last.filter(|l| l.contains("does not name")) else {
            return Vec::new();
        };
        line.split_once("in use (")
            .and_then(|(_, rest)| rest.split_once(')'))
            .map(|(list, _)| list.split(", ").map(str::to_string).collect())
            .unwrap_or_default()
    }

    pub fn env(mut self, key: &str, value: &str) -> Proc {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    pub fn start(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let child = Command::new("nsenter")
            .arg(format!("--net=/var/run/netns/{}", self.ns))
            .arg("--")
            .arg(&self.program)
            .args(&self.args)
            .args(&self.extra)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        self.child = Some(child);
        self.stopped = false;
        Ok(())
    }

    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }

    fn signal(&self, sig: libc::c_int) {
        if let Some(c) = &self.child {
            // SAFETY: a plain kill(2) of our own child's pid.
            unsafe {
                libc::kill(c.id() as libc::pid_t, sig);
            }
        }
    }

    /// `kill -9`: nothing flushed, nothing cleaned up.
    pub fn kill(&mut self) {
        if self.stopped {
            self.signal(libc::SIGCONT);
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.stopped = false;
    }

    /// Killed and started again with `extra` added to its flags.
    pub fn restart_with(&mut self, extra: Vec<String>) -> anyhow::Result<()> {
        self.kill();
        self.extra = extra;
        self.start()
    }

    /// Killed and started with its own flags again, if a fault added some;
    /// whether it was.
    pub fn behave(&mut self) -> anyhow::Result<bool> {
        if self.extra.is_empty() {
            return Ok(false);
        }
        self.restart_with(Vec::new())?;
        Ok(true)
    }

    pub fn stop(&mut self) {
        self.signal(libc::SIGSTOP);
        self.stopped = true;
    }

    pub fn cont(&mut self) {
        self.signal(libc::SIGCONT);
        self.stopped = false;
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}
