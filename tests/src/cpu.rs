//! CPU time spent by processes between two moments, from `/proc/<pid>/stat`:
//! where a benchmark's cores went, per part (Berth, the plugins, the driver).

use std::time::Duration;

/// User plus system time a process has used so far; zero once it is gone.
pub fn used(pid: u32) -> Duration {
    ticks_in(&format!("/proc/{pid}/stat"))
}

/// User plus system time in a `stat` file of `/proc`; zero when unreadable.
fn ticks_in(path: &str) -> Duration {
    let Ok(stat) = std::fs::read_to_string(path) else {
        return Duration::ZERO;
    };
    // The command name may hold spaces: fields are counted after its ')'.
    let Some(after) = stat.rsplit_once(')').map(|(_, rest)| rest) else {
        return Duration::ZERO;
    };
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after ')'.
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
        .sum();
    // SAFETY: sysconf only reads a constant of the running system.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_nanos(ticks * 1_000_000_000 / per_second)
}

/// CPU time each of a process's threads has used so far, summed by thread
/// name (tokio's workers share one).
pub fn by_thread(pid: u32) -> std::collections::BTreeMap<String, Duration> {
    let mut threads = std::collections::BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return threads;
    };
    for task in tasks.flatten() {
        let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        *threads.entry(name.trim().to_string()).or_default() += used_by_task(pid, tid);
    }
    threads
}

fn used_by_task(pid: u32, tid: u32) -> Duration {
    ticks_in(&format!("/proc/{pid}/task/{tid}/stat"))
}

/// The CPU time of groups of processes, read at a start and compared later.
pub struct CpuMeter {
    groups: Vec<(&'static str, Vec<u32>, Duration)>,
}

impl CpuMeter {
    /// Starts counting for each named group of processes.
    pub fn start(groups: Vec<(&'static str, Vec<u32>)>) -> CpuMeter {
        CpuMeter {
            groups: groups
                .into_iter()
                .map(|(name, pids)| {
                    let now = pids.iter().map(|&p| used(p)).sum();
                    (name, pids, now)
                })
                .collect(),
        }
    }

    /// Each group's CPU time since [`CpuMeter::start`], in its order.
    pub fn since(&self) -> Vec<(&'static str, Duration)> {
        self.groups
            .iter()
            .map(|(name, pids, then)| {
                let now: Duration = pids.iter().map(|&p| used(p)).sum();
                (*name, now.saturating_sub(*then))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_process_is_seen_using_cpu_and_a_gone_one_none() {
        let me = std::process::id();
        let meter = CpuMeter::start(vec![("me", vec![me]), ("gone", vec![u32::MAX])]);
        let started = std::time::Instant::now();
        let mut x = 0u64;
        while started.elapsed() < Duration::from_millis(300) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let seen = meter.since();
        assert_eq!(seen[0].0, "me");
        assert!(seen[0].1 >= Duration::from_millis(100), "{seen:?}");
        assert_eq!(seen[1].1, Duration::ZERO);
    }
}
