//! The sample plugin as the conformance runs start it: its shapes, its
//! processes (killed when dropped), and what a run left behind.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};

/// How a shape's processes are split between controller and node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Split {
    /// One process serves both.
    None,
    /// `--mode controller` and `--mode node`.
    ByMode,
    /// `--node false` and `--controller false`: the same processes as
    /// [`Split::ByMode`], spelled the other way the plugin's `--help` offers.
    ByFlags,
}

/// One way the sample plugin is run.
pub(crate) struct Shape {
    pub name: &'static str,
    /// The plugin's flags (every process of the shape).
    pub flags: &'static [&'static str],
    pub split: Split,
}

pub(crate) const SHAPES: &[Shape] = &[
    Shape {
        name: "one process",
        flags: &[],
        split: Split::None,
    },
    Shape {
        name: "apart, --mode",
        flags: &[],
        split: Split::ByMode,
    },
    Shape {
        name: "apart, --node/--controller false",
        flags: &[],
        split: Split::ByFlags,
    },
    Shape {
        name: "without ControllerPublish",
        flags: &["--publish-unpublish", "false"],
        split: Split::None,
    },
    Shape {
        name: "without staging",
        flags: &["--stage-unstage", "false"],
        split: Split::None,
    },
    Shape {
        name: "CSI 1.6",
        flags: &["--csi-version", "1.6"],
        split: Split::None,
    },
    Shape {
        name: "optional fields left out",
        flags: &["--omit", "all"],
        split: Split::None,
    },
    Shape {
        name: "capacity unknown",
        flags: &["--omit", "capacity"],
        split: Split::None,
    },
    Shape {
        name: "snapshots ready later",
        flags: &["--snapshot-ready-after", "1s"],
        split: Split::None,
    },
];

/// Which service a process of a shape serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    All,
    Controller,
    Node,
}

impl Role {
    fn label(self) -> &'static str {
        match self {
            Role::All => "all",
            Role::Controller => "controller",
            Role::Node => "node",
        }
    }

    /// The plugin's flags for this role in `split`.
    fn flags(self, split: Split) -> &'static [&'static str] {
        match (self, split) {
            (Role::All, _) | (_, Split::None) => &[],
            (Role::Controller, Split::ByMode) => &["--mode", "controller"],
            (Role::Node, Split::ByMode) => &["--mode", "node"],
            (Role::Controller, Split::ByFlags) => &["--node", "false"],
            (Role::Node, Split::ByFlags) => &["--controller", "false"],
        }
    }
}

/// Kills and reaps a plugin process when dropped.
pub(crate) struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The sample plugin serving `role` of `split` on `socket`, its state in
/// `dir/state`, its log in `dir`.
pub(crate) fn start(
    plugin: &Path,
    dir: &Path,
    socket: &Path,
    flags: &[&str],
    (role, split): (Role, Split),
) -> anyhow::Result<Process> {
    let log = std::fs::File::create(dir.join(format!("plugin-{}.log", role.label())))?;
    let child = Command::new(plugin)
        .arg("--endpoint")
        .arg(socket)
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(role.flags(split))
        .args(flags)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting the sample plugin")?;
    let process = Process(child);
    let started = Instant::now();
    while !socket.exists() {
        ensure!(
            started.elapsed() < Duration::from_secs(20),
            "the sample plugin made no socket at {}",
            socket.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(process)
}

/// The processes of a shape in a directory: the endpoint that serves the
/// Controller service (and Node, unsplit), the node endpoint when split.
/// Dropping it stops them.
pub(crate) struct Started {
    pub controller: std::path::PathBuf,
    pub node: Option<std::path::PathBuf>,
    _processes: Vec<Process>,
}

pub(crate) fn start_shape(
    plugin: &Path,
    dir: &Path,
    flags: &[&str],
    split: Split,
) -> anyhow::Result<Started> {
    if split == Split::None {
        let socket = dir.join("csi.sock");
        let process = start(plugin, dir, &socket, flags, (Role::All, split))?;
        return Ok(Started {
            controller: socket,
            node: None,
            _processes: vec![process],
        });
    }
    let controller = dir.join("controller.sock");
    let node = dir.join("node.sock");
    let processes = vec![
        start(plugin, dir, &controller, flags, (Role::Controller, split))?,
        start(plugin, dir, &node, flags, (Role::Node, split))?,
    ];
    Ok(Started {
        controller,
        node: Some(node),
        _processes: processes,
    })
}

/// What a run left: mounts below `dir` (unmounted here, so that nothing
/// outlives the run), and volumes or snapshots on the plugin.
pub(crate) fn left_behind(dir: &Path) -> Vec<String> {
    let mut left = Vec::new();
    if let Ok(table) = std::fs::read_to_string("/proc/self/mountinfo") {
        for point in table.lines().filter_map(|l| l.split(' ').nth(4)) {
            if Path::new(point).starts_with(dir) {
                left.push(format!("mounted {point}"));
                let _ = Command::new("umount").arg(point).status();
            }
        }
    }
    for kind in ["volumes", "snapshots"] {
        let n = std::fs::read_dir(dir.join("state").join(kind)).map_or(0, |d| d.count());
        if n > 0 {
            left.push(format!("{n} {kind}"));
        }
    }
    left
}
