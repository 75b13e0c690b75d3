//! `berth policy apply`, `status`, `promote` and `rollback`: the cluster's
//! policy set, stored with a version and its history, every module pinned by digest.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use berth_proto::berth::v1 as api;
use serde::Serialize;

use crate::client::{ApiArgs, connect, grpc};
use crate::commands::status::{PolicyView, policy_views, print_policies};
use crate::output::{Output, say};

#[derive(Serialize)]
struct SetView {
    /// 0: no set stored.
    version: u64,
    applied_ms: u64,
    applied_by: String,
    /// Each module as stored: pinned by digest.
    modules: Vec<ModuleView>,
    policies: Vec<PolicyView>,
    /// With several servers: the set each one has prepared, or why it cannot.
    servers: Vec<ServerView>,
    /// How this version came to be: apply, promote, rollback (and why).
    #[serde(skip_serializing_if = "String::is_empty")]
    change: String,
    /// After a promotion: the decisions the guard watches.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    promoted: Vec<String>,
    /// The versions kept before this one, newest last.
    history: Vec<PriorView>,
}

#[derive(Serialize)]
struct PriorView {
    version: u64,
    applied_ms: u64,
    applied_by: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    change: String,
}

#[derive(Serialize)]
struct ServerView {
    name: String,
    leader: bool,
    /// The version prepared; 0: none reported yet.
    prepared: u64,
    #[serde(skip_serializing_if = "String::is_empty")]
    error: String,
}

#[derive(Serialize)]
struct ModuleView {
    module: String,
    /// The name the set gives it (none: its file's or repository's).
    name: String,
    /// `live`, or `shadow`: deciding beside the live module, never used.
    mode: &'static str,
    /// The decisions it serves or shadows (none named: all it exports).
    decisions: Vec<String>,
    /// A module file's SHA-256 (a registry module's digest is in its reference).
    #[serde(skip_serializing_if = "Option::is_none")]
    digest: Option<String>,
}

fn view(set: api::PolicySet) -> SetView {
    let tables = berth::config::policy_set::SetDraft::parse(&set.text, std::path::Path::new("/"))
        .map(|d| d.tables)
        .unwrap_or_default();
    SetView {
        version: set.version,
        applied_ms: set.applied_ms,
        applied_by: set.applied_by,
        modules: tables
            .into_iter()
            .map(|t| ModuleView {
                name: t.name().map_or_else(
                    || berth::config::policy_set::default_name(&t.module),
                    str::to_string,
                ),
                mode: if t.mode.is_live() { "live" } else { "shadow" },
                decisions: t.decisions().to_vec(),
                module: t.module,
                digest: t.digest,
            })
            .collect(),
        policies: policy_views(set.policies),
        servers: set
            .servers
            .into_iter()
            .map(|s| ServerView {
                name: s.name,
                leader: s.leader,
                prepared: s.policy_set,
                error: s.policy_error,
            })
            .collect(),
        change: set.change,
        promoted: set.promoted,
        history: set
            .history
            .into_iter()
            .map(|p| PriorView {
                version: p.version,
                applied_ms: p.applied_ms,
                applied_by: p.applied_by,
                change: p.change,
            })
            .collect(),
    }
}

