//! `berth plugin ...`: talk to a CSI plugin socket directly.

pub mod check;

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use berth::csi::fingerprint::Role;
use berth::csi::{self, ClientOptions, CsiClient, Endpoint, Fingerprint};
use berth_proto::berth::v1 as api;
use clap::{Args, Subcommand};
use serde::Serialize;

use crate::client::{ApiArgs, connect, grpc};
use crate::output::{Output, say};

#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Fingerprint a plugin: name, version, readiness, capabilities and node info.
    ///
    /// Calls GetPluginInfo, Probe, GetPluginCapabilities, ControllerGetCapabilities
    /// (when the plugin offers the Controller service), NodeGetCapabilities and
    /// NodeGetInfo (when it serves the Node service), and checks each answer
    /// against the CSI spec.
    #[command(after_help = "Example:\n  berth plugin probe unix:///run/csi/hostpath.sock --output json")]
    Probe(ProbeArgs),
    /// A conformance run against a live driver: does what its capabilities
    /// claim on a volume of its own, holds each answer to the CSI spec, cleans
    /// up, and reports every case as passed, failed or skipped, with a reason.
    ///
    /// Cases: CreateVolume (twice, with a conflicting size, without name or
    /// capabilities), ValidateVolumeCapabilities, ControllerGetVolume,
    /// ListVolumes, ControllerExpandVolume and NodeExpandVolume,
    /// ControllerPublishVolume, NodeStageVolume and NodePublishVolume at real
    /// paths, NodeGetVolumeStats, snapshots with restore and clone, then every
    /// undo twice; unknown ids must answer NOT_FOUND and missing fields
    /// INVALID_ARGUMENT.
    Check(Box<crate::commands::plugin::check::CheckArgs>),
    /// Health of the configured plugins as `berth serve` sees them: the
    /// controller, and how many of the expected node plugins are healthy.
    Status {
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Volumes on the plugin that Berth does not track, and tracked volumes
    /// the plugin no longer has (ListVolumes). Reports only: nothing is deleted.
    #[command(
        after_help = "Example:\n  berth plugin orphans hostpath\n\nAdopt an untracked volume with `berth volume import`."
    )]
    Orphans {
        /// The configured plugin's name.
        plugin: String,
        #[command(flatten)]
        api: ApiArgs,
    },
}

#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// The plugin's socket: unix:///path/to/csi.sock, or a plain path.
    #[arg(value_parser = Endpoint::parse)]
    pub endpoint: Endpoint,

    /// Deadline for each CSI call (e.g. 500ms, 15s).
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,

    /// How long to wait for the socket to appear and accept connections.
    #[arg(long, default_value = "0", value_parser = humantime::parse_duration)]
    pub wait: Duration,

    /// The services the endpoint is there for: `controller` (Identity and
    /// Controller), `node` (Identity and Node), or `any` (whatever it serves).
    #[arg(long, value_enum, default_value_t = ProbeRole::Any)]
    pub role: ProbeRole,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ProbeRole {
    Controller,
    Node,
    Any,
}

impl From<ProbeRole> for Role {
    fn from(r: ProbeRole) -> Role {
        match r {
            ProbeRole::Controller => Role::Controller,
            ProbeRole::Node => Role::Node,
            ProbeRole::Any => Role::Any,
        }
    }
}

pub async fn run(cmd: PluginCommand, output: Output) -> anyhow::Result<ExitCode> {
    match cmd {
        PluginCommand::Probe(args) => probe(args, output).await,
        PluginCommand::Check(args) => crate::commands::plugin::check::run(*args, output).await,
        PluginCommand::Status { api } => plugin_status(api, output).await,
        PluginCommand::Orphans { plugin, api } => orphans(plugin, api, output).await,
    }
}

