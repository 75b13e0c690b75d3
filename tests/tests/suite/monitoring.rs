//! The packaged Grafana dashboard and Prometheus alert rules
//! (`packaging/monitoring/`), against a real Prometheus (Debian's
//! `prometheus`) scraping a real server and agent: every metric they name is
//! one Berth exports, every query and rule is accepted and evaluates without
//! error, a healthy cluster fires nothing, and an unhealthy plugin sets its
//! alert pending. The rules' own unit tests run with `promtool test rules`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use berth_tests::scrape::{get, wait_ready};
use berth_tests::{Cluster, ClusterSpec, free_port, wait_for};
use serde_json::Value;

fn packaged(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../packaging/monitoring")
        .join(file)
}

/// Grafana's interval variables, as a dashboard on a 1 s scrape would have them.
fn as_grafana_sends(expr: &str) -> String {
    expr.replace("$__rate_interval", "1m").replace("$__range", "5m")
}

/// Every query of the dashboard, in its panels' order.
fn dashboard_queries() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(packaged("berth-dashboard.json")).unwrap();
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let title = panel["title"].as_str().unwrap_or_default().to_string();
            out.push((title, target["expr"].as_str().expect("an expr").to_string()));
        }
    }
    out
}

/// The `berth_…` names a text mentions.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("berth_") {
        let name: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        rest = &rest[at + name.len()..];
        out.insert(name);
    }
    out
}

/// The families a `/metrics` body declares, and the sample names each has
/// (`_total` for counters; `_bucket`, `_sum`, `_count` for histograms).
fn exported(body: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in body.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (family, kind) = rest.split_once(' ').unwrap();
        let suffixes: &[&str] = match kind {
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_sum", "_count"],
            _ => &[""],
        };
        out.extend(suffixes.iter().map(|s| format!("{family}{s}")));
    }
    out
}

/// The metric names Berth's code registers (the `"berth_…"` literals of
/// `host/metrics` and of the manager's gauges) with the sample names each
/// kind has: families nothing has counted yet are not in a scrape.
fn registered() -> BTreeSet<String> {
    let host = Path::new(env!("CARGO_MANIFEST_DIR")).join("../host");
    let mut out = BTreeSet::new();
    for file in ["metrics/src/lib.rs", "manager/src/gauges.rs"] {
        let text = std::fs::read_to_string(host.join(file)).unwrap();
        for name in metric_names(&text) {
            for suffix in ["", "_total", "_bucket", "_sum", "_count"] {
                out.insert(format!("{name}{suffix}"));
            }
        }
    }
    out
}

/// Prometheus on loopback, stopped when dropped.
struct Prometheus {
    child: Child,
    port: u16,
}

impl Prometheus {
    fn start(dir: &Path, targets: &[(&str, u16)]) -> Prometheus {
        let port = free_port();
        let jobs: String = targets
            .iter()
            .map(|(job, p)| {
                format!("  - job_name: {job}\n    static_configs:\n      - targets: ['127.0.0.1:{p}']\n")
            })
            .collect();
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\nscrape_configs:\n{jobs}",
                packaged("berth-rules.yml").display()
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("tsdb").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("prometheus (Debian's `prometheus`; `cargo xtask test` installs it)");
        Prometheus { child, port }
    }

