//! `cargo xtask conformance [--csi-sanity PATH]`: the Kubernetes CSI
//! conformance suite (csi-sanity, kubernetes-csi/csi-test) against the
//! sample plugin in every shape it offers: one process; controller and node
//! as separate processes; without ControllerPublish; without staging; an
//! older CSI version; and the spec's optional fields left out. Each shape
//! must pass with no failure and leave nothing mounted or on the plugin.
//! Then `berth plugin check` is judged against it (`conformance_compare`).
//!
//! csi-sanity is not part of Berth: give its path with `--csi-sanity`, or
//! `BERTH_CSI_SANITY`; the project's CI passes the build it is given.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};

use crate::{cargo, root, run};

/// One way the sample plugin is run.
struct Shape {
    name: &'static str,
    /// The plugin's flags (every process of the shape).
    flags: &'static [&'static str],
    /// Controller and node as two processes (`--csi.controllerendpoint`).
    split: bool,
}

const SHAPES: &[Shape] = &[
    Shape {
        name: "one process",
        flags: &[],
        split: false,
    },
    Shape {
        name: "controller and node apart",
        flags: &[],
        split: true,
    },
    Shape {
        name: "without ControllerPublish",
        flags: &["--publish-unpublish", "false"],
        split: false,
    },
    Shape {
        name: "without staging",
        flags: &["--stage-unstage", "false"],
        split: false,
    },
    Shape {
        name: "CSI 1.6",
        flags: &["--csi-version", "1.6"],
        split: false,
    },
    Shape {
        name: "optional fields left out",
        flags: &["--omit", "all"],
        split: false,
    },
    Shape {
        name: "capacity unknown",
        flags: &["--omit", "capacity"],
        split: false,
    },
    Shape {
        name: "snapshots ready later",
        flags: &["--snapshot-ready-after", "1s"],
        split: false,
    },
];

/// csi-sanity's tally of one run.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub passed: u32,
    pub failed: u32,
    pub skipped: u32,
    /// The names of the failed cases.
    pub failures: Vec<String>,
}

fn sanity_path(args: &[String]) -> anyhow::Result<PathBuf> {
    let mut it = args.iter();
    let mut given = std::env::var_os("BERTH_CSI_SANITY").map(PathBuf::from);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--csi-sanity" => given = Some(it.next().context("--csi-sanity needs a path")?.into()),
            other => bail!("conformance: unknown argument {other} (--csi-sanity PATH)"),
        }
    }
    let path = given.unwrap_or_else(|| root().join("../shared/tools/csi-sanity/csi-sanity"));
    ensure!(
        path.exists(),
        "no csi-sanity at {}: give its path with --csi-sanity PATH (kubernetes-csi/csi-test's cmd/csi-sanity)",
        path.display()
    );
    Ok(path)
}

pub fn conformance(args: &[String]) -> anyhow::Result<()> {
    let sanity = sanity_path(args)?;
    let mut build = cargo();
    build.args(["build", "--package", "hostpath-plugin", "--package", "berth"]);
    run(build)?;
    let plugin = root().join("target/debug/hostpath-plugin");
    let base = root().join("target/conformance");
    let _ = std::fs::remove_dir_all(&base);
    let mut rows = Vec::new();
    for (i, shape) in SHAPES.iter().enumerate() {
        let dir = base.join(format!("s{i}"));
        std::fs::create_dir_all(&dir)?;
        println!("xtask: csi-sanity, {}", shape.name);
        let outcome = run_shape(&sanity, &plugin, shape.flags, shape.split, &dir);
        let left = left_behind(&dir);
        rows.push((shape.name, outcome, left));
    }
    println!(
        "\n{:<28} {:>6} {:>6} {:>7}  left behind",
        "shape", "passed", "failed", "skipped"
    );
    let mut bad = false;
    for (name, outcome, left) in &rows {
        match outcome {
            Ok(t) => {
                println!(
                    "{name:<28} {:>6} {:>6} {:>7}  {}",
                    t.passed,
                    t.failed,
                    t.skipped,
                    if left.is_empty() {
                        "nothing".to_string()
                    } else {
                        left.join(", ")
                    }
                );
                for f in &t.failures {
                    println!("    failed: {f}");
                }
                bad |= t.failed > 0 || !left.is_empty();
            }
            Err(e) => {
                println!("{name:<28} did not run: {e:#}");
                bad = true;
            }
        }
    }
    ensure!(
        !bad,
        "the sample plugin does not pass csi-sanity in every shape (logs in {})",
        base.display()
    );
    println!("xtask: csi-sanity passes in every shape, nothing left behind");
    crate::conformance_compare::compare(&sanity, &plugin, &base)
}

