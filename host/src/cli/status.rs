//! `berth status`: counts by state, outstanding work, the policy modules
//! in service with their counters, and (on etcd) the servers and their leader.

use std::collections::BTreeMap;
use std::process::ExitCode;

use berth_proto::berth::v1 as api;
use serde::Serialize;

use super::client::{ApiArgs, connect, grpc};
use super::{Output, say};

#[derive(Serialize)]
struct StatusView {
    volumes: u64,
    states: BTreeMap<String, u64>,
    busy: u64,
    retrying: u64,
    /// Volumes that cannot progress until something else happens.
    waiting: u64,
    policies: Vec<PolicyView>,
    /// With the etcd store: the servers sharing it, the leader first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    servers: Vec<ServerView>,
}

#[derive(Serialize)]
struct ServerView {
    name: String,
    api: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    cluster_address: String,
    leader: bool,
}

/// A policy module in service and its counters since it was loaded.
#[derive(Serialize)]
pub struct PolicyView {
    module: String,
    decisions: Vec<String>,
    on_error: String,
    calls: u64,
    failures: u64,
    fallbacks: u64,
    /// The module's bytes' `sha256:…`, as `volume explain` shows it.
    #[serde(skip_serializing_if = "String::is_empty")]
    digest: String,
}

pub fn policy_views(counters: Vec<api::PolicyCounters>) -> Vec<PolicyView> {
    counters
        .into_iter()
        .map(|p| PolicyView {
            module: p.module,
            decisions: p.decisions,
            on_error: p.on_error,
            calls: p.calls,
            failures: p.failures,
            fallbacks: p.fallbacks,
            digest: p.digest,
        })
        .collect()
}

pub fn print_policies(policies: &[PolicyView]) {
    if policies.is_empty() {
        say!("policies  built-in");
    }
    for p in policies {
        say!(
            "policy    {} ({}; on_error {}): {} calls, {} failed, {} fell back",
            p.module,
            p.decisions.join(", "),
            p.on_error,
            p.calls,
            p.failures,
            p.fallbacks
        );
        if !p.digest.is_empty() {
            say!("          module {}", p.digest);
        }
    }
}

pub async fn status(api: ApiArgs, output: Output) -> anyhow::Result<ExitCode> {
    let mut client = connect(&api.api).await?;
    let s = client
        .summary(api::SummaryRequest {})
        .await
        .map_err(grpc)?
        .into_inner();
    let view = StatusView {
        volumes: s.volumes,
        states: s.states.into_iter().collect(),
        busy: s.busy,
        retrying: s.retrying,
        waiting: s.waiting,
        policies: policy_views(s.policies),
        servers: s
            .servers
            .into_iter()
            .map(|m| ServerView {
                name: m.name,
                api: m.api,
                cluster_address: m.cluster_address,
                leader: m.leader,
            })
            .collect(),
    };
    match output {
        Output::Json => super::print_json(&view)?,
        Output::Text => {
            say!("volumes   {}", view.volumes);
            for (state, n) in &view.states {
                say!("  {state:<9} {n}");
            }
            say!("busy      {}", view.busy);
            say!("retrying  {}", view.retrying);
            say!("waiting   {}", view.waiting);
            print_policies(&view.policies);
            for m in &view.servers {
                let role = if m.leader { "leader" } else { "follower" };
                let at = match m.cluster_address.as_str() {
                    "" => m.api.clone(),
                    tls => format!("{}, {tls}", m.api),
                };
                say!("server    {} ({role}; {at})", m.name);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
