//! Volumes as the CLI shows them: one line in lists, every field in
//! `volume get`, and the JSON forms of both.

use std::collections::BTreeMap;
use std::time::Duration;

use berth::model::PublicationState;
use berth_proto::berth::v1 as api;
use serde::Serialize;

use crate::output::{Output, say};

/// A volume as the CLI prints it in JSON.
#[derive(Serialize)]
pub struct VolumeView {
    name: String,
    /// Where the name is unique (`default` unless one was named).
    namespace: String,
    id: String,
    state: String,
    plugin: String,
    csi_name: String,
    volume_id: String,
    capacity_bytes: i64,
    /// What was asked: at least this many bytes (0: the plugin's default).
    required_bytes: i64,
    /// At most this many bytes (0: no limit).
    limit_bytes: i64,
    access_mode: String,
    /// Where it was asked to be accessible from: each a topology segment
    /// the plugin must pick from (requisite) or should prefer (preferred).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    requisite_topology: Vec<BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    preferred_topology: Vec<BTreeMap<String, String>>,
    accessible_topology: Vec<BTreeMap<String, String>>,
    publications: Vec<PublicationView>,
    failure: String,
    retrying: String,
    /// What it waits for while it cannot progress, and for how long.
    waiting: String,
    waiting_since_ms: u64,
    /// Growing: an expansion is due on the plugin or a node.
    expanding: bool,
    /// Parameters the plugin can change (`berth volume modify`): what they should be.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    mutable_parameters: BTreeMap<String, String>,
    /// ControllerModifyVolume is due: the plugin does not have them yet.
    modifying: bool,
    /// What it was made from: `snapshot NAME` or `volume NAME`.
    source: String,
    labels: BTreeMap<String, String>,
    /// Who made it: `api`, `docker:NODE`, or empty (before Berth kept it).
    made_by: String,
    /// Which nodes' Docker may see and publish it: `origin` (by who made
    /// it), `none`, `all`, or node names.
    docker_scope: String,
    /// The latest events, oldest first (only in answers about one volume).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    events: Vec<EventView>,
}

/// One event as the CLI prints it in JSON.
#[derive(Serialize)]
pub struct EventView {
    seq: u64,
    /// RFC 3339, UTC.
    at: String,
    at_ms: u64,
    step: String,
    code: String,
    message: String,
}

pub fn event_view(e: &api::VolumeEvent) -> EventView {
    EventView {
        seq: e.seq,
        at: timestamp(e.at_ms),
        at_ms: e.at_ms,
        step: e.step.clone(),
        code: e.code.clone(),
        message: e.message.clone(),
    }
}

fn timestamp(ms: u64) -> String {
    let t = std::time::UNIX_EPOCH + Duration::from_millis(ms);
    humantime::format_rfc3339_millis(t).to_string()
}

/// `2026-11-23T10:00:01.123Z  NodePublishVolume on node-a  OK  the volume is published`
pub fn event_line(e: &api::VolumeEvent) -> String {
    format!("{}  {}  {}  {}", timestamp(e.at_ms), e.step, e.code, e.message)
}

/// How many events `volume get` shows; `volume events` shows them all.
const EVENTS_IN_GET: usize = 5;

/// `volume get`'s JSON: the volume's fields, and its health when it has any.
#[derive(Serialize)]
pub struct WithHealth {
    #[serde(flatten)]
    pub volume: VolumeView,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health: Option<crate::commands::volume::health::HealthView>,
}

#[derive(Serialize)]
struct PublicationView {
    node: String,
    state: String,
    readonly: bool,
    target_path: String,
    /// Who asked for it: `api`, `docker:NODE`, or empty (before Berth kept it).
    by: String,
}

pub fn view(v: &api::Volume) -> VolumeView {
    let spec = v.spec.clone().unwrap_or_default();
    VolumeView {
        name: spec.name,
        namespace: v.namespace.clone(),
        id: v.id.clone(),
        state: v.state.clone(),
        plugin: spec.plugin,
        csi_name: v.csi_name.clone(),
        volume_id: v.volume_id.clone(),
        capacity_bytes: v.capacity_bytes,
        required_bytes: spec.required_bytes,
        limit_bytes: spec.limit_bytes,
        access_mode: spec.access_mode,
        requisite_topology: segments(&spec.requisite_topology),
        preferred_topology: segments(&spec.preferred_topology),
        accessible_topology: segments(&v.accessible_topology),
        publications: v
            .publications
            .iter()
            .map(|p| PublicationView {
                node: p.node.clone(),
                state: p.state.clone(),
                readonly: p.readonly,
                target_path: p.target_path.clone(),
                by: p.by.clone(),
            })
            .collect(),
        failure: v.failure.clone(),
        retrying: v.retrying.clone(),
        waiting: waiting_line(v),
        waiting_since_ms: v.waiting_since_ms,
        expanding: v.expanding,
        mutable_parameters: spec.mutable_parameters.into_iter().collect(),
        modifying: v.modifying,
        source: if !spec.from_snapshot.is_empty() {
            format!("snapshot {}", spec.from_snapshot)
        } else if !spec.from_volume.is_empty() {
            format!("volume {}", spec.from_volume)
        } else {
            String::new()
        },
        labels: spec.labels.into_iter().collect(),
        made_by: v.made_by.clone(),
        docker_scope: spec.docker_scope,
        events: v.events.iter().map(event_view).collect(),
    }
}