async fn orphans(plugin: String, api: ApiArgs, output: Output) -> anyhow::Result<ExitCode> {
    let mut client = crate::client::connect(&api).await?;
    let o = client
        .plugin_orphans(berth_proto::berth::v1::PluginOrphansRequest {
            plugin: plugin.clone(),
        })
        .await
        .map_err(crate::client::grpc)?
        .into_inner();
    match output {
        Output::Json => crate::output::print_json(&serde_json::json!({
            "untracked": o.untracked.iter().map(|u| serde_json::json!({
                "volume_id": u.volume_id, "capacity_bytes": u.capacity_bytes,
            })).collect::<Vec<_>>(),
            "missing": o.missing.iter().map(|m| serde_json::json!({
                "name": m.name, "volume_id": m.volume_id,
            })).collect::<Vec<_>>(),
            "creating": o.creating,
        }))?,
        Output::Text => {
            if o.untracked.is_empty() && o.missing.is_empty() {
                say!("{plugin}: Berth and the plugin agree on every volume");
            }
            for u in &o.untracked {
                say!(
                    "untracked  {} ({}): on the plugin, not in Berth",
                    u.volume_id,
                    berth::model::units::format_bytes(u.capacity_bytes.max(0) as usize)
                );
            }
            for m in &o.missing {
                say!(
                    "missing    {} ({}): in Berth, gone from the plugin",
                    m.name,
                    m.volume_id
                );
            }
            if !o.creating.is_empty() && !o.untracked.is_empty() {
                say!(
                    "note: {} being created now ({}) may be among the untracked",
                    o.creating.len(),
                    o.creating.join(", ")
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn probe(args: ProbeArgs, output: Output) -> anyhow::Result<ExitCode> {
    let options = ClientOptions {
        deadline: args.timeout,
        wait: args.wait,
    };
    let client = CsiClient::connect(args.endpoint, options).await?;
    let fp = csi::fingerprint::fingerprint(&client, args.role.into()).await?;
    match output {
        Output::Json => crate::output::print_json(&fp)?,
        Output::Text => {
            for line in render(&fp).lines() {
                say!("{line}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn render(fp: &Fingerprint) -> String {
    fn list(items: &[String]) -> String {
        if items.is_empty() {
            "(none)".into()
        } else {
            items.join(", ")
        }
    }
    fn segments(map: &std::collections::BTreeMap<String, String>) -> String {
        if map.is_empty() {
            return "(none)".into();
        }
        map.iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
    let mut out = String::new();
    let mut row = |key: &str, value: &str| {
        let _ = writeln!(out, "{key:<22}{value}");
    };
    row("plugin", &fp.name);
    row("vendor version", &fp.vendor_version);
    row("endpoint", &fp.endpoint);
    row(
        "ready",
        if fp.ready {
            "yes"
        } else {
            "no (still initialising)"
        },
    );
    row("plugin capabilities", &list(&fp.plugin_capabilities));
    let unserved = |service: &str| fp.unserved.iter().any(|s| s == service);
    match &fp.controller {
        Some(c) => row("controller", &list(&c.capabilities)),
        None if unserved("Controller") => row("controller", "offered by the driver, not served here"),
        None => row("controller", "not offered"),
    }
    match &fp.node {
        Some(n) => {
            row("node", &list(&n.capabilities));
            row("node id", &n.node_id);
            let max = n
                .max_volumes_per_node
                .map_or_else(|| "unlimited".to_string(), |m| m.to_string());
            row("max volumes per node", &max);
            row("topology", &segments(&n.accessible_topology));
        }
        None => row("node", "not served"),
    }
    if !fp.manifest.is_empty() {
        row("manifest", &segments(&fp.manifest));
    }
    out
}

#[derive(Serialize)]
struct PluginView {
    name: String,
    driver: String,
    controller: String,
    controller_reason: String,
    nodes_healthy: u32,
    nodes_expected: u32,
    capabilities: Vec<String>,
    /// The latest conformance report recorded (`plugin check --record`).
    #[serde(skip_serializing_if = "Option::is_none")]
    last_check: Option<CheckView>,
}

#[derive(Serialize)]
struct CheckView {
    recorded: String,
    recorded_by: String,
    driver: String,
    vendor_version: String,
    passed: u32,
    failed: u32,
    warnings: u32,
    skipped: u32,
    /// The cases that failed, each with its rule and why.
    failures: Vec<String>,
}

impl CheckView {
    fn of(c: api::PluginCheck) -> CheckView {
        let at = std::time::UNIX_EPOCH + Duration::from_millis(c.recorded_ms);
        CheckView {
            recorded: humantime::format_rfc3339_seconds(at).to_string(),
            recorded_by: c.recorded_by,
            driver: c.driver,
            vendor_version: c.vendor_version,
            passed: c.passed,
            failed: c.failed,
            warnings: c.warnings,
            skipped: c.skipped,
            failures: c
                .cases
                .into_iter()
                .filter(|k| k.verdict == "failed")
                .map(|k| format!("{}: {} ({})", k.name, k.rule, k.reason))
                .collect(),
        }
    }

    /// One line: when, by whom, against what, and the counts.
    fn summary(&self) -> String {
        format!(
            "{} by {}, {} {}: {} passed, {} failed, {} skipped, {} warnings",
            self.recorded,
            self.recorded_by,
            self.driver,
            self.vendor_version,
            self.passed,
            self.failed,
            self.skipped,
            self.warnings
        )
    }
}

pub async fn plugin_status(api: ApiArgs, output: Output) -> anyhow::Result<ExitCode> {
    let mut client = connect(&api).await?;
    let list = client
        .plugin_status(api::PluginStatusRequest {})
        .await
        .map_err(grpc)?
        .into_inner();
    let views: Vec<PluginView> = list
        .plugins
        .into_iter()
        .map(|p| PluginView {
            name: p.name,
            driver: p.driver,
            controller: p.controller_health,
            controller_reason: p.controller_reason,
            nodes_healthy: p.nodes_healthy,
            nodes_expected: p.nodes_expected,
            capabilities: p.capabilities,
            last_check: p.last_check.map(CheckView::of),
        })
        .collect();
    match output {
        Output::Json => crate::output::print_json(&views)?,
        Output::Text => {
            for p in &views {
                say!("{:<22}{}", "plugin", p.name);
                say!("{:<22}{}", "driver", p.driver);
                say!("{:<22}{}", "controller", p.controller);
                if !p.controller_reason.is_empty() {
                    say!("{:<22}{}", "", p.controller_reason);
                }
                say!(
                    "{:<22}{} of {} healthy",
                    "nodes",
                    p.nodes_healthy,
                    p.nodes_expected
                );
                say!("{:<22}{}", "capabilities", p.capabilities.join(", "));
                match &p.last_check {
                    None => say!(
                        "{:<22}none recorded (berth plugin check --record {})",
                        "last check",
                        p.name
                    ),
                    Some(c) => {
                        say!("{:<22}{}", "last check", c.summary());
                        for failure in &c.failures {
                            say!("{:<22}FAIL {failure}", "");
                        }
                    }
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
