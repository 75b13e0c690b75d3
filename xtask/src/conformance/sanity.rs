//! csi-sanity (kubernetes-csi/csi-test), when one is given: the sample
//! plugin in every shape must pass it with no failure and leave nothing
//! mounted or on the plugin.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, ensure};

use super::plugin::{self, SHAPES, Split};

/// csi-sanity's tally of one run.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub passed: u32,
    pub failed: u32,
    pub skipped: u32,
    /// The names of the failed cases.
    pub failures: Vec<String>,
}

/// Every shape through csi-sanity: 0 failures, nothing left behind.
pub(crate) fn shapes(sanity: &Path, plugin: &Path, base: &Path) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    for (i, shape) in SHAPES.iter().enumerate() {
        let dir = base.join(format!("sanity-s{i}"));
        std::fs::create_dir_all(&dir)?;
        println!("xtask: csi-sanity, {}", shape.name);
        let outcome = run_shape(sanity, plugin, shape.flags, shape.split, &dir);
        let left = plugin::left_behind(&dir);
        rows.push((shape.name, outcome, left));
    }
    println!(
        "\n{:<34} {:>6} {:>6} {:>7}  left behind",
        "shape (csi-sanity)", "passed", "failed", "skipped"
    );
    let mut bad = false;
    for (name, outcome, left) in &rows {
        match outcome {
            Ok(t) => {
                let left_text = if left.is_empty() {
                    "nothing".to_string()
                } else {
                    left.join(", ")
                };
                println!(
                    "{name:<34} {:>6} {:>6} {:>7}  {left_text}",
                    t.passed, t.failed, t.skipped
                );
                for f in &t.failures {
                    println!("    failed: {f}");
                }
                bad |= t.failed > 0 || !left.is_empty();
            }
            Err(e) => {
                println!("{name:<34} did not run: {e:#}");
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
    Ok(())
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
    let tally = run_shape(sanity, plugin, flags, Split::None, dir)?;
    let left = plugin::left_behind(dir);
    ensure!(
        faulty || left.is_empty(),
        "csi-sanity left {left:?} in {}",
        dir.display()
    );
    Ok(tally)
}

fn run_shape(
    sanity: &Path,
    plugin: &Path,
    flags: &[&str],
    split: Split,
    dir: &Path,
) -> anyhow::Result<Tally> {
    let started = plugin::start_shape(plugin, dir, flags, split)?;
    let mut cmd = Command::new(sanity);
    let node = match &started.node {
        Some(node) => {
            cmd.arg(format!(
                "--csi.controllerendpoint=unix://{}",
                started.controller.display()
            ));
            node
        }
        None => &started.controller,
    };
    let work = dir.join("sanity");
    std::fs::create_dir_all(&work)?;
    let out = cmd
        .arg(format!("--csi.endpoint=unix://{}", node.display()))
        .arg(format!("--csi.mountdir={}", work.join("target").display()))
        .arg(format!("--csi.stagingdir={}", work.join("staging").display()))
        .args(["--ginkgo.no-color", "--ginkgo.timeout=10m"])
        .stdin(Stdio::null())
        .output()
        .context("running csi-sanity")?;
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    std::fs::write(dir.join("csi-sanity.log"), &text)?;
    drop(started);
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
