//! `berth plugin check` judged against csi-sanity: for every rule both
//! judge, the two verdicts must agree, on the sample plugin as it is and on
//! the sample plugin with a fault flag that breaks that one rule. Prints
//! the table (rule, fault, csi-sanity's verdict, the check's) and fails on
//! any disagreement.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, ensure};

use crate::conformance::{Tally, run_one};
use crate::root;

/// A rule both judge: csi-sanity's case (its group and its words) and the
/// check's case (its name), and the sample plugin's flag that breaks it.
struct Pair {
    rule: &'static str,
    sanity: (&'static str, &'static str),
    check: &'static str,
    fault: &'static str,
    /// Other cases of the check that hold the same rule in another
    /// situation, and so fail with the fault too.
    also: &'static [&'static str],
}

const PAIRS: &[Pair] = &[
    Pair {
        rule: "DeleteVolume of a volume that does not exist succeeds",
        sanity: ("DeleteVolume", "should succeed when an invalid volume id is used"),
        check: "DeleteVolume, unknown volume",
        fault: "not-found-on-delete",
        also: &["DeleteVolume twice"],
    },
    Pair {
        rule: "a known name with another size is ALREADY_EXISTS",
        sanity: ("CreateVolume", "already existing name and different capacity"),
        check: "CreateVolume, same name, larger size",
        fault: "ignores-size-conflict",
        also: &[],
    },
    Pair {
        rule: "ControllerModifyVolume of a volume that does not exist is NOT_FOUND",
        sanity: ("ModifyVolume", "should fail if volume does not exist"),
        check: "ControllerModifyVolume, unknown volume",
        fault: "internal-for-not-found",
        also: &["ControllerPublishVolume, unknown volume"],
    },
    Pair {
        rule: "a SINGLE_NODE_SINGLE_WRITER volume is not published at a second target",
        sanity: (
            "NodePublishVolume",
            "single node single writer access mode is already mounted",
        ),
        check: "NodePublishVolume, single writer at a second target",
        fault: "second-writer",
        also: &[],
    },
    Pair {
        rule: "ControllerPublishVolume to a node that does not exist is NOT_FOUND",
        sanity: (
            "ControllerPublishVolume",
            "should fail when the node does not exist",
        ),
        check: "ControllerPublishVolume, unknown node",
        fault: "accepts-unknown-node",
        also: &[],
    },
    Pair {
        rule: "NodeStageVolume without volume_capability is INVALID_ARGUMENT",
        sanity: (
            "NodeStageVolume",
            "should fail when no volume capability is provided",
        ),
        check: "NodeStageVolume missing a field",
        fault: "stages-without-capability",
        also: &[],
    },
    Pair {
        rule: "NodeGetVolumeStats of a volume that does not exist is NOT_FOUND",
        sanity: ("NodeGetVolumeStats", "should fail when volume is not found"),
        check: "NodeGetVolumeStats, unknown volume",
        fault: "stats-for-unknown-volume",
        also: &[],
    },
    Pair {
        rule: "NodeUnpublishVolume removes the target path",
        sanity: ("NodeUnpublishVolume", "should remove target path"),
        check: "NodeUnpublishVolume",
        fault: "keeps-target-path",
        also: &[],
    },
    Pair {
        rule: "ValidateVolumeCapabilities of a volume that does not exist is NOT_FOUND",
        sanity: (
            "ValidateVolumeCapabilities",
            "should fail when the requested volume does not exist",
        ),
        check: "ValidateVolumeCapabilities, unknown volume",
        fault: "confirms-unknown-volume",
        also: &[],
    },
];

/// A verdict as the table shows it.
fn word(failed: bool) -> &'static str {
    if failed { "fails" } else { "passes" }
}

/// Whether csi-sanity failed the case `(group, words)`.
fn sanity_failed(t: &Tally, (group, words): (&str, &str)) -> bool {
    t.failures.iter().any(|f| f.contains(group) && f.contains(words))
}

