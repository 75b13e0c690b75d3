//! `berth status`: counts by state, outstanding work, the policy modules
//! in service with their counters, and (on etcd) the servers and their leader.

use std::collections::BTreeMap;
use std::process::ExitCode;

use berth_proto::berth::v1 as api;
use serde::Serialize;

use crate::client::{ApiArgs, connect, grpc};
use crate::output::{Output, say};

#[derive(Serialize)]
struct StatusView {
    volumes: u64,
    states: BTreeMap<String, u64>,
    busy: u64,
    retrying: u64,
    /// Volumes that cannot progress until something else happens.
    waiting: u64,
    policies: Vec<PolicyView>,
    /// Plugins that are unhealthy and nodes that are down, each in a line
    /// that says why.
    problems: Vec<String>,
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
    /// Calls that found an instance made ahead of need.
    made_ahead: u64,
    /// The module's bytes' `sha256:…`, as `volume explain` shows it.
    #[serde(skip_serializing_if = "String::is_empty")]
    digest: String,
    /// The trusted key's file whose signature it passed.
    #[serde(skip_serializing_if = "String::is_empty")]
    signed_by: String,
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
            made_ahead: p.made_ahead,
            digest: p.digest,
            signed_by: p.signed_by,
        })
        .collect()
}

pub fn print_policies(policies: &[PolicyView]) {
    if policies.is_empty() {
        say!("policies  built-in");
    }
    for p in policies {
        say!(
            "policy    {} ({}; on_error {}): {} calls, {} failed, {} fell back; {} in instances made ahead",
            p.module,
            p.decisions.join(", "),
            p.on_error,
            p.calls,
            p.failures,
            p.fallbacks,
            p.made_ahead
        );
        if !p.digest.is_empty() {
            say!("          module {}", p.digest);
        }
        if !p.signed_by.is_empty() {
            say!("          signed by {}", p.signed_by);
        }
    }
}

/// What is wrong with the plugins and nodes, one line each: a controller
/// or a node plugin that is unhealthy, a node that is down. Plugins not yet
/// fingerprinted and nodes forgotten on purpose are not problems.
fn problems(plugins: &api::PluginStatusResponse, nodes: &api::ListNodesResponse) -> Vec<String> {
    let mut problems = Vec::new();
    for p in &plugins.plugins {
        if p.controller_health == "unhealthy" {
            problems.push(format!(
                "plugin {}: controller unhealthy: {}",
                p.name, p.controller_reason
            ));
        }
    }
    for n in &nodes.nodes {
        if n.state == "down" {
            problems.push(format!("node {}: down (its agent is silent or gone)", n.name));
        }
        for p in n.plugins.iter().filter(|p| p.health == "unhealthy") {
            problems.push(format!(
                "node {}: plugin {} unhealthy: {}",
                n.name, p.plugin, p.reason
            ));
        }
    }
    problems
}

pub async fn status(api: ApiArgs, check: bool, output: Output) -> anyhow::Result<ExitCode> {
    let mut client = connect(&api).await?;
    let s = client
        .summary(api::SummaryRequest {})
        .await
        .map_err(grpc)?
        .into_inner();
    let plugins = client
        .plugin_status(api::PluginStatusRequest {})
        .await
        .map_err(grpc)?
        .into_inner();
    let nodes = client
        .list_nodes(api::ListNodesRequest {})
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
        problems: problems(&plugins, &nodes),
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
        Output::Json => crate::output::print_json(&view)?,
        Output::Text => {
            say!("volumes   {}", view.volumes);
            for (state, n) in &view.states {
                say!("  {state:<9} {n}");
            }
            say!("busy      {}", view.busy);
            say!("retrying  {}", view.retrying);
            say!("waiting   {}", view.waiting);
            print_policies(&view.policies);
            if view.problems.is_empty() {
                say!("problems  none");
            }
            for p in &view.problems {
                say!("problem   {p}");
            }
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
    Ok(if check && !view.problems.is_empty() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
