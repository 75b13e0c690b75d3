//! Shadow modules: a candidate that decides beside the live module on every
//! live decision, after the live answer and off its path (a bounded queue;
//! what a busy queue drops is counted), its answer compared and never used.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use tokio::sync::mpsc;

use crate::logged::{Answer, Compared, Difference, Logged, compare};
use crate::{Decision, PolicyEngine, PolicyModule};

/// Live decisions waiting for their shadow; past this, shadowing drops them.
const QUEUE: usize = 1024;
/// Differences kept for `berth policy diff`, newest last.
pub const DIFFS_KEPT: usize = 100;

/// How a shadow decision came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ShadowOutcome {
    Same,
    Different,
    Failed,
    Dropped,
}

impl ShadowOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            ShadowOutcome::Same => "same",
            ShadowOutcome::Different => "different",
            ShadowOutcome::Failed => "failed",
            ShadowOutcome::Dropped => "dropped",
        }
    }
}

/// One live decision the shadow answered otherwise (or failed on).
#[derive(Clone, Debug, Serialize)]
pub struct ShadowDiff {
    pub shadow: String,
    pub shadow_digest: String,
    /// The live decision: its input, answer, module and digest.
    pub live: Logged,
    pub shadow_answer: Answer,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub difference: Option<Difference>,
}

/// How long a budget's unspent share is saved up for.
const BURST: std::time::Duration = std::time::Duration::from_secs(1);

/// CPU time a worker may still spend: earned at `share` of the wall clock,
/// spent by the CPU time each decision took.
struct Budget {
    share: f64,
    left: f64,
    at: std::time::Instant,
}

impl Budget {
    fn new(share: f64) -> Budget {
        Budget {
            share,
            left: share * BURST.as_secs_f64(),
            at: std::time::Instant::now(),
        }
    }

    /// How long to wait before the next decision may start.
    fn wait(&mut self) -> Option<std::time::Duration> {
        let now = std::time::Instant::now();
        let earned = now.duration_since(self.at).as_secs_f64() * self.share;
        self.left = (self.left + earned).min(self.share * BURST.as_secs_f64());
        self.at = now;
        (self.left < 0.0).then(|| std::time::Duration::from_secs_f64(-self.left / self.share))
    }

    fn spend(&mut self, cpu: std::time::Duration) {
        self.left -= cpu.as_secs_f64();
    }
}

/// How much of the machine was idle lately, from `/proc/stat`: a shadow
/// decision starts only in the time live work leaves (all processes', the
/// plugins' included). Deciding when to start, not preempting a decision
/// under way, keeps clear of what a low-priority thread did (held the
/// instance pool's locks while preempted).
struct IdleGate {
    last: Option<(u64, u64)>,
    at: std::time::Instant,
    idle_cores: f64,
    cores: f64,
}

/// A quarter of a core idle: enough that a shadow decision takes nothing
/// live work was about to use.
const IDLE_NEEDED: f64 = 0.25;
const IDLE_SAMPLE: std::time::Duration = std::time::Duration::from_millis(100);

impl IdleGate {
    fn new() -> IdleGate {
        IdleGate {
            last: machine_times(),
            at: std::time::Instant::now(),
            idle_cores: f64::MAX,
            cores: std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64),
        }
    }

    /// Whether the machine has been idle enough over the last sample.
    fn open(&mut self) -> bool {
        if self.at.elapsed() >= IDLE_SAMPLE {
            let now = machine_times();
            if let (Some(then), Some(now)) = (self.last, now) {
                self.idle_cores = idle_cores(then, now, self.cores);
            }
            self.last = now;
            self.at = std::time::Instant::now();
        }
        self.idle_cores >= IDLE_NEEDED
    }
}

/// Cores' worth of idle time between two readings of (idle, total) ticks.
fn idle_cores((idle0, total0): (u64, u64), (idle1, total1): (u64, u64), cores: f64) -> f64 {
    let total = total1.saturating_sub(total0).max(1) as f64;
    idle1.saturating_sub(idle0) as f64 / total * cores
}

