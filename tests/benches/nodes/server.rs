//! The `berth serve` processes of the fleet bench, and what is read off
//! them: resident memory and CPU time from `/proc`, nodes and desired sets
//! from `/metrics`.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use berth_tests::{berth_logged, free_port, scrape};

/// One `berth serve`, with the cluster's TLS endpoint and `/metrics`.
pub struct Server {
    pub config: PathBuf,
    pub log: PathBuf,
    pub api: PathBuf,
    pub cluster_port: u16,
    pub metrics_port: u16,
    child: Option<Child>,
}

impl Server {
    /// Writes server `i`'s config below `dir`: the sample plugin's
    /// controller at `controller`, the store in `store` (a `[store]` table)
    /// or embedded, and joins as fast as a fleet brought up at once needs.
    pub fn new(dir: &Path, i: usize, controller: &str, store: Option<&str>) -> Server {
        let state = dir.join(format!("state-{i}"));
        std::fs::create_dir_all(&state).expect("the server's directory");
        let (cluster_port, metrics_port) = (free_port(), free_port());
        let config = dir.join(format!("berth-{i}.toml"));
        let store = match store {
            Some(table) => format!("{table}name = \"server-{i}\"\n"),
            None => String::new(),
        };
        std::fs::write(
            &config,
            format!(
                "state = \"{}/berth.redb\"\ncluster_address = \"127.0.0.1:{cluster_port}\"\nmetrics = \"127.0.0.1:{metrics_port}\"\njoins_per_minute = 1000000\ncluster_connections_per_address = 16384\n{store}[[plugin]]\nname = \"hostpath\"\ncontroller = \"{controller}\"\n",
                state.display()
            ),
        )
        .expect("writing the server's config");
        Server {
            config,
            log: dir.join(format!("serve-{i}.log")),
            api: state.join("berth.sock"),
            cluster_port,
            metrics_port,
            child: None,
        }
    }

    /// Starts it; returns once its API accepts connections.
    pub fn start(&mut self) {
        let _ = std::fs::remove_file(&self.api);
        self.child = Some(berth_logged("serve", &self.config, &self.log));
        let deadline = Instant::now() + Duration::from_secs(120);
        while std::os::unix::net::UnixStream::connect(&self.api).is_err() {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!("berth serve exited with {status}:\n{}", self.log_tail());
            }
            assert!(
                Instant::now() < deadline,
                "the API never came up:\n{}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILL, as in a crash.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the server runs").id()
    }

    pub fn log_tail(&self) -> String {
        berth_tests::storm::tail(&std::fs::read_to_string(&self.log).unwrap_or_default())
    }

    /// Resident memory, in bytes.
    pub fn rss(&self) -> u64 {
        rss_of(self.pid())
    }

    /// CPU time used so far (user and system).
    pub fn cpu(&self) -> Duration {
        cpu_of(self.pid())
    }

    /// `/metrics` answered and parsed; `None` while the server does not answer.
    pub fn metrics(&self) -> Option<prometheus_parse::Scrape> {
        let (status, body) = scrape::get(self.metrics_port, "/metrics").ok()?;
        (status == 200).then(|| {
            prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string())))
                .expect("the Prometheus text format")
        })
    }

    /// Nodes whose agent is connected and heard from.
    pub fn ready_nodes(&self) -> Option<usize> {
        let m = self.metrics()?;
        Some(sample(&m, "berth_nodes", Some(("state", "ready"))) as usize)
    }

    /// Complete desired sets sent since the server started, and their bytes.
    pub fn desired_sets(&self) -> (f64, f64) {
        let m = self.metrics().expect("the server answers /metrics");
        (
            sample(&m, "berth_desired_sets", None),
            sample(&m, "berth_desired_set_bytes", None),
        )
    }

    /// Heartbeats received since the server started.
    pub fn heartbeats(&self) -> f64 {
        self.metrics()
            .map_or(0.0, |m| sample(&m, "berth_agent_heartbeats", None))
    }

    /// Whether this server leads (always, on the embedded store).
    pub fn leads(&self) -> bool {
        self.metrics()
            .is_some_and(|m| sample(&m, "berth_leader", None) == 1.0)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A sample's value (summed over what `label` leaves); counters may carry `_total`.
fn sample(m: &prometheus_parse::Scrape, metric: &str, label: Option<(&str, &str)>) -> f64 {
    m.samples
        .iter()
        .filter(|s| s.metric == metric || s.metric == format!("{metric}_total"))
        .filter(|s| label.is_none_or(|(k, v)| s.labels.get(k) == Some(v)))
        .map(|s| scrape::value(&s.value))
        .sum()
}

pub fn rss_of(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

pub fn cpu_of(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command (which may hold spaces): utime and stime are the 12th and 13th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|f| f.parse().ok())
        .collect();
    // SAFETY: sysconf only reads a constant of the system.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Duration::from_secs_f64(fields.iter().sum::<u64>() as f64 / ticks)
}
