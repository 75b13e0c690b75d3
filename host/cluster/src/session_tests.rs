//! Session liveness in paused time: the server's side of a session driven
//! by hand-made agent messages over in-memory streams, against the real
//! directory, so heartbeats, silence and replacement take no wall-clock
//! time at all.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use berth_proto::berth::v1 as wire;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use wire::agent_message::Message as Up;
use wire::server_message::Message as Down;

use crate::directory::Directory;
use crate::directory::to_agent;
use crate::session::serve_session;
use berth_manager::nodes::{NodeAgent, NodeState, NodeSync};
use berth_store::NodeRecord;

/// The manager's side, reduced to what a session asks of it.
#[derive(Default)]
struct Sync {
    ready: Mutex<Vec<String>>,
}

#[tonic::async_trait]
impl NodeSync for Sync {
    async fn desired_set(&self, _node: &str, _held: &[wire::Held]) -> Vec<wire::Desired> {
        Vec::new()
    }
    fn node_ready(&self, node: &str) {
        self.ready.lock().unwrap().push(node.to_string());
    }
    async fn remember(&self, _node: NodeRecord) {}
}

const TIMEOUT: Duration = Duration::from_secs(3);

fn directory() -> (Arc<Directory>, Arc<Sync>) {
    let d = Directory::new(TIMEOUT, Duration::from_secs(5), Default::default());
    let sync = Arc::new(Sync::default());
    let weak: std::sync::Weak<dyn NodeSync> = Arc::downgrade(&sync) as std::sync::Weak<Sync>;
    d.set_sync(weak);
    (d, sync)
}

/// The agent's ends of a session, driven by the test.
struct AgentEnd {
    up: mpsc::Sender<Result<wire::AgentMessage, tonic::Status>>,
    down: mpsc::Receiver<wire::ServerMessage>,
    session: tokio::task::JoinHandle<()>,
}

/// Opens a session for `node` and registers it.
async fn attach(directory: &Arc<Directory>, node: &str) -> AgentEnd {
    let (up, up_rx) = mpsc::channel(16);
    let (to, down) = to_agent();
    let session = tokio::spawn(serve_session(
        directory.clone(),
        ReceiverStream::new(up_rx),
        to,
        |_| Ok(()),
    ));
    up.send(Ok(wire::AgentMessage {
        message: Some(Up::Register(wire::Register {
            node: node.into(),
            staging_dir: "/var/lib/berth/staging".into(),
            publish_dir: "/var/lib/berth/publish".into(),
            ..Default::default()
        })),
    }))
    .await
    .unwrap();
    AgentEnd { up, down, session }
}

impl AgentEnd {
    async fn beat(&self) {
        let beat = wire::AgentMessage {
            message: Some(Up::Heartbeat(wire::Heartbeat { sent_unix_ms: 0 })),
        };
        self.up.send(Ok(beat)).await.unwrap();
    }

    /// The next message the server sent that is not a heartbeat's echo.
    async fn next(&mut self) -> Option<Down> {
        while let Some(m) = self.down.recv().await {
            match m.message {
                Some(Down::Heartbeat(_)) => continue,
                other => return other,
            }
        }
        None
    }
}

fn state(d: &Directory, node: &str) -> Option<NodeState> {
    NodeAgent::node(d, node).map(|n| n.state)
}

#[tokio::test(start_paused = true)]
async fn a_node_is_ready_while_it_beats_and_down_once_silent_past_the_timeout() {
    let (d, sync) = directory();
    let mut agent = attach(&d, "node-a").await;
    assert!(matches!(agent.next().await, Some(Down::Desired(_))));
    assert_eq!(state(&d, "node-a"), Some(NodeState::Ready));
    assert_eq!(sync.ready.lock().unwrap().as_slice(), ["node-a"]);
    // Beating every second for a minute keeps it ready.
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        agent.beat().await;
        tokio::task::yield_now().await;
        assert_eq!(state(&d, "node-a"), Some(NodeState::Ready));
    }
    // Silent: down once the timeout passes, and the session is closed.
    tokio::time::sleep(TIMEOUT + Duration::from_millis(10)).await;
    assert_eq!(state(&d, "node-a"), Some(NodeState::Down));
    tokio::time::timeout(Duration::from_secs(1), &mut agent.session)
        .await
        .expect("the silent session ended")
        .unwrap();
    assert!(!d.connected("node-a"));
}

