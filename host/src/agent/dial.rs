//! `berth agent`'s side of the network: dials the server's cluster endpoint
//! and keeps one session, dialing again with a growing pause when it is lost.

use std::sync::Arc;
use std::time::Duration;

use berth_proto::berth::v1::cluster_client::ClusterClient;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;

use super::{Agent, SessionEnd};
use crate::csi::Endpoint;

const FIRST_PAUSE: Duration = Duration::from_millis(200);
const LONGEST_PAUSE: Duration = Duration::from_secs(10);

/// Runs until the server refuses the agent (the reason is returned).
pub async fn run(agent: Arc<Agent>, server: Endpoint) -> String {
    let mut pause = FIRST_PAUSE;
    loop {
        let (up, up_rx) = mpsc::unbounded_channel();
        let mut client = ClusterClient::new(crate::csi::unix_channel(server.path()));
        let end = match client.attach(UnboundedReceiverStream::new(up_rx)).await {
            Ok(response) => {
                pause = FIRST_PAUSE;
                agent.session(up, response.into_inner()).await
            }
            Err(status)
                if matches!(
                    status.code(),
                    tonic::Code::PermissionDenied | tonic::Code::Unauthenticated
                ) =>
            {
                SessionEnd::Refused(status.message().to_string())
            }
            Err(status) => SessionEnd::Lost(format!("dialing {server}: {}", status.message())),
        };
        match end {
            SessionEnd::Refused(why) => return why,
            SessionEnd::Lost(why) => {
                tracing::warn!(node = %agent.name(), %why, retry_in = %humantime::format_duration(pause), "no session with the server");
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}
