//! `berth plugin check` judged against csi-sanity, when one is given: for
//! every rule both judge, the two verdicts must agree, on the sample plugin
//! as it is and with a fault flag that breaks that one rule. Prints the
//! table (rule, fault, csi-sanity's verdict, the check's) and fails on any
//! disagreement.

use std::path::Path;

use anyhow::ensure;

use super::check::{self, FAULTS};
use super::plugin::Split;
use super::sanity::{Tally, run_one};

/// A rule both judge: csi-sanity's case (its group and its words), the
/// sample plugin's flag that breaks it (one of [`FAULTS`]), and the check's
/// case that stands for it there.
struct Pair {
    sanity: (&'static str, &'static str),
    check: &'static str,
    fault: &'static str,
}

const PAIRS: &[Pair] = &[
    Pair {
        sanity: ("DeleteVolume", "should succeed when an invalid volume id is used"),
        check: "DeleteVolume, unknown volume",
        fault: "not-found-on-delete",
    },
    Pair {
        sanity: ("CreateVolume", "already existing name and different capacity"),
        check: "CreateVolume, same name, larger size",
        fault: "ignores-size-conflict",
    },
    Pair {
        sanity: ("ModifyVolume", "should fail if volume does not exist"),
        check: "ControllerModifyVolume, unknown volume",
        fault: "internal-for-not-found",
    },
    Pair {
        sanity: (
            "NodePublishVolume",
            "single node single writer access mode is already mounted",
        ),
        check: "NodePublishVolume, single writer at a second target",
        fault: "second-writer",
    },
    Pair {
        sanity: (
            "ControllerPublishVolume",
            "should fail when the node does not exist",
        ),
        check: "ControllerPublishVolume, unknown node",
        fault: "accepts-unknown-node",
    },
    Pair {
        sanity: (
            "NodeStageVolume",
            "should fail when no volume capability is provided",
        ),
        check: "NodeStageVolume missing a field",
        fault: "stages-without-capability",
    },
    Pair {
        sanity: ("NodeGetVolumeStats", "should fail when volume is not found"),
        check: "NodeGetVolumeStats, unknown volume",
        fault: "stats-for-unknown-volume",
    },
    Pair {
        sanity: ("NodeUnpublishVolume", "should remove target path"),
        check: "NodeUnpublishVolume",
        fault: "keeps-target-path",
    },
    Pair {
        sanity: (
            "ValidateVolumeCapabilities",
            "should fail when the requested volume does not exist",
        ),
        check: "ValidateVolumeCapabilities, unknown volume",
        fault: "confirms-unknown-volume",
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

/// The rule a fault flag breaks, as [`FAULTS`] words it.
fn rule(fault: &str) -> &'static str {
    FAULTS.iter().find(|f| f.flag == fault).map_or("", |f| f.rule)
}

/// csi-sanity and the check on the clean plugin and with each fault of
/// [`PAIRS`]: the two verdicts on each rule must agree. That the check
/// fails exactly the fault's cases and no more is [`check::faults`]' part.
pub fn compare(sanity: &Path, plugin: &Path, base: &Path) -> anyhow::Result<()> {
    let mut rows = Vec::new();
    let mut faults: Vec<Option<&str>> = vec![None];
    faults.extend(PAIRS.iter().map(|p| Some(p.fault)));
    for (i, fault) in faults.iter().enumerate() {
        let flags: Vec<&str> = fault.map_or_else(Vec::new, |f| vec!["--misbehave", f]);
        let dir = base.join(format!("compare-{i}"));
        std::fs::create_dir_all(&dir)?;
        let tally = run_one(sanity, plugin, &flags, &dir, fault.is_some())?;
        let report = check::check(plugin, &dir.join("check"), &flags, Split::None)?;
        let _ = super::plugin::left_behind(&dir.join("check"));
        for pair in PAIRS
            .iter()
            .filter(|p| fault.is_none() || *fault == Some(p.fault))
        {
            let by_sanity = sanity_failed(&tally, pair.sanity);
            let by_check = report.failed(pair.check)?;
            rows.push((rule(pair.fault), fault.unwrap_or("none"), by_sanity, by_check));
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