/// csi-sanity against one sample plugin process started with `flags`.
/// With `faulty`, a fault flag among them, what csi-sanity could not undo
/// after the case the fault broke is removed; without, it is an error.
pub(crate) fn run_one(
    sanity: &Path,
    plugin: &Path,
    flags: &[&str],
    dir: &Path,
    faulty: bool,
) -> anyhow::Result<Tally> {
    let tally = run_shape(sanity, plugin, flags, false, dir)?;
    let left = left_behind(dir);
    ensure!(
        faulty || left.is_empty(),
        "csi-sanity left {left:?} in {}",
        dir.display()
    );
    Ok(tally)
}

/// Kills and reaps a plugin process when dropped.
pub(crate) struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(crate) fn start_plugin(
    plugin: &Path,
    dir: &Path,
    socket: &Path,
    flags: &[&str],
    mode: &str,
) -> anyhow::Result<Process> {
    let log = std::fs::File::create(dir.join(format!("plugin-{mode}.log")))?;
    let child = Command::new(plugin)
        .arg("--endpoint")
        .arg(socket)
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(["--mode", mode])
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

fn run_shape(sanity: &Path, plugin: &Path, flags: &[&str], split: bool, dir: &Path) -> anyhow::Result<Tally> {
    let node_socket = dir.join("node.sock");
    let mut processes = Vec::new();
    let mut cmd = Command::new(sanity);
    if split {
        let controller_socket = dir.join("controller.sock");
        processes.push(start_plugin(
            plugin,
            dir,
            &controller_socket,
            flags,
            "controller",
        )?);
        processes.push(start_plugin(plugin, dir, &node_socket, flags, "node")?);
        cmd.arg(format!(
            "--csi.controllerendpoint=unix://{}",
            controller_socket.display()
        ));
    } else {
        processes.push(start_plugin(plugin, dir, &node_socket, flags, "all")?);
    }
    let work = dir.join("sanity");
    std::fs::create_dir_all(&work)?;
    let out = cmd
        .arg(format!("--csi.endpoint=unix://{}", node_socket.display()))
        .arg(format!("--csi.mountdir={}", work.join("target").display()))
        .arg(format!("--csi.stagingdir={}", work.join("staging").display()))
        .args(["--ginkgo.no-color", "--ginkgo.timeout=10m"])
        .stdin(Stdio::null())
        .output()
        .context("running csi-sanity")?;
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    std::fs::write(dir.join("csi-sanity.log"), &text)?;
    drop(processes);
    tally(&text).with_context(|| {
        format!(
            "csi-sanity printed no tally (see {})",
            dir.join("csi-sanity.log").display()
        )
    })
}

/// `SUCCESS! -- 93 Passed | 0 Failed | 1 Pending | 2 Skipped`, and the
/// `[FAIL] …` lines of its summary.
fn tally(text: &str) -> Option<Tally> {
    let line = text
        .lines()
        .find(|l| l.contains(" Passed | ") && l.contains(" Failed | "))?;
    let number = |label: &str| -> Option<u32> {
        line.split('|')
            .find(|part| part.trim_end().ends_with(label))
            .and_then(|part| part.split_whitespace().rev().nth(1))
            .and_then(|n| n.parse().ok())
    };
    Some(Tally {
        passed: number("Passed")?,
        failed: number("Failed")?,
        skipped: number("Skipped").unwrap_or(0),
        failures: text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("[FAIL] "))
            .map(str::to_string)
            .collect(),
    })
}

/// What a run left: mounts below `dir` (unmounted here, so that nothing
/// outlives the run), and volumes or snapshots on the plugin.
fn left_behind(dir: &Path) -> Vec<String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tally_reads_as_csi_sanity_prints_it() {
        let t = tally("x\nSUCCESS! -- 93 Passed | 0 Failed | 1 Pending | 2 Skipped\n").unwrap();
        assert_eq!((t.passed, t.failed, t.skipped), (93, 0, 2));
        let t = tally(
            "  [FAIL] Node Service [It] should fail\nFAIL! -- 90 Passed | 3 Failed | 1 Pending | 2 Skipped",
        )
        .unwrap();
        assert_eq!((t.passed, t.failed), (90, 3));
        assert_eq!(t.failures, ["Node Service [It] should fail"]);
        assert!(tally("nothing").is_none());
    }
}
