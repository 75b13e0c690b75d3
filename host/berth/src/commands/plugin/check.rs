//! `berth plugin check`: the conformance run, its options and its report.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use berth::csi::{ClientOptions, CsiClient, Endpoint};
use berth_check::{self as check, CheckOptions, Report, Verdict};
use clap::Args;

use anyhow::Context as _;
use berth_proto::berth::v1 as wire;

use crate::client::{ApiArgs, connect, grpc};
use crate::output::{Output, say};

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  berth plugin check unix:///run/csi/csi.sock
  berth plugin check unix:///run/csi/controller.sock --node-endpoint unix:///run/csi/node.sock
  berth plugin check /run/csi/csi.sock --size 10GiB --parameter type=ssd --output json

The check makes one volume (named berth-check-PID-MILLIS-...), publishes, stages, expands
and snapshots it as far as the plugin's capabilities claim, then removes all it made.
Point it at a driver and a backend where that is acceptable.

With --record PLUGIN the report is then kept by `berth serve` as that configured plugin's
latest check, shown by `berth plugin status` and the console (plugin write access needed):
  berth plugin check unix:///run/csi/csi.sock --record hostpath
Exit status: 0 when no case failed, 1 when one did (or the report could not be recorded).")]
pub struct CheckArgs {
    /// The plugin's socket (Controller, and Node when one process serves both).
    #[arg(value_parser = Endpoint::parse)]
    pub endpoint: Endpoint,

    /// The node plugin's socket, when the driver runs as separate controller and node processes.
    #[arg(long, value_parser = Endpoint::parse)]
    pub node_endpoint: Option<Endpoint>,

    /// The node to publish to when no endpoint serves the Node service.
    #[arg(long)]
    pub node_id: Option<String>,

    /// Capacity to ask for the check's volume (e.g. 1GiB).
    #[arg(long, default_value = "1GiB", value_parser = berth::model::units::parse_size_flag)]
    pub size: usize,

    /// A CreateVolume parameter, KEY=VALUE; repeatable.
    #[arg(long = "parameter", value_parser = parse_key_value)]
    pub parameters: Vec<(String, String)>,

    /// A mutable parameter for ControllerModifyVolume, KEY=VALUE; repeatable.
    /// Without one, the modification cases are skipped: which parameters a
    /// driver can change is its own.
    #[arg(long = "mutable-parameter", value_parser = parse_key_value)]
    pub mutable_parameters: Vec<(String, String)>,

    /// A file of KEY=VALUE lines sent as CSI secrets (mode 0600; never printed).
    #[arg(long)]
    pub secrets: Option<PathBuf>,

    /// Check a raw block volume instead of a mounted file system.
    #[arg(long)]
    pub block: bool,

    /// File system for the mounted volume; empty leaves it to the plugin.
    #[arg(long, default_value = "")]
    pub fs_type: String,

    /// Where staging and target paths are made; the node plugin must see it at
    /// the same path.
    #[arg(long, default_value_os_t = std::env::temp_dir())]
    pub work_dir: PathBuf,

    /// Deadline for each CSI call (e.g. 30s, 2m).
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,

    /// How long to wait for the sockets to appear and accept connections.
    #[arg(long, default_value = "0", value_parser = humantime::parse_duration)]
    pub wait: Duration,

    /// Keep the report with `berth serve` as this configured plugin's latest
    /// check (its socket must answer for the same driver).
    #[arg(long, value_name = "PLUGIN")]
    pub record: Option<String>,

    #[command(flatten)]
    pub api: ApiArgs,
}

fn parse_key_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("{text:?} is not KEY=VALUE")),
    }
}

