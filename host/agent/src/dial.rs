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
/// Just after a session is lost, a new leader may be moments away: the
/// pause grows to this much only, for this long.
const ELECTION_PAUSE: Duration = Duration::from_secs(2);
const ELECTION_WINDOW: Duration = Duration::from_secs(30);
/// How long a server has to answer an attach.
const ATTACH_WITHIN: Duration = Duration::from_secs(10);
/// How often a failure that goes on is said again (with a count).
const SUMMARY_EVERY: Duration = Duration::from_secs(60);

/// When to dial again after a round of failed dials: a pause that doubles
/// from [`FIRST_PAUSE`] (to [`ELECTION_PAUSE`] in the window after a lost
/// session, else to [`LONGEST_PAUSE`]), each taken with jitter (half to all
/// of it), so agents that lost one server do not come back at one instant.
#[derive(Debug)]
struct Redial {
    pause: Duration,
    lost_at: Option<tokio::time::Instant>,
}

impl Redial {
    fn new() -> Redial {
        Redial {
            pause: FIRST_PAUSE,
            lost_at: None,
        }
    }

    /// A session was under way and ended: start over at the first pace.
    fn session_ended(&mut self) {
        self.pause = FIRST_PAUSE;
        self.lost_at = Some(tokio::time::Instant::now());
    }

    /// The pause before the next round; `fraction` in [0, 1) draws the jitter.
    fn next(&mut self, fraction: f64) -> Duration {
        let cap = match self.lost_at {
            Some(at) if at.elapsed() < ELECTION_WINDOW => ELECTION_PAUSE,
            _ => LONGEST_PAUSE,
        };
        let pause = self.pause.min(cap);
        self.pause = (pause * 2).min(cap.max(LONGEST_PAUSE));
        pause.mul_f64(0.5 + fraction.clamp(0.0, 1.0) / 2.0)
    }
}

/// What is said about failed dials: the first and every change of reason
/// at once, the same reason again only in a summary now and then.
#[derive(Default)]
struct Report {
    last: Option<String>,
    repeats: u64,
    said_at: Option<tokio::time::Instant>,
}

impl Report {
    /// Whether `why` is to be said now, and how many times it happened
    /// since it was last said.
    fn failed(&mut self, why: &str) -> Option<u64> {
        let now = tokio::time::Instant::now();
        let changed = self.last.as_deref() != Some(why);
        let due = self.said_at.is_none_or(|at| now - at >= SUMMARY_EVERY);
        self.repeats += 1;
        if !changed && !due {
            return None;
        }
        let times = std::mem::take(&mut self.repeats);
        self.last = Some(why.to_string());
        self.said_at = Some(now);
        Some(times)
    }

    /// A session started: failures since, if any, are over.
    fn connected(&mut self) -> u64 {
        let failures = self.repeats + u64::from(self.last.is_some());
        *self = Report::default();
        failures
    }
}

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
    report: &mut Report,
) -> (SessionEnd, bool) {
    let channel = match channel(agent, server, token, dir).await {
        Ok(c) => c,
        Err(status) => return (failed(server, &status), false),
    };
    let (up, up_rx) = crate::to_server();
    // A server that took the connection but does not answer (frozen) is
    // left after this long; once the session runs, its heartbeats tell.
    let attached = tokio::time::timeout(
        ATTACH_WITHIN,
        ClusterClient::new(channel.clone()).attach(ReceiverStream::new(up_rx)),
    )
    .await
    .unwrap_or_else(|_| {
        Err(tonic::Status::deadline_exceeded(
            "the server did not answer the attach",
        ))
    });
    match attached {
        Ok(response) => {
            let failures = report.connected();
            tracing::info!(node = %agent.name(), %server, failed_dials = failures, "session with the server");
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
    let mut redial = Redial::new();
    let mut report = Report::default();
    let mut next = 0;
    let mut failed_in_a_row = 0;
    loop {
        let server = &servers[next % servers.len()];
        let (end, had_session) = attempt(&agent, server, token.as_deref(), &dir, &mut report).await;
        if had_session {
            redial.session_ended();
            failed_in_a_row = 0;
        } else {
            failed_in_a_row += 1;
        }
        match end {
            SessionEnd::Refused(why) => return why,
            SessionEnd::Lost(why) if had_session => {
                tracing::warn!(node = %agent.name(), %why, "the session with the server ended; dialing again");
            }
            SessionEnd::Lost(why) => {
                if let Some(times) = report.failed(&why) {
                    match times {
                        0 | 1 => {
                            tracing::warn!(node = %agent.name(), %why, "no session with the server; dialing again with a growing pause")
                        }
                        n => {
                            tracing::warn!(node = %agent.name(), %why, failures = n, "still no session with the server")
                        }
                    }
                } else {
                    tracing::debug!(node = %agent.name(), %why, "no session with the server");
                }
            }
        }
        // The session ended (the leader may have gone) or the dial failed:
        // the next server is tried first.
        next += 1;
        if failed_in_a_row > 0 && failed_in_a_row % servers.len() == 0 {
            tokio::time::sleep(redial.next(rand::random::<f64>())).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn dials_back_off_with_jitter_to_a_cap() {
        let mut r = Redial::new();
        let full: Vec<u64> = (0..9).map(|_| r.next(1.0).as_millis() as u64).collect();
        assert_eq!(full, [200, 400, 800, 1600, 3200, 6400, 10_000, 10_000, 10_000]);
        let mut r = Redial::new();
        let half: Vec<u64> = (0..3).map(|_| r.next(0.0).as_millis() as u64).collect();
        assert_eq!(half, [100, 200, 400], "jitter takes half to all of the pause");
        // A minute of dialing a server that is down: a handful of rounds, not 300.
        let mut r = Redial::new();
        let (mut spent, mut rounds) = (Duration::ZERO, 0);
        while spent < Duration::from_secs(60) {
            spent += r.next(0.5);
            rounds += 1;
        }
        assert!(rounds <= 15, "{rounds} rounds in a minute");
    }

    #[tokio::test(start_paused = true)]
    async fn after_a_lost_session_the_pause_stays_short_while_a_leader_is_elected() {
        let mut r = Redial::new();
        for _ in 0..8 {
            r.next(1.0);
        }
        r.session_ended();
        let window: Vec<u64> = (0..5).map(|_| r.next(1.0).as_millis() as u64).collect();
        assert_eq!(window, [200, 400, 800, 1600, 2000]);
        tokio::time::advance(ELECTION_WINDOW).await;
        assert_eq!(r.next(1.0).as_millis(), 4000, "growing again after the window");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_that_goes_on_is_said_once_then_summed_up() {
        let mut report = Report::default();
        assert_eq!(report.failed("refused"), Some(1), "the first is said");
        let mut said = 0;
        for _ in 0..100 {
            tokio::time::advance(Duration::from_millis(500)).await;
            if report.failed("refused").is_some() {
                said += 1;
            }
        }
        assert_eq!(said, 0, "the same reason within a minute is not said again");
        tokio::time::advance(SUMMARY_EVERY).await;
        assert_eq!(
            report.failed("refused"),
            Some(101),
            "then a summary with the count"
        );
        assert_eq!(report.failed("no such host"), Some(1), "a change is said at once");
        assert_eq!(report.connected(), 1);
        assert_eq!(report.failed("refused"), Some(1), "a new outage starts over");
    }
}
