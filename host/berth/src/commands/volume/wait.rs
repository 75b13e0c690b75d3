//! `--wait` for volume commands: follows the volume until it reaches the
//! goal, printing each event and each change of where it stands (not the
//! time waited so far), and says where it stands when the wait runs out.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use berth::model::VolumeState;
use berth_proto::berth::v1 as api;

use crate::client::grpc;
use crate::commands::volume::view::{event_line, one_line, published, view, waiting_line};
use crate::output::{Output, say};

/// What --wait waits for.
pub(super) enum Goal<'a> {
    /// Created (available or published), or failed.
    Ready,
    /// Published on this node, or failed.
    PublishedOn(Option<&'a str>),
    /// No publication on this node, or failed.
    GoneFrom(&'a str),
    /// The volume no longer exists.
    Deleted,
    /// At least this large, node side included, or failed.
    Grown(i64),
    /// The plugin has the spec's mutable parameters, or failed.
    Modified,
}

impl Goal<'_> {
    /// What --wait waited for, in words: "to be published on node-a".
    fn describe(&self) -> String {
        match self {
            Goal::Ready => "to be created".into(),
            Goal::PublishedOn(Some(node)) => format!("to be published on {node}"),
            Goal::PublishedOn(None) => "to be published".into(),
            Goal::GoneFrom(node) => format!("to be unpublished from {node}"),
            Goal::Deleted => "to be deleted".into(),
            Goal::Grown(size) => format!(
                "to grow to {}",
                berth::model::units::format_bytes((*size).max(0) as usize)
            ),
            Goal::Modified => "to have its mutable parameters applied".into(),
        }
    }
}

/// Where a volume stands, for a --wait that timed out: its state, and
/// what it waits for, retries or failed with.
fn stands(v: &api::Volume) -> String {
    let mut at = format!("it is {}", v.state);
    for (what, text) in [("retrying", &v.retrying), ("failed", &v.failure)] {
        if !text.is_empty() {
            at.push_str(&format!(", {what}: {text}"));
        }
    }
    if !v.waiting.is_empty() {
        at.push_str(&format!(", {}", waiting_line(v)));
    }
    at
}

pub(super) async fn wait(
    client: &mut crate::client::Client,
    from: &api::Volume,
    goal: Goal<'_>,
    timeout: Duration,
    output: Output,
) -> anyhow::Result<ExitCode> {
    let name = from.spec.as_ref().map_or("", |s| s.name.as_str());
    let started = Instant::now();
    let mut last = String::new();
    // From the request's own event on (a create's naming follows it).
    let mut seen = from
        .events
        .iter()
        .rev()
        .find(|e| e.step == "request")
        .or(from.events.last())
        .map_or(0, |e| e.seq.saturating_sub(1));
    loop {
        let v = match client
            .get_volume(api::GetVolumeRequest { name: name.into() })
            .await
        {
            Ok(v) => v.into_inner(),
            Err(e) if e.code() == tonic::Code::NotFound && matches!(goal, Goal::Deleted) => {
                match output {
                    Output::Text => say!("{name}: deleted"),
                    Output::Json => {
                        crate::output::print_json(&serde_json::json!({ "name": name, "state": "deleted" }))?
                    }
                }
                return Ok(ExitCode::SUCCESS);
            }
            Err(e) => return Err(grpc(e)),
        };
        if output == Output::Text {
            let since = seen;
            for e in v.events.iter().filter(|e| e.seq > since) {
                say!("  {}", event_line(e));
                seen = e.seq;
            }
            // A line when something changed, not when only the time
            // waited so far did.
            let still = api::Volume {
                waiting: String::new(),
                events: Vec::new(),
                ..v.clone()
            };
            let key = format!("{}|{}|{}", one_line(&still), v.waiting, v.waiting_since_ms);
            if key != last {
                say!("{}", one_line(&v));
                last = key;
            }
        }
        if !v.failure.is_empty() {
            if output == Output::Json {
                crate::output::print_json(&view(&v))?;
            }
            return Ok(ExitCode::FAILURE);
        }
        let done = match goal {
            Goal::Ready => v.state.parse().is_ok_and(VolumeState::is_ready),
            Goal::PublishedOn(node) => v
                .publications
                .iter()
                .any(|p| node.is_none_or(|n| p.node == n) && published(p)),
            Goal::GoneFrom(node) => !v.publications.iter().any(|p| p.node == node),
            Goal::Deleted => false,
            // A capacity the plugin does not say (0) is grown once nothing is due.
            Goal::Grown(size) => (v.capacity_bytes >= size || v.capacity_bytes == 0) && !v.expanding,
            Goal::Modified => !v.modifying,
        };
        if done {
            if output == Output::Json {
                crate::output::print_json(&view(&v))?;
            }
            return Ok(ExitCode::SUCCESS);
        }
        if started.elapsed() > timeout {
            anyhow::bail!(
                "waited {} for {name} {}; {} (`berth volume get {name}` says more; --timeout waits longer)",
                humantime::format_duration(timeout),
                goal.describe(),
                stands(&v),
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