#[tokio::test(start_paused = true)]
async fn a_newer_session_closes_the_older_with_a_refusal_and_the_node_stays_ready() {
    let (d, _sync) = directory();
    let mut first = attach(&d, "node-a").await;
    let m = first.next().await;
    assert!(matches!(m, Some(Down::Desired(_))), "{m:?}");
    let mut second = attach(&d, "node-a").await;
    assert!(matches!(second.next().await, Some(Down::Desired(_))));
    match first.next().await {
        Some(Down::Refusal(r)) => assert!(r.reason.contains("replaced this one"), "{}", r.reason),
        other => panic!("the older session was not refused: {other:?}"),
    }
    tokio::time::timeout(Duration::from_secs(1), &mut first.session)
        .await
        .expect("the older session ended")
        .unwrap();
    // The older one's end leaves the newer one connected and ready.
    assert!(d.connected("node-a"));
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        second.beat().await;
    }
    tokio::task::yield_now().await;
    assert_eq!(state(&d, "node-a"), Some(NodeState::Ready));
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_never_registers_is_refused_after_ten_seconds() {
    let (d, _sync) = directory();
    let (_up, up_rx) = mpsc::channel::<Result<wire::AgentMessage, tonic::Status>>(1);
    let (to, mut down) = to_agent();
    let session = tokio::spawn(serve_session(d.clone(), ReceiverStream::new(up_rx), to, |_| {
        Ok(())
    }));
    tokio::time::sleep(Duration::from_secs(11)).await;
    session.await.unwrap();
    match down.recv().await.and_then(|m| m.message) {
        Some(Down::Refusal(r)) => assert!(r.reason.contains("no registration"), "{}", r.reason),
        other => panic!("{other:?}"),
    }
}

/// The certificate index answers as the nodes' own records would: a
/// remembered certificate is found, a replaced or removed one never is.
#[test]
fn a_certificate_finds_its_node_until_it_is_replaced_or_the_node_removed() {
    let (d, _sync) = directory();
    d.expect(NodeRecord {
        name: "node-a".into(),
        labels: Default::default(),
        plugins: Default::default(),
        draining: false,
        forgotten: false,
        cert: Some("fp-a1".into()),
        paths: None,
    });
    assert_eq!(d.node_for_cert("fp-a1").as_deref(), Some("node-a"));
    assert_eq!(d.node_for_cert("fp-b1"), None);
    d.joined("node-b", "fp-b1".into()).unwrap();
    assert_eq!(d.node_for_cert("fp-b1").as_deref(), Some("node-b"));
    // A replacing join revokes the certificate before it.
    d.joined("node-a", "fp-a2".into()).unwrap();
    assert_eq!(d.node_for_cert("fp-a1"), None);
    assert_eq!(d.node_for_cert("fp-a2").as_deref(), Some("node-a"));
    d.remove("node-a");
    assert_eq!(d.node_for_cert("fp-a2"), None);
    assert_eq!(d.node_for_cert("fp-b1").as_deref(), Some("node-b"));
}

/// Six agents against a server taking two heartbeats a second, whose agents
/// beat every second: past two agents, each is asked to beat less often, and
/// the server waits three of those beats, not its configured timeout.
#[tokio::test(start_paused = true)]
async fn a_fleet_past_its_heartbeat_budget_is_asked_to_beat_slower_and_waited_for() {
    let (d, _sync) = directory();
    d.pace.set(2, Duration::from_secs(1));
    let mut agents = Vec::new();
    let mut asked: Vec<Option<u64>> = Vec::new();
    for i in 0..6 {
        let mut a = attach(&d, &format!("node-{i}")).await;
        let mut last = None;
        loop {
            match a.next().await {
                Some(Down::Terms(t)) => last = Some(t.heartbeat_interval_ms),
                Some(Down::Desired(_)) => break,
                other => panic!("{other:?}"),
            }
        }
        agents.push(a);
        asked.push(last);
    }
    tokio::task::yield_now().await;
    for (a, last) in agents.iter_mut().zip(&mut asked) {
        while let Ok(m) = a.down.try_recv() {
            if let Some(Down::Terms(t)) = m.message {
                *last = Some(t.heartbeat_interval_ms);
            }
        }
    }
    assert_eq!(
        asked,
        vec![Some(2500); 6],
        "5 sessions at 2 a second: every 2.5 s"
    );
    assert_eq!(d.session_timeout(), Duration::from_millis(7500));
    // Beating every 5 s, past the configured 3 s, every node stays ready.
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_secs(5)).await;
        for a in &agents {
            a.beat().await;
        }
        tokio::task::yield_now().await;
        assert_eq!(state(&d, "node-0"), Some(NodeState::Ready));
    }
    // Silent past three of the beats asked for: down.
    tokio::time::sleep(Duration::from_millis(7600)).await;
    assert_eq!(state(&d, "node-0"), Some(NodeState::Down));
}
