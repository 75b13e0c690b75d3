//! The `Cluster` service agents dial, and the in-process link that serves a
//! `[[node]]` through the same session code.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use berth_proto::berth::v1 as wire;
use berth_proto::berth::v1::cluster_server::Cluster;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::{Stream, StreamExt};

use super::directory::Directory;
use super::session::serve_session;
use crate::agent::{Agent, SessionEnd};

pub struct ClusterService {
    directory: Arc<Directory>,
}

impl ClusterService {
    pub fn new(directory: Arc<Directory>) -> Self {
        ClusterService { directory }
    }
}

type Downstream = Pin<Box<dyn Stream<Item = Result<wire::ServerMessage, tonic::Status>> + Send>>;

#[tonic::async_trait]
impl Cluster for ClusterService {
    type AttachStream = Downstream;

    async fn attach(
        &self,
        request: tonic::Request<tonic::Streaming<wire::AgentMessage>>,
    ) -> Result<tonic::Response<Downstream>, tonic::Status> {
        let from_agent = request.into_inner();
        let (to_agent, rx) = mpsc::unbounded_channel();
        let directory = self.directory.clone();
        tokio::spawn(serve_session(directory, from_agent, to_agent, |_| Ok(())));
        Ok(tonic::Response::new(Box::pin(
            UnboundedReceiverStream::new(rx).map(Ok),
        )))
    }
}

/// Serves an in-process agent for as long as the server runs: the same
/// session as over the network, on two channels.
pub fn link_in_process(directory: Arc<Directory>, agent: Arc<Agent>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let (up, up_rx) = mpsc::unbounded_channel();
            let (down, down_rx) = mpsc::unbounded_channel();
            let server = tokio::spawn(serve_session(
                directory.clone(),
                UnboundedReceiverStream::new(up_rx).map(Ok),
                down,
                |_| Ok(()),
            ));
            let end = agent
                .session(up, UnboundedReceiverStream::new(down_rx).map(Ok))
                .await;
            server.abort();
            match end {
                SessionEnd::Refused(why) => {
                    tracing::error!(node = %agent.name(), %why, "in-process agent refused");
                    return;
                }
                SessionEnd::Lost(why) => {
                    tracing::warn!(node = %agent.name(), %why, "in-process agent session lost; starting again");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    })
}