fn segments(topologies: &[api::Topology]) -> Vec<BTreeMap<String, String>> {
    topologies
        .iter()
        .map(|t| t.segments.clone().into_iter().collect())
        .collect()
}

/// `zone=a,rack=1`
fn pairs(map: &BTreeMap<String, String>) -> String {
    map.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// What was asked of the size: `at least 10GiB, at most 20GiB`, or nothing.
fn asked_size(w: &VolumeView) -> String {
    let bytes = |n: i64| berth::model::units::format_bytes(n.max(0) as usize);
    match (w.required_bytes, w.limit_bytes) {
        (0, 0) => String::new(),
        (r, 0) => format!("at least {}", bytes(r)),
        (0, l) => format!("at most {}", bytes(l)),
        (r, l) => format!("at least {}, at most {}", bytes(r), bytes(l)),
    }
}

/// Who made a volume and whose Docker may use it, in words.
fn tenancy_lines(w: &VolumeView) -> (String, String) {
    let made_by = match w.made_by.as_str() {
        "" => "not recorded (made before Berth kept it)".to_string(),
        "api" => "the API".to_string(),
        other => other.replace("docker:", "Docker on "),
    };
    let docker = match (w.docker_scope.as_str(), w.made_by.as_str()) {
        ("origin" | "", "api") => "none (`berth volume docker` shares it)".to_string(),
        ("origin" | "", _) => "every node's".to_string(),
        ("none", _) => "none".to_string(),
        ("all", _) => "every node's".to_string(),
        (nodes, _) => format!("on {nodes}"),
    };
    (made_by, docker)
}

/// `waiting for ... (since 12s)`, or nothing.
pub fn waiting_line(v: &api::Volume) -> String {
    if v.waiting.is_empty() {
        return String::new();
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let secs = now.saturating_sub(v.waiting_since_ms) / 1000;
    format!(
        "{} (for {})",
        v.waiting,
        humantime::format_duration(Duration::from_secs(secs))
    )
}

pub fn one_line(v: &api::Volume) -> String {
    let name = v.spec.as_ref().map(|s| s.name.as_str()).unwrap_or("");
    // Outside the default namespace, as `namespace/name`.
    let name = match v.namespace.as_str() {
        "" | "default" => name.to_string(),
        namespace => format!("{namespace}/{name}"),
    };
    let pubs: Vec<String> = v
        .publications
        .iter()
        .map(|p| format!("{}:{}", p.node, p.state))
        .collect();
    let mut line = format!(
        "{name:<24} {:<10} {:<34} {}",
        v.state,
        v.volume_id,
        pubs.join(",")
    );
    if !v.failure.is_empty() {
        line.push_str(&format!("  failed: {}", v.failure));
    } else if !v.retrying.is_empty() {
        line.push_str(&format!("  retrying: {}", v.retrying));
    } else if !v.waiting.is_empty() {
        line.push_str(&format!("  {}", waiting_line(v)));
    }
    line.trim_end().to_string()
}

pub fn print_volume(v: &api::Volume, output: Output) -> anyhow::Result<()> {
    match output {
        Output::Json => crate::output::print_json(&view(v)),
        Output::Text => {
            let w = view(v);
            let row = |k: &str, val: &str| {
                if !val.is_empty() {
                    say!("{k:<14}{val}");
                }
            };
            row("name", &w.name);
            row("state", &w.state);
            row("plugin", &w.plugin);
            row("id", &w.id);
            row("csi name", &w.csi_name);
            row("volume id", &w.volume_id);
            row("access mode", &w.access_mode);
            row("made from", &w.source);
            let (made_by, docker) = tenancy_lines(&w);
            row("made by", &made_by);
            row("docker", &docker);
            if w.expanding {
                row("expanding", "yes");
            }
            if !w.mutable_parameters.is_empty() {
                let due = if w.modifying { " (being applied)" } else { "" };
                row("mutable", &format!("{}{due}", pairs(&w.mutable_parameters)));
            }
            if w.capacity_bytes > 0 {
                row(
                    "capacity",
                    &berth::model::units::format_bytes(w.capacity_bytes as usize),
                );
            } else if !w.volume_id.is_empty() {
                row("capacity", "unknown (the plugin does not say)");
            }
            row("size asked", &asked_size(&w));
            for t in &w.requisite_topology {
                row("requisite", &pairs(t));
            }
            for t in &w.preferred_topology {
                row("preferred", &pairs(t));
            }
            for t in &w.accessible_topology {
                row("accessible", &pairs(t));
            }
            row("labels", &pairs(&w.labels));
            for p in &w.publications {
                let ro = if p.readonly { " (read-only)" } else { "" };
                let by = match p.by.as_str() {
                    "" => String::new(),
                    by => format!(" for {by}"),
                };
                row(
                    "published",
                    &format!("{}: {}{ro} at {}{by}", p.node, p.state, p.target_path),
                );
            }
            row("retrying", &w.retrying);
            row("waiting", &w.waiting);
            row("failed", &w.failure);
            if !v.events.is_empty() {
                let shown = v.events.len().min(EVENTS_IN_GET);
                let more = match v.events.len() > shown {
                    true => format!(" (the last {shown}; `berth volume events {}` shows all)", w.name),
                    false => String::new(),
                };
                say!("events{more}:");
                for e in &v.events[v.events.len() - shown..] {
                    say!("  {}", event_line(e));
                }
            }
            Ok(())
        }
    }
}

pub fn published(p: &api::Publication) -> bool {
    p.state.parse() == Ok(PublicationState::Published)
}
