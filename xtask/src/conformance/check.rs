//! `berth plugin check` against the sample plugin: every shape passes every
//! case it does not skip and leaves nothing behind; the two spellings of the
//! split give the same verdicts; and each fault flag fails exactly the cases
//! of the rule it breaks.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, ensure};

use super::plugin::{self, SHAPES, Split};
use crate::root;

/// A fault flag (`--misbehave`), the rule it breaks, and the check's cases
/// that must fail with it, no more and no fewer.
pub(crate) struct Fault {
    pub flag: &'static str,
    pub rule: &'static str,
    pub cases: &'static [&'static str],
}

pub(crate) const FAULTS: &[Fault] = &[
    Fault {
        flag: "empty-name",
        rule: "GetPluginInfo names the driver",
        cases: &["plugin identity"],
    },
    Fault {
        flag: "bad-name",
        rule: "the driver's name is in domain-name form",
        cases: &["plugin identity"],
    },
    Fault {
        flag: "empty-version",
        rule: "GetPluginInfo gives a vendor_version",
        cases: &["plugin identity"],
    },
    Fault {
        flag: "empty-node-id",
        rule: "NodeGetInfo gives a node_id",
        cases: &["plugin identity"],
    },
    Fault {
        flag: "negative-max-volumes",
        rule: "max_volumes_per_node is not negative",
        cases: &["plugin identity"],
    },
    Fault {
        flag: "not-found-on-delete",
        rule: "DeleteVolume of a volume that does not exist succeeds",
        cases: &["DeleteVolume twice", "DeleteVolume, unknown volume"],
    },
    Fault {
        flag: "ignores-size-conflict",
        rule: "a known name with another size is ALREADY_EXISTS",
        cases: &["CreateVolume, same name, larger size"],
    },
    Fault {
        flag: "accepts-missing-name",
        rule: "CreateVolume without a name is INVALID_ARGUMENT",
        cases: &["CreateVolume without name"],
    },
    Fault {
        flag: "second-writer",
        rule: "a SINGLE_NODE_SINGLE_WRITER volume is not published at a second target",
        cases: &["NodePublishVolume, single writer at a second target"],
    },
    Fault {
        flag: "internal-for-not-found",
        rule: "ControllerPublishVolume and ControllerModifyVolume of an unknown volume are NOT_FOUND",
        cases: &[
            "ControllerModifyVolume, unknown volume",
            "ControllerPublishVolume, unknown volume",
        ],
    },
    Fault {
        flag: "accepts-unknown-node",
        rule: "ControllerPublishVolume to a node that does not exist is NOT_FOUND",
        cases: &["ControllerPublishVolume, unknown node"],
    },
    Fault {
        flag: "stages-without-capability",
        rule: "NodeStageVolume without volume_capability is INVALID_ARGUMENT",
        cases: &["NodeStageVolume missing a field"],
    },
    Fault {
        flag: "stats-for-unknown-volume",
        rule: "NodeGetVolumeStats of a volume that does not exist is NOT_FOUND",
        cases: &["NodeGetVolumeStats, unknown volume"],
    },
    Fault {
        flag: "keeps-target-path",
        rule: "NodeUnpublishVolume removes the target path",
        cases: &["NodeUnpublishVolume"],
    },
    Fault {
        flag: "confirms-unknown-volume",
        rule: "ValidateVolumeCapabilities of a volume that does not exist is NOT_FOUND",
        cases: &["ValidateVolumeCapabilities, unknown volume"],
    },
];

/// The check's report: one verdict per case.
pub(crate) struct Report(serde_json::Value);

impl Report {
    fn cases(&self) -> impl Iterator<Item = &serde_json::Value> {
        self.0["cases"].as_array().into_iter().flatten()
    }

    /// The names of the cases with `verdict` (`failed`, `skipped`, …).
    pub fn with(&self, verdict: &str) -> Vec<String> {
        self.cases()
            .filter(|c| c["verdict"] == verdict)
            .filter_map(|c| c["name"].as_str().map(String::from))
            .collect()
    }

    /// The verdict on `case`: failed or not; an error when the case is not
    /// in the report or was skipped.
    pub fn failed(&self, case: &str) -> anyhow::Result<bool> {
        let found = self
            .cases()
            .find(|c| c["name"] == case)
            .with_context(|| format!("plugin check has no case {case:?}"))?;
        let verdict = found["verdict"].as_str().unwrap_or_default();
        ensure!(
            verdict != "skipped",
            "plugin check skipped {case:?}: {}",
            found["reason"]
        );
        Ok(verdict == "failed")
    }

