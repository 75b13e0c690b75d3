//! Node operations and calls: each sent down the node's session and
//! settled by the agent's report (or answered by its answer), with a
//! timeout; what waits fails when the session goes.

use berth_proto::berth::v1 as wire;
use berth_proto::berth::v1::server_message::Message as Down;
use tokio::sync::{mpsc, oneshot};

use super::{Directory, Node, down, lock};
use berth_agent::failures::failure_from_wire;
use berth_csi::{CsiError, Failure};
use berth_model::NodeLevel as Level;

pub(super) struct Waiter {
    attempt: u64,
    level: Level,
    /// Waiting for the level to rise to `level` (or fall to it).
    raise: bool,
    reply: oneshot::Sender<Result<(), CsiError>>,
}

/// Sends on the node's session if it has had its complete set. A session
/// whose agent lets its queue fill is told to end (its task lets go of the
/// link, counted), and what waited on it fails.
pub(super) fn send_synced(n: &mut Node, node: &str, message: wire::ServerMessage) -> bool {
    let Some(link) = n.link.as_ref().filter(|l| l.synced) else {
        return false;
    };
    match link.to_agent.try_send(message) {
        Ok(()) => true,
        Err(mpsc::error::TrySendError::Closed(_)) => false,
        Err(mpsc::error::TrySendError::Full(_)) => {
            tracing::warn!(%node, queued = super::DOWN_QUEUE, "agent is not reading its session; session closed");
            link.closed.notify_one();
            fail_waiting(n, node, "the agent is not reading its session");
            false
        }
    }
}

pub(super) fn no_such_node(node: &str, plugin: &str, call: &'static str) -> CsiError {
    unreachable(node, plugin, call, format!("no node named {node:?}"))
}

pub(super) fn not_connected(node: &str, plugin: &str, call: &'static str) -> CsiError {
    unreachable(
        node,
        plugin,
        call,
        format!("node {node:?}'s agent is not connected"),
    )
}

pub(super) fn unreachable(node: &str, plugin: &str, call: &'static str, why: String) -> CsiError {
    CsiError {
        plugin: format!("{plugin}@{node}"),
        call,
        failure: Failure::Unreachable(why),
    }
}

impl Directory {
    /// An outcome: answers every waiter it settles.
    pub(crate) fn report(&self, node: &str, r: wire::Report) {
        let Some(entry) = self.get(node) else { return };
        let mut n = lock(&entry);
        let Some(waiters) = n.waiters.remove(&r.berth_id) else {
            return;
        };
        let level = Level::from_wire(r.level);
        let mut left = Vec::new();
        for w in waiters {
            let settled = if w.raise {
                level >= w.level
            } else {
                level <= w.level
            };
            if settled {
                let _ = w.reply.send(Ok(()));
            } else if let Some(f) = r.failure.clone().filter(|_| r.attempt >= w.attempt) {
                let _ = w.reply.send(Err(failure_from_wire(format!("agent {node}"), f)));
            } else {
                left.push(w);
            }
        }
        if !left.is_empty() {
            n.waiters.insert(r.berth_id, left);
        }
    }

    pub(crate) fn answer(&self, node: &str, a: wire::Answer) {
        if let Some(entry) = self.get(node)
            && let Some(reply) = lock(&entry).calls.remove(&a.id)
            && let Some(answer) = a.answer
        {
            let _ = reply.send(answer);
        }
    }

    /// Sends one operation and waits for the outcome that settles it.
    pub(crate) async fn operate(
        &self,
        node: &str,
        call: &'static str,
        mut op: wire::Operation,
        level: Level,
        raise: bool,
    ) -> Result<(), CsiError> {
        let plugin = op.plugin.clone();
        let rx = {
            let entry = self.get(node).ok_or_else(|| no_such_node(node, &plugin, call))?;
            let mut n = lock(&entry);
            n.attempt += 1;
            n.version += 1;
            (op.attempt, op.version) = (n.attempt, n.version);
            let berth_id = op.berth_id.clone();
            if !send_synced(&mut n, node, down(Down::Operation(op))) {
                return Err(not_connected(node, &plugin, call));
            }
            let (reply, rx) = oneshot::channel();
            let attempt = n.attempt;
            n.waiters.entry(berth_id).or_default().push(Waiter {
                attempt,
                level,
                raise,
                reply,
            });
            rx
        };
        self.answered(rx, node, &plugin, call).await?
    }

    pub(crate) async fn ask(
        &self,
        node: &str,
        plugin: &str,
        call: &'static str,
        c: wire::call::Call,
    ) -> Result<wire::answer::Answer, CsiError> {
        let rx = {
            let entry = self.get(node).ok_or_else(|| no_such_node(node, plugin, call))?;
            let mut n = lock(&entry);
            n.next_call += 1;
            let id = n.next_call;
            let message = down(Down::Call(wire::Call {
                id,
                plugin: plugin.to_string(),
                call: Some(c),
            }));
            if !send_synced(&mut n, node, message) {
                return Err(not_connected(node, plugin, call));
            }
            let (reply, rx) = oneshot::channel();
            n.calls.insert(id, reply);
            rx
        };
        match self.answered(rx, node, plugin, call).await? {
            wire::answer::Answer::Failure(f) => Err(failure_from_wire(format!("agent {node}"), f)),
            answer => Ok(answer),
        }
    }

    /// The agent's answer, or why there is none: its session ended, or
    /// the operation timeout passed.
    async fn answered<T>(
        &self,
        rx: oneshot::Receiver<T>,
        node: &str,
        plugin: &str,
        call: &'static str,
    ) -> Result<T, CsiError> {
        match tokio::time::timeout(self.operation_timeout, rx).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) => Err(unreachable(
                node,
                plugin,
                call,
                "the agent's session ended".into(),
            )),
            Err(_) => Err(CsiError {
                plugin: format!("{plugin}@{node}"),
                call,
                failure: Failure::Deadline(self.operation_timeout),
            }),
        }
    }
}

pub(super) fn fail_waiting(n: &mut Node, node: &str, why: &str) {
    for (_, waiters) in n.waiters.drain() {
        for w in waiters {
            let _ = w
                .reply
                .send(Err(unreachable(node, "agent", "node step", why.to_string())));
        }
    }
    n.calls.clear();
}
