//! `berth agent`'s side of the network: dials the server's cluster endpoint
//! (a unix socket, or the TLS endpoint, joining first with a token) and
//! keeps one session, dialing again with a growing pause when it is lost.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use berth_proto::berth::v1::cluster_client::ClusterClient;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use crate::config::ServerAddress;
use crate::tls::{self, Credentials};
use crate::{Agent, SessionEnd};

const FIRST_PAUSE: Duration = Duration::from_millis(200);
const LONGEST_PAUSE: Duration = Duration::from_secs(10);
/// How long after losing a session the agent keeps dialing at the first pace.
const ELECTION_WINDOW: Duration = Duration::from_secs(30);

/// The channel to the server: on the TLS endpoint, with the agent's
/// certificate, joining first with the token when it has none.
async fn channel(
    agent: &Agent,
    server: &ServerAddress,
    token: Option<&str>,
    dir: &Path,
) -> Result<Channel, tonic::Status> {
    match server {
        ServerAddress::Unix(e) => Ok(berth_csi::unix_channel(e.path())),
        ServerAddress::Tls { host, port } => {
            let creds = match Credentials::load(dir)
                .map_err(|e| tonic::Status::failed_precondition(e.to_string()))?
            {
                Some(c) => c,
                None => {
                    let token = token.ok_or_else(|| {
                        tonic::Status::failed_precondition(
                            "this agent has not joined the cluster yet: give it a join token (`berth cluster token` on the server; `token` in agent.toml or --token)",
                        )
                    })?;
                    let creds = tls::join(host, *port, token, agent.name(), dir).await?;
                    tracing::info!(node = %agent.name(), %server, "joined the cluster");
                    creds
                }
            };
            tls::session_channel(host, *port, &creds)
                .map_err(|e| tonic::Status::failed_precondition(e.to_string()))
        }
    }
}

/// One attempt: dial (joining if needed) and follow the session to its end.
/// True in the second place when a session was under way.
async fn attempt(
    agent: &Arc<Agent>,
    server: &ServerAddress,
    token: Option<&str>,
    dir: &Path,
) -> (SessionEnd, bool) {
    let channel = match channel(agent, server, token, dir).await {
        Ok(c) => c,
        Err(status) => return (failed(server, &status), false),
    };
    let (up, up_rx) = crate::to_server();
    match ClusterClient::new(channel.clone())
        .attach(ReceiverStream::new(up_rx))
        .await
    {
        Ok(response) => {
            agent.leader.send_replace(Some(channel));
            let end = agent.session(up, response.into_inner()).await;
            agent.leader.send_replace(None);
            (end, true)
        }
        Err(status) => (failed(server, &status), false),
    }
}

/// A dial, join or attach that failed. Only the server's own refusal of
/// this node (a token or certificate it will not take) or this agent's own
/// setup (no token, credentials it cannot read or write) ends the agent:
/// anything else from one endpoint, a TLS or certificate error included
/// (a server mid-restart, one bad endpoint among good ones), is logged and
/// the next endpoint tried, with a growing pause.
fn failed(server: &ServerAddress, status: &tonic::Status) -> SessionEnd {
    match status.code() {
        tonic::Code::PermissionDenied | tonic::Code::Unauthenticated => {
            SessionEnd::Refused(status.message().to_string())
        }
        tonic::Code::FailedPrecondition | tonic::Code::InvalidArgument => {
            SessionEnd::Refused(berth_csi::error_chain(status))
        }
        _ => SessionEnd::Lost(format!("dialing {server}: {}", berth_csi::error_chain(status))),
    }
}

/// Runs until a server refuses the agent (the reason is returned). Of
/// several servers only the leader listens: a lost dial moves on to the
/// next at once, and the pause grows only when none answered.
pub async fn run(
    agent: Arc<Agent>,
    servers: Vec<ServerAddress>,
    token: Option<String>,
    dir: PathBuf,
) -> String {
    let mut pause = FIRST_PAUSE;
    let mut next = 0;
    let mut failed_in_a_row = 0;
    // Just after a session ends, a new leader may be moments away: the
    // pause grows only once that window has passed.
    let mut lost_at = tokio::time::Instant::now();
    loop {
        let server = &servers[next % servers.len()];
        let (end, had_session) = attempt(&agent, server, token.as_deref(), &dir).await;
        if had_session {
            pause = FIRST_PAUSE;
            failed_in_a_row = 0;
            lost_at = tokio::time::Instant::now();
        } else {
            failed_in_a_row += 1;
        }
        match end {
            SessionEnd::Refused(why) => return why,
            SessionEnd::Lost(why) => {
                tracing::warn!(node = %agent.name(), %why, retry_in = %humantime::format_duration(pause), "no session with the server");
            }
        }
        // The session ended (the leader may have gone) or the dial failed:
        // the next server is tried first.
        next += 1;
        if failed_in_a_row > 0 && failed_in_a_row % servers.len() == 0 {
            tokio::time::sleep(pause).await;
            if lost_at.elapsed() > ELECTION_WINDOW {
                pause = (pause * 2).min(LONGEST_PAUSE);
            }
        }
    }
}
