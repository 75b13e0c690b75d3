//! `berth status`: counts by state and outstanding work.

use std::collections::BTreeMap;
use std::process::ExitCode;

use berth_proto::berth::v1 as api;
use serde::Serialize;

use super::Output;
use super::client::{ApiArgs, connect, grpc};

#[derive(Serialize)]
struct StatusView {
    volumes: u64,
    states: BTreeMap<String, u64>,
    busy: u64,
    retrying: u64,
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
    };
    match output {
        Output::Json => super::print_json(&view)?,
        Output::Text => {
            println!("volumes   {}", view.volumes);
            for (state, n) in &view.states {
                println!("  {state:<9} {n}");
            }
            println!("busy      {}", view.busy);
            println!("retrying  {}", view.retrying);
        }
    }
    Ok(ExitCode::SUCCESS)
}