/// The machine's idle and total CPU time (clock ticks), when `/proc/stat` says.
fn machine_times() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let ticks: Vec<u64> = line.split_whitespace().filter_map(|t| t.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal: idle and iowait are free time.
    let idle = ticks.get(3)? + ticks.get(4).copied().unwrap_or(0);
    Some((idle, ticks.iter().take(8).sum()))
}

async fn work(engine: Arc<PolicyEngine>, mut rx: mpsc::Receiver<(Arc<PolicyModule>, Logged)>, s: Arc<State>) {
    let mut budget = engine.options().shadow_share.map(Budget::new);
    let mut gate = budget.as_ref().map(|_| IdleGate::new());
    // Everything the worker does is held to the budget, not only the module's run.
    let mut cpu = thread_cpu();
    while let Some((module, live)) = rx.recv().await {
        if let Some(b) = budget.as_mut() {
            let now = thread_cpu();
            b.spend(now.saturating_sub(cpu));
            cpu = now;
        }
        if let Some(pause) = budget.as_mut().and_then(Budget::wait) {
            // Over budget: the queue fills meanwhile, and what overflows is dropped.
            tokio::time::sleep(pause).await;
        }
        if let Some(g) = gate.as_mut() {
            while !g.open() {
                // No idle time: live work has the machine.
                let next = IDLE_SAMPLE.saturating_sub(g.at.elapsed());
                tokio::time::sleep(next.max(std::time::Duration::from_millis(10))).await;
            }
        }
        let decision = live.input.decision();
        let input = live.input.clone().with_settings(module.settings());
        let started = thread_cpu();
        let answer = crate::replay::try_ask(&engine, &module, &input).await;
        let spent = thread_cpu().saturating_sub(started);
        let (outcome, difference, answer) = match answer {
            // Past its deadline having had less CPU than the deadline: the
            // module was not slow, the worker was kept waiting by live work.
            Err(e) if matches!(e.failure, crate::GuestFailure::Deadline(d) if spent < d) => {
                s.count(decision, &module, ShadowOutcome::Dropped);
                continue;
            }
            Err(e) => (
                ShadowOutcome::Failed,
                None,
                Answer::Failed {
                    error: e.to_string(),
                    fallback: None,
                },
            ),
            Ok(a) => match compare(&live, &a) {
                Compared::Same => (ShadowOutcome::Same, None, a),
                Compared::Different(d) => (ShadowOutcome::Different, Some(d), a),
            },
        };
        s.count(decision, &module, outcome);
        if outcome != ShadowOutcome::Same {
            let mut diffs = s.diffs.lock().unwrap_or_else(|p| p.into_inner());
            if diffs.len() >= DIFFS_KEPT {
                diffs.pop_front();
            }
            diffs.push_back(ShadowDiff {
                shadow: module.name().to_string(),
                shadow_digest: module.digest().to_string(),
                live,
                shadow_answer: answer,
                difference,
            });
        }
    }
}

/// The CPU time this thread has used.
fn thread_cpu() -> std::time::Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes the calling thread's CPU clock into `t`, which outlives the call.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    std::time::Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Counts of one shadow module's outcomes for one decision.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ShadowCounts {
    pub decision: Option<Decision>,
    pub module: String,
    pub digest: String,
    pub same: u64,
    pub different: u64,
    pub failed: u64,
    pub dropped: u64,
}

#[derive(Default)]
struct Counts([AtomicU64; 4]);

/// The shadows' queue, worker and findings.
pub struct Shadows {
    tx: mpsc::Sender<(Arc<PolicyModule>, Logged)>,
    state: Arc<State>,
}

/// A shadow's counts are kept by decision, module name and digest.
type ShadowKey = (Decision, String, String);

#[derive(Default)]
struct State {
    diffs: Mutex<VecDeque<ShadowDiff>>,
    counts: Mutex<Vec<(ShadowKey, Arc<Counts>)>>,
}

impl State {
    fn counts(&self, decision: Decision, module: &PolicyModule) -> Arc<Counts> {
        let mut all = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        // Found without building a key: most decisions offered are counted here.
        let same = |(d, name, digest): &ShadowKey| {
            *d == decision && name == module.name() && digest == module.digest()
        };
        if let Some((_, c)) = all.iter().find(|(k, _)| same(k)) {
            return c.clone();
        }
        let c = Arc::new(Counts::default());
        let key = (decision, module.name().to_string(), module.digest().to_string());
        all.push((key, c.clone()));
        c
    }

