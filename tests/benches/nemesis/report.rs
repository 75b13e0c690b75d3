//! What a run prints: its timeline as it goes, then the summary (requests,
//! faults, each fault kind's longest gap and recovery) and every violation
//! with the timeline around it.

use std::time::Instant;

use crate::faults::Fault;
use crate::workload;
use berth_tests::nemesis::check;

/// What happened when: milliseconds since the run started.
pub struct Timeline {
    pub started: Instant,
    pub started_epoch_ms: u64,
    pub events: Vec<(u64, String)>,
}

impl Timeline {
    pub fn note(&mut self, what: String) {
        let ms = self.started.elapsed().as_millis() as u64;
        println!("{:>8.1}s  {what}", ms as f64 / 1000.0);
        self.events.push((ms, what));
    }

    fn around(&self, at_epoch_ms: u64) -> Vec<&(u64, String)> {
        let at = at_epoch_ms.saturating_sub(self.started_epoch_ms);
        self.events
            .iter()
            .filter(|(ms, _)| ms.abs_diff(at) <= 15_000)
            .collect()
    }
}

/// Per fault: the longest time without an acknowledged request while it
/// lasted, and the recovery, from the heal to the first request
/// acknowledged after it.
fn recoveries(history: &[workload::Record], heals: &[(Fault, u64, u64)]) -> Vec<(Fault, Vec<(u64, u64)>)> {
    let mut acks: Vec<u64> = history
        .iter()
        .filter(|r| r.outcome == workload::Outcome::Ok)
        .map(|r| r.completed)
        .collect();
    acks.sort_unstable();
    let mut by: std::collections::BTreeMap<Fault, Vec<(u64, u64)>> = Default::default();
    for (fault, began, healed) in heals {
        let Some(first) = acks.iter().find(|t| **t >= *healed) else {
            continue;
        };
        let mut gap = 0;
        let mut last = *began;
        for t in acks.iter().filter(|t| **t > *began && **t <= *healed) {
            gap = gap.max(t - last);
            last = *t;
        }
        gap = gap.max(healed - last);
        by.entry(*fault).or_default().push((gap, first - healed));
    }
    by.into_iter().collect()
}

pub fn report(
    history: &[workload::Record],
    heals: &[(Fault, u64, u64)],
    held: usize,
    uncertain: usize,
    journal: &[serde_json::Value],
    violations: &[check::Violation],
    tl: &Timeline,
) {
    let count = |o: fn(&workload::Outcome) -> bool| history.iter().filter(|r| o(&r.outcome)).count();
    println!("\nnemesis summary");
    println!(
        "  operations: {} ({} acknowledged, {} refused, {} uncertain)",
        history.len(),
        count(|o| *o == workload::Outcome::Ok),
        count(|o| matches!(o, workload::Outcome::Refused(_))),
        count(|o| *o == workload::Outcome::Unknown),
    );
    let mut refused: std::collections::BTreeMap<String, usize> = Default::default();
    for r in history {
        if let workload::Outcome::Refused(code) = r.outcome {
            let op = format!("{:?}", r.op);
            let op = op.split([' ', '{']).next().unwrap_or_default().to_string();
            *refused.entry(format!("{op} {code:?}")).or_default() += 1;
        }
    }
    println!("  refused: {refused:?}");
    println!("  volumes held to their acknowledged state: {held} ({uncertain} with an uncertain answer)");
    println!("  plugin calls journaled: {}", journal.len());
    println!("  faults: {}", heals.len());
    println!(
        "  {:<24} {:>6} {:>14} {:>14} {:>14}",
        "fault", "count", "max gap ms", "recovery p50", "recovery max"
    );
    for (fault, times) in recoveries(history, heals) {
        let gap = times.iter().map(|t| t.0).max().unwrap_or_default();
        let mut recovery: Vec<u64> = times.iter().map(|t| t.1).collect();
        recovery.sort_unstable();
        println!(
            "  {:<24} {:>6} {:>14} {:>14} {:>14}",
            format!("{fault:?}"),
            times.len(),
            gap,
            recovery[recovery.len() / 2],
            recovery.last().copied().unwrap_or_default()
        );
    }
    println!("  violations: {}", violations.len());
    for v in violations {
        println!("\nVIOLATION: {}\n  {}", v.rule, v.what);
        if let Some(at) = v.at_ms {
            println!("  timeline around it:");
            for (ms, what) in tl.around(at) {
                println!("    {:>8.1}s  {what}", *ms as f64 / 1000.0);
            }
        }
    }
}
