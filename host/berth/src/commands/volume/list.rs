//! `berth volume list`: the volumes by name, asked for a page at a time and
//! printed as each page comes, so that neither an answer nor the CLI holds
//! every volume of a large store at once.

use berth_proto::berth::v1 as api;
use berth_proto::berth::v1::berth_client::BerthClient;
use clap::Args;
use tonic::transport::Channel;

use crate::client::grpc;
use crate::commands::volume::view::{one_line, view};
use crate::output::{Output, out, out_raw, say};

#[derive(Debug, Args)]
pub struct ListArgs {
    /// How many volumes each answer of the API holds at most.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub page_size: u32,
}

pub async fn list(client: &mut BerthClient<Channel>, args: &ListArgs, output: Output) -> anyhow::Result<()> {
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
