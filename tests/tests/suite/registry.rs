//! The plugin registry: periodic fingerprinting and health, against a real
//! plugin process that is killed and restarted under it.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use berth::csi::fingerprint::Role;
use berth::csi::registry::{Health, PluginSpec, Registry};
use berth::csi::{ClientOptions, Endpoint};
use berth_tests::{Plugin, PluginBuilder, test_dir};

fn spec(plugin: &Plugin, expected_name: Option<&str>) -> PluginSpec {
    PluginSpec {
        id: "hostpath".into(),
        endpoint: Endpoint::parse(&plugin.endpoint()).unwrap(),
        expected_name: expected_name.map(str::to_string),
        client: ClientOptions {
            deadline: Duration::from_secs(2),
            wait: Duration::ZERO,
        },
        role: Role::Any,
    }
}

/// Waits until the plugin's health satisfies `pred`, failing after 20 s.
async fn wait_for(
    rx: &mut tokio::sync::watch::Receiver<berth::csi::registry::PluginStatus>,
    what: &str,
    pred: impl Fn(&Health) -> bool,
) -> berth::csi::registry::PluginStatus {
    let waited = tokio::time::timeout(Duration::from_secs(20), async {
        rx.wait_for(|s| pred(&s.health)).await.map(|s| s.clone())
    })
    .await;
    match waited {
        Ok(status) => status.expect("registry alive"),
        Err(_) => panic!("timed out waiting for {what}: {:?}", rx.borrow().health),
    }
}

/// Collects log output so the test can count what was logged.
#[derive(Clone, Default)]
struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogBuffer {
    fn count(&self, needle: &str) -> usize {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .matches(needle)
            .count()
    }
}

// Current-thread runtime: the refresh tasks run on this thread, under the log capture.
#[tokio::test]
async fn health_follows_the_plugin_and_each_change_is_logged_once() {
    let logs = LogBuffer::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let dir = test_dir();
    let mut plugin = PluginBuilder::new(dir.path(), "csi").spawn();
    let registry = Registry::new(Duration::from_millis(50));
    let entry = registry.add(spec(&plugin, Some("hostpath.csi.berth.dev")));
    let mut rx = entry.subscribe();
    let _tasks = registry.start();

    let healthy = wait_for(&mut rx, "healthy", |h| *h == Health::Healthy).await;
    assert_eq!(
        healthy.fingerprint.as_ref().unwrap().name,
        "hostpath.csi.berth.dev"
    );

    plugin.kill();
    let down = wait_for(&mut rx, "unhealthy", |h| matches!(h, Health::Unhealthy { .. })).await;
    let Health::Unhealthy { reason } = &down.health else {
        unreachable!()
    };
    assert!(reason.contains("unreachable"), "{reason}");
    assert!(down.fingerprint.is_some(), "the last good fingerprint is kept");

    // Let several more checks fail while the plugin stays down.
    let first_failure = down.last_checked;
    for _ in 0..4 {
        rx.changed().await.unwrap();
    }
    assert!(rx.borrow().last_checked > first_failure, "checks kept running");

    plugin.restart();
    let back = wait_for(&mut rx, "healthy again", |h| *h == Health::Healthy).await;
    assert_eq!(back.transitions, 3, "unknown→healthy→unhealthy→healthy");
    assert_eq!(
        logs.count("plugin is unhealthy"),
        1,
        "logged once, not every tick"
    );
    assert_eq!(logs.count("plugin is healthy"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_reporting_another_driver_name_is_unhealthy() {
    let dir = test_dir();
    let plugin = PluginBuilder::new(dir.path(), "csi")
        .args(&["--name", "other.example.com"])
        .spawn();
    let registry = Registry::new(Duration::from_secs(30));
    let entry = registry.add(spec(&plugin, Some("hostpath.csi.k8s.io")));
    match entry.refresh().await {
        Health::Unhealthy { reason } => {
            assert!(
                reason.contains("\"other.example.com\", expected \"hostpath.csi.k8s.io\""),
                "{reason}"
            )
        }
        other => panic!("expected unhealthy, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_becomes_healthy_when_it_reports_ready() {
    let dir = test_dir();
    let plugin = PluginBuilder::new(dir.path(), "csi")
        .args(&["--not-ready-for", "700ms"])
        .spawn();
    let registry = Registry::new(Duration::from_millis(50));
    let entry = registry.add(spec(&plugin, None));
    let mut rx = entry.subscribe();
    let _tasks = registry.start();
    let first = wait_for(&mut rx, "a first verdict", |h| *h != Health::Unknown).await;
    assert!(
        matches!(&first.health, Health::Unhealthy { reason } if reason.contains("not ready")),
        "{:?}",
        first.health
    );
    wait_for(&mut rx, "ready", |h| *h == Health::Healthy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misbehaving_plugin_is_unhealthy_with_the_reason() {
    let dir = test_dir();
    let plugin = PluginBuilder::new(dir.path(), "csi")
        .args(&["--misbehave", "empty-node-id"])
        .spawn();
    let registry = Registry::new(Duration::from_secs(30));
    let entry = registry.add(spec(&plugin, None));
    match entry.refresh().await {
        Health::Unhealthy { reason } => assert!(
            reason.contains("NodeGetInfo: invalid answer: node_id is empty"),
            "{reason}"
        ),
        other => panic!("expected unhealthy, got {other:?}"),
    }
}