pub async fn run(args: CheckArgs, output: Output) -> anyhow::Result<ExitCode> {
    let options = ClientOptions {
        deadline: args.timeout,
        wait: args.wait,
    };
    let size_bytes = i64::try_from(args.size).map_err(|_| anyhow::anyhow!("--size is too large"))?;
    let secrets = match &args.secrets {
        Some(path) => read_secrets(path)?,
        None => HashMap::new(),
    };
    let endpoint = CsiClient::connect(args.endpoint, options).await?;
    let node_endpoint = match args.node_endpoint {
        Some(e) => Some(CsiClient::connect(e, options).await?),
        None => None,
    };
    let opts = CheckOptions {
        endpoint,
        node_endpoint,
        node_id: args.node_id,
        work_dir: args.work_dir,
        size_bytes,
        parameters: args.parameters.into_iter().collect(),
        mutable_parameters: args.mutable_parameters.into_iter().collect(),
        secrets,
        block: args.block,
        fs_type: args.fs_type,
    };
    let report = check::run(&opts)
        .await
        .map_err(|e| anyhow::anyhow!("making the work directory under {}: {e}", opts.work_dir.display()))?;
    match output {
        Output::Json => crate::output::print_json(&report)?,
        Output::Text => print(&report),
    }
    if let Some(plugin) = args.record {
        let kept = record(&args.api, plugin, &report).await?;
        if output == Output::Text {
            say!(
                "recorded as plugin {}'s latest check, by {}",
                kept.plugin,
                kept.recorded_by
            );
        }
    }
    Ok(if report.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Sends the report to `berth serve`, which keeps it as `plugin`'s latest.
async fn record(api: &ApiArgs, plugin: String, report: &Report) -> anyhow::Result<wire::PluginCheck> {
    let check = wire::PluginCheck {
        plugin,
        driver: report.plugin.clone(),
        vendor_version: report.vendor_version.clone(),
        cases: report
            .cases
            .iter()
            .map(|c| wire::PluginCheckCase {
                name: c.name.into(),
                rule: c.rule.into(),
                verdict: verdict_name(c.verdict).into(),
                reason: c.reason.clone(),
                must: c.must,
            })
            .collect(),
        ..Default::default()
    };
    let mut client = connect(api).await?;
    let kept = client
        .record_plugin_check(wire::RecordPluginCheckRequest { check: Some(check) })
        .await
        .map_err(grpc)
        .context("recording the report with berth serve")?;
    Ok(kept.into_inner())
}

fn verdict_name(v: Verdict) -> &'static str {
    match v {
        Verdict::Passed => "passed",
        Verdict::Failed => "failed",
        Verdict::Warning => "warning",
        Verdict::Skipped => "skipped",
    }
}

/// A secrets file, with the same rules as `serve`'s secrets directory.
fn read_secrets(path: &std::path::Path) -> anyhow::Result<HashMap<String, String>> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| anyhow::anyhow!("--secrets {} names no file", path.display()))?;
    let dir = path.parent().map(PathBuf::from).unwrap_or_default();
    let dir = if dir.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        dir
    };
    let map = berth::manager::secrets::Secrets::new(Some(dir)).get(name)?;
    Ok(map.into_inner())
}

fn print(report: &Report) {
    let name_width = report.cases.iter().map(|c| c.name.len()).max().unwrap_or(0);
    if !report.plugin.is_empty() {
        say!(
            "{} {} at {}",
            report.plugin,
            report.vendor_version,
            report.endpoint
        );
    }
    for case in &report.cases {
        let mark = match case.verdict {
            Verdict::Passed => "PASS",
            Verdict::Failed => "FAIL",
            Verdict::Warning => "WARN",
            Verdict::Skipped => "SKIP",
        };
        // Which rules are a MUST matters where one was not kept.
        let level = match case.verdict {
            Verdict::Failed if case.must => " (a MUST)",
            Verdict::Warning => " (the spec leaves room)",
            _ => "",
        };
        say!("{mark}  {:<name_width$}  {}{level}", case.name, case.rule);
        if !case.reason.is_empty() {
            say!("      {:<name_width$}  {}", "", case.reason);
        }
    }
    let warnings = match report.warnings {
        0 => String::new(),
        1 => ", 1 warning".to_string(),
        n => format!(", {n} warnings"),
    };
    say!(
        "{} passed, {} failed, {} skipped{warnings}",
        report.passed,
        report.failed,
        report.skipped
    );
}