    /// `GET /api/v1/{path}` with `query`, as JSON; its `status` and `data`.
    fn api(&self, path: &str, query: &[(&str, &str)]) -> Value {
        let agent = ureq::Agent::new_with_config(
            ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(Duration::from_secs(10)))
                .build(),
        );
        let mut request = agent.get(&format!("http://127.0.0.1:{}/api/v1/{path}", self.port));
        for (k, v) in query {
            request = request.query(k, v);
        }
        match request.call() {
            // Prometheus answers in plain text while it starts ("Service Unavailable").
            Ok(mut r) => {
                let body = r.body_mut().read_to_string().unwrap_or_default();
                serde_json::from_str(&body)
                    .unwrap_or_else(|_| serde_json::json!({ "status": "starting", "body": body }))
            }
            Err(e) => serde_json::json!({ "status": "unreachable", "error": e.to_string() }),
        }
    }

    /// An instant query's result vector; panics on a query Prometheus refuses.
    fn query(&self, expr: &str) -> Vec<Value> {
        let answer = self.api("query", &[("query", expr)]);
        assert_eq!(answer["status"], "success", "{expr}: {answer}");
        answer["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// `{label}` → value of an instant query's samples.
    fn values_by(&self, expr: &str, label: &str) -> Vec<(String, f64)> {
        self.query(expr)
            .iter()
            .map(|s| {
                let key = s["metric"][label].as_str().unwrap_or_default().to_string();
                let value = s["value"][1].as_str().unwrap().parse().unwrap();
                (key, value)
            })
            .collect()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_packaged_dashboard_and_alerts_work_on_a_real_prometheus_scraping_berth() {
    let server_port = free_port();
    let extra = format!("metrics = \"127.0.0.1:{server_port}\"");
    let mut c = Cluster::start(ClusterSpec {
        agents: true,
        nodes: vec![("node-a", "a")],
        extra: &extra,
        ..ClusterSpec::default()
    });
    let agent_port = free_port();
    c.agent("node-a").serve_metrics(agent_port);
    wait_ready(agent_port, 200, Duration::from_secs(30));
    c.create_in("watched", "zone=a");
    c.ok(&["volume", "publish", "watched", "--node", "node-a", "--wait"]);

    // Every name the dashboard and the rules use is one Berth exports: in
    // a scrape, or registered and not counted yet (no retry, trap,
    // rollback... has happened here).
    let mut exports = registered();
    for port in [server_port, agent_port] {
        let scraped = exported(&get(port, "/metrics").unwrap().1);
        let strangers: Vec<_> = scraped.difference(&exports).collect();
        assert!(
            strangers.is_empty(),
            "scraped but not registered where this test looks: {strangers:?}"
        );
        exports.extend(scraped);
    }
    let dashboard = std::fs::read_to_string(packaged("berth-dashboard.json")).unwrap();
    let rules = std::fs::read_to_string(packaged("berth-rules.yml")).unwrap();
    for (file, text) in [("dashboard", &dashboard), ("rules", &rules)] {
        let unknown: Vec<_> = metric_names(text)
            .into_iter()
            .filter(|n| !exports.contains(n))
            .collect();
        assert!(
            unknown.is_empty(),
            "the {file} names metrics Berth does not export: {unknown:?}"
        );
    }

    let dir = berth_tests::test_dir();
    let prometheus = Prometheus::start(dir.path(), &[("berth", server_port), ("berth-agent", agent_port)]);
    let log = || std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default();
    // Two scrapes of each at least, so that rates have something to divide.
    wait_for(
        "Prometheus to scrape the server and the agent twice",
        Duration::from_secs(60),
        || {
            let answer = prometheus.api("query", &[("query", "count_over_time(up[1m]) >= 2")]);
            answer["data"]["result"].as_array().is_some_and(|r| r.len() == 2)
        },
        log,
    );

    // Each panel's query is accepted, and the headline ones see the cluster.
    for (panel, expr) in dashboard_queries() {
        let answer = prometheus.api("query", &[("query", &as_grafana_sends(&expr))]);
        assert_eq!(answer["status"], "success", "panel {panel:?}: {expr}: {answer}");
    }
    for (expr, label, want) in [
        ("max by (state) (berth_volumes)", "state", ("published", 1.0)),
        (
            "min by (plugin) (berth_plugin_healthy)",
            "plugin",
            ("hostpath", 1.0),
        ),
        ("max by (state) (berth_nodes)", "state", ("ready", 1.0)),
        ("sum(berth_agent_connected)", "", ("", 1.0)),
    ] {
        let got = prometheus.values_by(expr, label);
        assert!(
            got.iter().any(|(k, v)| k == want.0 && *v == want.1),
            "{expr}: {got:?}, wants {want:?}"
        );
    }

    // The rules load and evaluate without error; a healthy cluster fires nothing.
    wait_for(
        "every rule evaluated",
        Duration::from_secs(30),
        || {
            let answer = prometheus.api("rules", &[]);
            let rules: Vec<&Value> = answer["data"]["groups"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|g| g["rules"].as_array().into_iter().flatten())
                .collect();
            !rules.is_empty()
                && rules.iter().all(|r| {
                    assert_ne!(r["health"], "err", "a rule failed to evaluate: {r}");
                    r["health"] == "ok"
                })
        },
        log,
    );
    let firing = prometheus.query("ALERTS");
    assert!(firing.is_empty(), "a healthy cluster raises no alert: {firing:?}");

    // The controller plugin stops: its alert is pending (it fires after 5 minutes).
    c.controller.kill();
    wait_for(
        "BerthPluginUnhealthy pending for hostpath",
        Duration::from_secs(60),
        || {
            prometheus
                .values_by(
                    r#"ALERTS{alertname="BerthPluginUnhealthy",alertstate="pending"}"#,
                    "plugin",
                )
                .iter()
                .any(|(plugin, _)| plugin == "hostpath")
        },
        || format!("ALERTS: {:?}", prometheus.query("ALERTS")),
    );
}

/// The rules' unit tests (`berth-rules.test.yml`) pass in `promtool`, and
/// every alert has one.
#[test]
fn every_packaged_alert_has_a_unit_test_and_it_passes() {
    let rules = std::fs::read_to_string(packaged("berth-rules.yml")).unwrap();
    let tests = std::fs::read_to_string(packaged("berth-rules.test.yml")).unwrap();
    let alerts: Vec<&str> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .collect();
    assert!(alerts.len() >= 10, "{alerts:?}");
    for alert in &alerts {
        assert!(
            tests.contains(&format!("alertname: {alert}\n")),
            "{alert} has no case in berth-rules.test.yml"
        );
    }
    let out = Command::new("promtool")
        .args(["test", "rules", "berth-rules.test.yml"])
        .current_dir(packaged(""))
        .output()
        .expect("promtool (Debian's `prometheus`; `cargo xtask test` installs it)");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
