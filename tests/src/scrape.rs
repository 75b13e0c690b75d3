//! Asking a Berth process's HTTP endpoint as a monitoring system would:
//! a real HTTP client, and the Prometheus text format parsed by a parser
//! that is not Berth's.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use prometheus_parse::{Scrape, Value};

/// `GET http://127.0.0.1:{port}{path}`: the status and the body.
pub fn get(port: u16, path: &str) -> Result<(u16, String), String> {
    let agent = ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(10)))
            .build(),
    );
    let mut response = agent
        .get(&format!("http://127.0.0.1:{port}{path}"))
        .call()
        .map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let body = response.body_mut().read_to_string().map_err(|e| e.to_string())?;
    Ok((status, body))
}

/// Record writes (the store's and the in-process agents' records together)
/// and their commits so far, from the committers' batch-size histogram.
pub fn record_writes(port: u16) -> (f64, f64) {
    let (_, body) = get(port, "/metrics").expect("scraping /metrics");
    let read = |name: &str| {
        body.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse::<f64>().ok()))
            .unwrap_or(0.0)
    };
    (
        read("berth_store_commit_batch_size_sum "),
        read("berth_store_commit_batch_size_count "),
    )
}

/// `/metrics`, parsed.
pub fn scrape(port: u16) -> Scrape {
    let (status, body) = get(port, "/metrics").expect("scraping /metrics");
    assert_eq!(status, 200, "{body}");
    Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).expect("the Prometheus text format")
}

/// A sample's value, whatever its type (histograms: their count).
pub fn value(v: &Value) -> f64 {
    match v {
        Value::Counter(x) | Value::Gauge(x) | Value::Untyped(x) => *x,
        Value::Histogram(buckets) => buckets
            .iter()
            .find(|b| b.less_than.is_infinite())
            .map_or(0.0, |b| b.count),
        Value::Summary(_) => f64::NAN,
    }
}

/// The samples named `metric`, by the labels named in `by` (values joined with a space).
pub fn by_labels(scrape: &Scrape, metric: &str, by: &[&str]) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for s in scrape.samples.iter().filter(|s| s.metric == metric) {
        let key = by
            .iter()
            .map(|l| s.labels.get(l).unwrap_or("").to_string())
            .collect::<Vec<_>>()
            .join(" ");
        *out.entry(key).or_insert(0.0) += value(&s.value);
    }
    out
}

/// Waits (up to `within`) until `/readyz` answers `status`; the body then.
pub fn wait_ready(port: u16, status: u16, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        let last = match get(port, "/readyz") {
            Ok((s, body)) if s == status => return body,
            Ok((s, body)) => format!("{s}: {body}"),
            Err(e) => e,
        };
        assert!(
            Instant::now() < deadline,
            "/readyz never answered {status}; last: {last}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