    fn count(&self, decision: Decision, module: &PolicyModule, outcome: ShadowOutcome) {
        self.counts(decision, module).0[outcome as usize].fetch_add(1, Ordering::Relaxed);
        berth_metrics::shadow(module.name(), decision.interface(), outcome.as_str());
    }
}

impl Shadows {
    /// Starts the worker, on a thread of its own: within the engine's
    /// `shadow_share` of one core's time, and only while the machine has
    /// idle time (a priority below live work's was tried, and cost more: an
    /// idle thread preempted while holding the instance pool's locks stalls
    /// the live decisions waiting on them). What a busy queue cannot take
    /// is dropped and counted.
    pub fn start(engine: Arc<PolicyEngine>) -> Shadows {
        let (tx, rx) = mpsc::channel::<(Arc<PolicyModule>, Logged)>(QUEUE);
        let state = Arc::new(State::default());
        let s = state.clone();
        let started = std::thread::Builder::new()
            .name("berth-shadow".into())
            .spawn(move || {
                match tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .build()
                {
                    Ok(rt) => rt.block_on(work(engine, rx, s)),
                    Err(e) => {
                        tracing::error!(error = %e, "the shadow worker has no runtime; shadows are off")
                    }
                }
            });
        if let Err(e) = started {
            tracing::error!(error = %e, "the shadow worker did not start; shadows are off");
        }
        Shadows { tx, state }
    }

    /// Queues `live` for `module`, never waiting.
    pub fn offer(&self, module: Arc<PolicyModule>, live: &Logged) {
        let decision = live.input.decision();
        // A full queue is the usual case under load (the worker keeps to its
        // budget): dropped without copying the decision first.
        if self.tx.capacity() == 0 {
            self.state.count(decision, &module, ShadowOutcome::Dropped);
            return;
        }
        if let Err(
            mpsc::error::TrySendError::Full((module, _)) | mpsc::error::TrySendError::Closed((module, _)),
        ) = self.tx.try_send((module, live.clone()))
        {
            self.state.count(decision, &module, ShadowOutcome::Dropped);
        }
    }

    /// The latest differences, oldest first.
    pub fn diffs(&self) -> Vec<ShadowDiff> {
        self.state
            .diffs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect()
    }

    /// Every shadow module's counts so far.
    pub fn counts(&self) -> Vec<ShadowCounts> {
        let all = self.state.counts.lock().unwrap_or_else(|p| p.into_inner());
        all.iter()
            .map(|((decision, module, digest), c)| {
                let n = |o: ShadowOutcome| c.0[o as usize].load(Ordering::Relaxed);
                ShadowCounts {
                    decision: Some(*decision),
                    module: module.clone(),
                    digest: digest.clone(),
                    same: n(ShadowOutcome::Same),
                    different: n(ShadowOutcome::Different),
                    failed: n(ShadowOutcome::Failed),
                    dropped: n(ShadowOutcome::Dropped),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_opens_on_a_quarter_of_a_core_idle() {
        // Half the ticks idle on two cores: a core's worth.
        assert_eq!(idle_cores((100, 1000), (150, 1100), 2.0), 1.0);
        // A tenth idle on two cores: a fifth of a core, not enough.
        let busy = idle_cores((100, 1000), (110, 1100), 2.0);
        assert!(busy < IDLE_NEEDED, "{busy}");
        // No ticks between readings (a coarse clock): nothing idle, no division by zero.
        assert_eq!(idle_cores((100, 1000), (100, 1000), 2.0), 0.0);
        let (idle, total) = machine_times().expect("/proc/stat on Linux");
        assert!(idle <= total && total > 0);
    }

    #[test]
    fn the_budget_makes_the_worker_wait_once_spent() {
        let mut b = Budget::new(0.05);
        assert_eq!(b.wait(), None, "a second's share to start with");
        b.spend(std::time::Duration::from_millis(150));
        let pause = b.wait().expect("over budget");
        // 100 ms over at 5 %: two seconds to earn back.
        assert!(pause > std::time::Duration::from_millis(1900), "{pause:?}");
        assert!(pause <= std::time::Duration::from_millis(2000), "{pause:?}");
    }
}