fn print(v: &SetView, output: Output) -> anyhow::Result<()> {
    match output {
        Output::Json => crate::output::print_json(v)?,
        Output::Text => {
            if v.version == 0 {
                say!("no policy set stored: the built-in policies decide");
            } else {
                let at = humantime::format_rfc3339_seconds(
                    std::time::UNIX_EPOCH + std::time::Duration::from_millis(v.applied_ms),
                );
                say!("{:<10}{} (applied {at} by {})", "set", v.version, v.applied_by);
                if !v.change.is_empty() {
                    say!("{:<10}{}", "change", v.change);
                }
                if let Some(p) = v.history.last() {
                    let kept: Vec<String> = v.history.iter().map(|p| p.version.to_string()).collect();
                    say!(
                        "{:<10}{} before it ({}); kept for rollback: {}",
                        "history",
                        p.version,
                        if p.change.is_empty() { "apply" } else { &p.change },
                        kept.join(", ")
                    );
                }
            }
            for m in &v.modules {
                let serves = match (m.mode, m.decisions.is_empty()) {
                    ("shadow", true) => "SHADOW of every decision it exports".to_string(),
                    ("shadow", false) => format!("SHADOW of {}", m.decisions.join(", ")),
                    (_, true) => "live".to_string(),
                    (_, false) => format!("live: {}", m.decisions.join(", ")),
                };
                let pinned = m.digest.as_ref().map_or(String::new(), |d| format!(" ({d})"));
                say!("{:<10}{} [{serves}] {}{pinned}", "module", m.name, m.module);
            }
            print_policies(&v.policies);
            for s in &v.servers {
                let role = if s.leader { " (leader)" } else { "" };
                match (s.prepared, s.error.as_str()) {
                    (_, e) if !e.is_empty() => {
                        say!("{:<10}{}{role}: cannot prepare the set: {e}", "server", s.name)
                    }
                    (0, _) => say!("{:<10}{}{role}: nothing prepared yet", "server", s.name),
                    (n, _) => say!("{:<10}{}{role}: set {n} prepared", "server", s.name),
                }
            }
        }
    }
    Ok(())
}

/// `berth policy apply FILE`.
pub async fn apply(file: PathBuf, api: ApiArgs, output: Output) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    let base = std::fs::canonicalize(&file)
        .with_context(|| format!("reading {}", file.display()))?
        .parent()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/"));
    let mut client = connect(&api).await?;
    let set = client
        .apply_policy_set(api::ApplyPolicySetRequest {
            text,
            base_dir: base.display().to_string(),
        })
        .await
        .map_err(grpc)?
        .into_inner();
    print(&view(set), output)?;
    Ok(ExitCode::SUCCESS)
}

/// `berth policy status`.
pub async fn status(api: ApiArgs, output: Output) -> anyhow::Result<ExitCode> {
    let mut client = connect(&api).await?;
    let set = client
        .get_policy_set(api::GetPolicySetRequest {})
        .await
        .map_err(grpc)?
        .into_inner();
    print(&view(set), output)?;
    Ok(ExitCode::SUCCESS)
}

/// `berth policy promote`.
pub async fn promote(
    decision: Option<berth::policy::Decision>,
    api: ApiArgs,
    output: Output,
) -> anyhow::Result<ExitCode> {
    let mut client = connect(&api).await?;
    let set = client
        .promote_policy(api::PromotePolicyRequest {
            decision: decision.map(|d| d.to_string()).unwrap_or_default(),
        })
        .await
        .map_err(grpc)?
        .into_inner();
    print(&view(set), output)?;
    Ok(ExitCode::SUCCESS)
}

/// `berth policy rollback`.
pub async fn rollback(to: Option<u64>, api: ApiArgs, output: Output) -> anyhow::Result<ExitCode> {
    let mut client = connect(&api).await?;
    let set = client
        .rollback_policy(api::RollbackPolicyRequest {
            version: to.unwrap_or(0),
        })
        .await
        .map_err(grpc)?
        .into_inner();
    print(&view(set), output)?;
    Ok(ExitCode::SUCCESS)
}

/// `berth policy shadow MODULE --decision D`: the set in service, with
/// `module` shadowing the decisions, applied as the next version.
pub async fn shadow(args: crate::commands::policy::ShadowArgs, output: Output) -> anyhow::Result<ExitCode> {
    let module = if args.module.starts_with("oci://") {
        args.module.clone()
    } else {
        std::fs::canonicalize(&args.module)
            .with_context(|| format!("reading {}", args.module))?
            .display()
            .to_string()
    };
    let mut client = connect(&args.api).await?;
    let current = client
        .get_policy_set(api::GetPolicySetRequest {})
        .await
        .map_err(grpc)?
        .into_inner();
    let draft = berth::config::policy_set::SetDraft::parse(&current.text, std::path::Path::new("/"))?
        .with_shadow(
            module,
            args.name,
            &args.decisions,
            args.settings.into_iter().collect(),
        );
    let set = client
        .apply_policy_set(api::ApplyPolicySetRequest {
            text: draft.text(),
            base_dir: "/".into(),
        })
        .await
        .map_err(grpc)?
        .into_inner();
    print(&view(set), output)?;
    Ok(ExitCode::SUCCESS)
}
