//! The server's side of one agent session: the registration, the complete
//! desired set, then reports, answers and heartbeats until the stream ends
//! or the agent is silent past the heartbeat timeout.

use std::sync::Arc;
use std::time::Duration;

use berth_proto::berth::v1 as wire;
use berth_proto::berth::v1::agent_message::Message as Up;
use berth_proto::berth::v1::server_message::Message as Down;
use tokio_stream::{Stream, StreamExt};

use crate::claims;
use crate::directory::{DOWN_QUEUE, Directory, NodeRefused, ToAgent};

/// How long a new stream has to register.
const REGISTER_WITHIN: Duration = Duration::from_secs(10);
fn refuse(to_agent: &ToAgent, reason: String) {
    tracing::warn!(%reason, "agent refused");
    let _ = to_agent.try_send(wire::ServerMessage {
        message: Some(Down::Refusal(wire::Refusal { reason })),
    });
}

/// Runs one session to its end. `allowed` checks the node name the agent
/// registers under (against its certificate, on the network).
pub async fn serve_session(
    directory: Arc<Directory>,
    mut from_agent: impl Stream<Item = Result<wire::AgentMessage, tonic::Status>> + Unpin,
    to_agent: ToAgent,
    allowed: impl Fn(&str) -> Result<(), NodeRefused>,
) {
    let mut register = match tokio::time::timeout(REGISTER_WITHIN, from_agent.next()).await {
        Ok(Some(Ok(wire::AgentMessage {
            message: Some(Up::Register(r)),
        }))) => r,
        Ok(Some(Ok(_))) => return refuse(&to_agent, "the first message must register the node".into()),
        Ok(_) => return,
        Err(_) => return refuse(&to_agent, "no registration within 10s".into()),
    };
    let node = register.node.clone();
    if let Err(why) = berth_model::bounds::name(&node)
        .map_err(NodeRefused::Name)
        .and_then(|()| allowed(&node))
        .and_then(|()| {
            claims::register(&register).map_err(|why| NodeRefused::Claims {
                node: node.clone(),
                why,
            })
        })
    {
        return refuse(&to_agent, why.to_string());
    }
    claims::cut_reasons(&mut register.plugins);
    let (session, replaced, remember) = match directory.attach(&register, to_agent.clone()) {
        Ok(attached) => attached,
        Err(why) => return refuse(&to_agent, why.to_string()),
    };
    tracing::info!(%node, plugins = register.plugins.len(), held = register.held.len(), "agent registered");
    let Some(sync) = directory.syncer() else {
        directory.detach(&node, session);
        return;
    };
    if let Some(record) = remember {
        sync.remember(record).await;
    }
    let set = sync.desired_set(&node, &register.held).await;
    if directory.send_set(&node, session, set) {
        sync.node_ready(&node);
    }
    directory.repace();
    let mut last = tokio::time::Instant::now();
    loop {
        // Measured from the last message with the timeout as it is now: a
        // fleet that grew meanwhile (slower beats asked for) is waited for longer.
        let deadline = last + directory.session_timeout();
        let next = tokio::select! {
            next = from_agent.next() => Some(next),
            () = tokio::time::sleep_until(deadline) => None,
            () = replaced.notified() => {
                // A newer session, the node removed, or an agent not reading:
                // the link is let go of here if the directory has not already.
                tracing::info!(%node, "the directory closed this session");
                directory.detach(&node, session);
                return;
            }
        };
        let message = match next {
            None if last.elapsed() < directory.session_timeout() => continue,
            None => {
                let timeout = directory.session_timeout();
                tracing::warn!(%node, timeout = %humantime::format_duration(timeout), "agent silent past the heartbeat timeout; session closed");
                break;
            }
            Some(None) => break,
            Some(Some(Err(status))) => {
                tracing::info!(%node, error = %status.message(), "agent stream failed");
                break;
            }
            Some(Some(Ok(m))) => m,
        };
        last = tokio::time::Instant::now();
        directory.heard(&node);
        match message.message {
            Some(Up::Heartbeat(h)) => {
                berth_metrics::heartbeat();
                let echo = wire::ServerMessage {
                    message: Some(Down::Heartbeat(h)),
                };
                if to_agent.try_send(echo).is_err() {
                    tracing::warn!(%node, queued = DOWN_QUEUE, "agent is not reading its session; session closed");
                    break;
                }
            }
            Some(Up::Report(mut r)) => {
                claims::cut_report(&mut r);
                directory.report(&node, r);
            }
            Some(Up::Answer(a)) => directory.answer(&node, a),
            Some(Up::Plugins(mut p)) => {
                if let Err(e) = claims::plugins(&p.plugins) {
                    refuse(&to_agent, format!("node {node:?} claims too much: {e}"));
                    break;
                }
                claims::cut_reasons(&mut p.plugins);
                directory.set_plugins(&node, &p.plugins);
                sync.node_ready(&node);
            }
            Some(Up::Register(_)) | None => {}
        }
    }
    directory.detach(&node, session);
    tracing::info!(%node, "agent session ended");
}
