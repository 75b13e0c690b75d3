//! `berth volume list`: the volumes by name, asked for a page at a time and
//! printed as each page comes, so that neither an answer nor the CLI holds
//! every volume of a large store at once.

use berth_proto::berth::v1 as api;
use clap::Args;

use crate::client::grpc;
use crate::commands::volume::view::{one_line, view};
use crate::output::{Output, out, out_raw, say};

#[derive(Debug, Args)]
pub struct ListArgs {
    /// How many volumes each answer of the API holds at most.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub page_size: u32,
    /// Only the volumes whose name contains this text (any case).
    #[arg(long, value_name = "TEXT")]
    pub name_contains: Option<String>,
    /// Only the volumes in this state.
    #[arg(long, value_parser = ["pending", "creating", "available", "published", "deleting", "failed"])]
    pub state: Option<String>,
    /// Only the volumes of this plugin.
    #[arg(long)]
    pub plugin: Option<String>,
    /// Only the volumes with a publication on this node.
    #[arg(long)]
    pub node: Option<String>,
    /// Only the volumes with this label: KEY=VALUE, or KEY for any value.
    #[arg(long, value_name = "KEY[=VALUE]")]
    pub label: Option<String>,
}

pub async fn list(client: &mut crate::client::Client, args: &ListArgs, output: Output) -> anyhow::Result<()> {
    let mut token = String::new();
    let mut printed = 0usize;
    if output == Output::Text {
        say!("{:<24} {:<10} {:<34} PUBLICATIONS", "NAME", "STATE", "VOLUME ID");
    }
    loop {
        let page = client
            .list_volumes(api::ListVolumesRequest {
                max_entries: args.page_size,
                starting_token: token,
                name_contains: args.name_contains.clone().unwrap_or_default(),
                state: args.state.clone().unwrap_or_default(),
                plugin: args.plugin.clone().unwrap_or_default(),
                node: args.node.clone().unwrap_or_default(),
                label: args.label.clone().unwrap_or_default(),
            })
            .await
            .map_err(grpc)?
            .into_inner();
        for v in &page.volumes {
            match output {
                // The same document as one pretty array: each element
                // indented by two, separated by commas.
                Output::Json => {
                    let element = serde_json::to_string_pretty(&view(v))?;
                    let indented: Vec<String> = element.lines().map(|l| format!("  {l}")).collect();
                    let open = if printed == 0 { "[\n" } else { ",\n" };
                    out_raw(&format!("{open}{}", indented.join("\n")));
                }
                Output::Text => say!("{}", one_line(v)),
            }
            printed += 1;
        }
        if page.next_token.is_empty() {
            break;
        }
        token = page.next_token;
    }
    if output == Output::Json {
        out(if printed == 0 { "[]" } else { "\n]" });
    }
    Ok(())
}