    /// (case, verdict) in the order the check ran them.
    fn verdicts(&self) -> Vec<(String, String)> {
        self.cases()
            .map(|c| {
                (
                    c["name"].as_str().unwrap_or_default().to_string(),
                    c["verdict"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }

    fn count(&self, key: &str) -> u64 {
        self.0[key].as_u64().unwrap_or(0)
    }
}

/// `berth plugin check` against the sample plugin started in `dir` with
/// `flags`, split as `split`.
pub(crate) fn check(plugin: &Path, dir: &Path, flags: &[&str], split: Split) -> anyhow::Result<Report> {
    std::fs::create_dir_all(dir)?;
    let started = plugin::start_shape(plugin, dir, flags, split)?;
    let work = dir.join("check-work");
    std::fs::create_dir_all(&work)?;
    let mut cmd = Command::new(root().join("target/debug/berth"));
    cmd.args(["plugin", "check"])
        .arg(format!("unix://{}", started.controller.display()));
    if let Some(node) = &started.node {
        cmd.arg("--node-endpoint")
            .arg(format!("unix://{}", node.display()));
    }
    let out = cmd
        .arg("--work-dir")
        .arg(&work)
        .args(["--mutable-parameter", "tier=gold", "--output", "json"])
        .stdin(Stdio::null())
        .output()
        .context("running berth plugin check")?;
    std::fs::write(dir.join("check.json"), &out.stdout)?;
    drop(started);
    let report = serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "plugin check printed no report: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    Ok(Report(report))
}

/// Every shape with no fault: no case failed, nothing left behind, and the
/// two spellings of the split agree case by case.
pub(crate) fn shapes(plugin: &Path, base: &Path) -> anyhow::Result<()> {
    println!(
        "\n{:<34} {:>6} {:>6} {:>7} {:>8}  left behind",
        "shape (berth plugin check)", "passed", "failed", "skipped", "warnings"
    );
    let mut bad = Vec::new();
    let mut split_verdicts = Vec::new();
    for (i, shape) in SHAPES.iter().enumerate() {
        let dir = base.join(format!("check-s{i}"));
        let report = match check(plugin, &dir, shape.flags, shape.split) {
            Ok(r) => r,
            Err(e) => {
                println!("{:<34} did not run: {e:#}", shape.name);
                bad.push(shape.name);
                continue;
            }
        };
        let left = plugin::left_behind(&dir);
        println!(
            "{:<34} {:>6} {:>6} {:>7} {:>8}  {}",
            shape.name,
            report.count("passed"),
            report.count("failed"),
            report.count("skipped"),
            report.count("warnings"),
            if left.is_empty() {
                "nothing".to_string()
            } else {
                left.join(", ")
            }
        );
        let failed = report.with("failed");
        for f in &failed {
            println!("    failed: {f}");
        }
        if !failed.is_empty() || !left.is_empty() {
            bad.push(shape.name);
        }
        if shape.split != Split::None && shape.flags.is_empty() {
            split_verdicts.push((shape.name, report.verdicts()));
        }
    }
    ensure!(
        bad.is_empty(),
        "plugin check fails the sample plugin as {bad:?} (reports in {})",
        base.display()
    );
    if let [(a, first), (b, second)] = &split_verdicts[..] {
        let differ: Vec<_> = first.iter().filter(|v| !second.contains(v)).collect();
        ensure!(
            first == second,
            "the split spelled {a:?} and {b:?} differ: {differ:?}"
        );
        println!("xtask: the split spelled both ways gets the same verdict in every case");
    }
    println!("xtask: plugin check passes the sample plugin in every shape, nothing left behind");
    Ok(())
}

/// Each fault flag fails exactly the cases of its rule.
pub(crate) fn faults(plugin: &Path, base: &Path) -> anyhow::Result<()> {
    println!("\n{:<26} {:<86} caught by", "fault", "rule");
    let mut bad = Vec::new();
    for (i, fault) in FAULTS.iter().enumerate() {
        let dir = base.join(format!("check-f{i}"));
        let report = check(plugin, &dir, &["--misbehave", fault.flag], Split::None)?;
        // A fault may leave what its broken rule keeps the check from
        // undoing; it goes with the run.
        let _ = plugin::left_behind(&dir);
        let mut failed = report.with("failed");
        failed.retain(|c| c != "clean-up");
        let caught = fault.cases.iter().all(|c| failed.iter().any(|f| f == c));
        let others: Vec<&String> = failed
            .iter()
            .filter(|f| !fault.cases.contains(&f.as_str()))
            .collect();
        let verdict = match (caught, others.is_empty()) {
            (true, true) => fault.cases.join("; "),
            (false, _) => format!("NOT CAUGHT (failed: {failed:?})"),
            (true, false) => format!("ALSO FAILS {others:?}"),
        };
        println!("{:<26} {:<86} {verdict}", fault.flag, fault.rule);
        if !(caught && others.is_empty()) {
            bad.push(fault.flag);
        }
    }
    ensure!(
        bad.is_empty(),
        "plugin check does not catch exactly the rule each of {bad:?} breaks (reports in {})",
        base.display()
    );
    println!("xtask: plugin check catches every fault flag's rule, and only it");
    Ok(())
}