/// The check's verdict on `case`, from its JSON report: failed or not;
/// an error when the case is not in the report or was skipped.
fn check_failed(report: &serde_json::Value, case: &str) -> anyhow::Result<bool> {
    let found = report["cases"]
        .as_array()
        .into_iter()
        .flatten()
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

/// The names of the cases the check failed.
fn failed_cases(report: &serde_json::Value) -> impl Iterator<Item = &str> {
    report["cases"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["verdict"] == "failed")
        .filter_map(|c| c["name"].as_str())
}

/// `berth plugin check` against a sample plugin started with `flags`.
fn check(plugin: &Path, dir: &Path, flags: &[&str]) -> anyhow::Result<serde_json::Value> {
    std::fs::create_dir_all(dir)?;
    let socket = dir.join("check.sock");
    let _process = crate::conformance::start_plugin(plugin, dir, &socket, flags, "all")?;
    let work = dir.join("check-work");
    std::fs::create_dir_all(&work)?;
    let out = Command::new(root().join("target/debug/berth"))
        .args(["plugin", "check"])
        .arg(format!("unix://{}", socket.display()))
        .arg("--work-dir")
        .arg(&work)
        .args(["--mutable-parameter", "tier=gold", "--output", "json"])
        .stdin(Stdio::null())
        .output()
        .context("running berth plugin check")?;
    serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "plugin check printed no report: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

pub fn compare(sanity: &Path, plugin: &Path, base: &Path) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    let mut faults: Vec<Option<&str>> = vec![None];
    faults.extend(PAIRS.iter().map(|p| Some(p.fault)));
    for (i, fault) in faults.iter().enumerate() {
        let flags: Vec<&str> = fault.map_or_else(Vec::new, |f| vec!["--misbehave", f]);
        let dir = base.join(format!("compare-{i}"));
        std::fs::create_dir_all(&dir)?;
        let tally = run_one(sanity, plugin, &flags, &dir, fault.is_some())?;
        let report = check(plugin, &dir, &flags)?;
        for pair in PAIRS
            .iter()
            .filter(|p| fault.is_none() || *fault == Some(p.fault))
        {
            let by_sanity = sanity_failed(&tally, pair.sanity);
            let by_check = check_failed(&report, pair.check)?;
            rows.push((pair.rule, fault.unwrap_or("none"), by_sanity, by_check));
        }
        // A fault breaks its one rule: any other case the check fails
        // would make the pair's agreement a coincidence.
        if let Some(fault) = fault {
            let pair = PAIRS
                .iter()
                .find(|p| p.fault == *fault)
                .expect("a fault of PAIRS");
            let others = failed_cases(&report)
                .filter(|name| *name != pair.check && *name != "clean-up" && !pair.also.contains(name))
                .map(str::to_string)
                .collect::<Vec<_>>();
            ensure!(
                others.is_empty(),
                "--misbehave {fault} also fails the check's {others:?}: it breaks more than one rule"
            );
        }
    }
    println!(
        "\n{:<72} {:<26} {:<10} {:<10}",
        "rule", "fault", "csi-sanity", "check"
    );
    let mut disagree = 0;
    for (rule, fault, s, c) in &rows {
        let mark = if s == c { "" } else { "  DISAGREE" };
        println!("{rule:<72} {fault:<26} {:<10} {:<10}{mark}", word(*s), word(*c));
        disagree += usize::from(s != c);
    }
    // Each fault must be caught, or the comparison proves nothing.
    let missed: Vec<&str> = rows
        .iter()
        .filter(|(_, fault, s, _)| *fault != "none" && !s)
        .map(|(rule, ..)| *rule)
        .collect();
    ensure!(
        disagree == 0,
        "plugin check and csi-sanity disagree on {disagree} verdicts"
    );
    ensure!(
        missed.is_empty(),
        "a fault flag broke no rule csi-sanity sees: {missed:?}"
    );
    println!("xtask: plugin check agrees with csi-sanity on every rule both judge");
    Ok(())
}
