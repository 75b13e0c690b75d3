//! The workload: a few clients creating, publishing, moving, snapshotting,
//! expanding and deleting volumes through the API of any server, each
//! request repeated (every one is idempotent) until Berth answers it for
//! certain or 20 s pass. Everything asked and answered is kept in the
//! history the checker reads.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use berth_proto::berth::v1 as api;
use tonic::Code;

use crate::Rng;
pub use berth_tests::nemesis::{Op, Outcome, Record, Seen};

/// What the workload believes of one volume, from the answers it had.
#[derive(Clone, Debug, Default)]
struct Believed {
    mode: &'static str,
    nodes: BTreeSet<String>,
    bytes: i64,
    /// Snapshots taken so far (for names), and those that exist.
    taken: u32,
    snapshots: Vec<String>,
    busy: bool,
}

pub struct Workload {
    apis: Vec<PathBuf>,
    nodes: Vec<String>,
    started: Instant,
    pub history: Mutex<Vec<Record>>,
    volumes: Mutex<Vec<(String, Believed)>>,
    next: Mutex<u64>,
    rng: Mutex<Rng>,
}

const MODES: [&str; 3] = [
    "single-node-writer",
    "single-node-single-writer",
    "multi-node-multi-writer",
];
const LIVE_VOLUMES: usize = 10;
/// Volumes grow by 1 MiB at a time up to this.
const MAX_BYTES: i64 = 16 << 20;

/// Codes after which a request may have been carried out or not.
fn uncertain(code: Code) -> bool {
    matches!(
        code,
        Code::Unavailable | Code::DeadlineExceeded | Code::Unknown | Code::Cancelled | Code::Aborted
    )
}

impl Workload {
    pub fn new(apis: Vec<PathBuf>, nodes: Vec<String>, started: Instant, seed: u64) -> Arc<Workload> {
        Arc::new(Workload {
            apis,
            nodes,
            started,
            history: Mutex::new(Vec::new()),
            volumes: Mutex::new(Vec::new()),
            next: Mutex::new(0),
            rng: Mutex::new(Rng::new(seed ^ 0x5eed)),
        })
    }

    pub fn ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn below(&self, n: usize) -> usize {
        self.rng.lock().unwrap().below(n as u64) as usize
    }

    /// The next request: a volume no other client works on, and what to ask.
    fn choose(&self) -> (String, Op) {
        let mut volumes = self.volumes.lock().unwrap();
        let idle: Vec<usize> = (0..volumes.len()).filter(|i| !volumes[*i].1.busy).collect();
        if volumes.len() < LIVE_VOLUMES || idle.is_empty() {
            let mut next = self.next.lock().unwrap();
            *next += 1;
            let name = format!("v{next}");
            let mode = MODES[self.below(MODES.len())];
            let believed = Believed {
                mode,
                bytes: 1 << 20,
                busy: true,
                ..Default::default()
            };
            volumes.push((name.clone(), believed));
            return (name, Op::Create { mode });
        }
        let i = idle[self.below(idle.len())];
        let (name, b) = &mut volumes[i];
        b.busy = true;
        let node = self.nodes[self.below(self.nodes.len())].clone();
        let multi = b.mode.starts_with("multi");
        let op = match self.below(12) {
            0..=2 if b.nodes.is_empty() || (multi && !b.nodes.contains(&node)) => Op::Publish { node },
            // A move: off its node first, then (next time) onto another.
            0..=4 if !b.nodes.is_empty() => Op::Unpublish {
                node: b.nodes.iter().next().cloned().unwrap_or_default(),
            },
            5 if b.snapshots.len() < 2 => {
                b.taken += 1;
                Op::Snapshot {
                    snapshot: format!("{name}-s{}", b.taken),
                }
            }
            // A volume with snapshots is deleted once they are.
            5 | 7 if !b.snapshots.is_empty() => Op::DeleteSnapshot {
                snapshot: b.snapshots[0].clone(),
            },
            6 if b.bytes < MAX_BYTES => Op::Expand {
                bytes: b.bytes + (1 << 20),
            },
            7 => Op::Delete,
            // Reads, for the linearizability check.
            10 | 11 => Op::Get,
            _ if b.nodes.is_empty() => Op::Publish { node },
            _ => Op::Unpublish {
                node: b.nodes.iter().next().cloned().unwrap_or_default(),
            },
        };
        (name.clone(), op)
    }

    /// What the answer changes in the belief; an unknown outcome takes the
    /// volume out of the workload (its fate is the checker's to bound).
    fn believe(&self, name: &str, op: &Op, outcome: Outcome) {
        let mut volumes = self.volumes.lock().unwrap();
        let Some(i) = volumes.iter().position(|(n, _)| n == name) else {
            return;
        };
        let b = &mut volumes[i].1;
        b.busy = false;
        match (outcome, op) {
            (Outcome::Unknown, _) | (Outcome::Ok, Op::Delete) => {
                volumes.remove(i);
            }
            (Outcome::Refused(_), Op::Create { .. }) => {
                volumes.remove(i);
            }
            (Outcome::Ok, Op::Publish { node }) => {
                b.nodes.insert(node.clone());
            }
            (Outcome::Ok, Op::Unpublish { node }) => {
                b.nodes.remove(node);
            }
            (Outcome::Ok, Op::Expand { bytes }) => b.bytes = *bytes,
            (Outcome::Ok, Op::Snapshot { snapshot }) => b.snapshots.push(snapshot.clone()),
            (Outcome::Ok, Op::DeleteSnapshot { snapshot }) => b.snapshots.retain(|s| s != snapshot),
            _ => {}
        }
    }

    /// One attempt; a read's answer is what it saw.
    async fn send(&self, attempt: usize, name: &str, op: &Op) -> Result<Option<Seen>, tonic::Status> {
        let socket = &self.apis[attempt % self.apis.len()];
        let mut c = crate::client(socket);
        let name = name.to_string();
        let call = async move {
            match op.clone() {
                Op::Create { mode } => {
                    let spec = api::VolumeSpec {
                        name,
                        plugin: "hostpath".into(),
                        required_bytes: 1 << 20,
                        access_mode: mode.into(),
                        ..Default::default()
                    };
                    c.create_volume(api::CreateVolumeRequest { spec: Some(spec) })
                        .await
                        .map(|_| None)
                }
                Op::Publish { node } => c
                    .publish_volume(api::PublishVolumeRequest {
                        name,
                        node,
                        readonly: false,
                    })
                    .await
                    .map(|_| None),
                Op::Unpublish { node } => c
                    .unpublish_volume(api::UnpublishVolumeRequest { name, node })
                    .await
                    .map(|_| None),
                Op::Snapshot { snapshot } => c
                    .create_snapshot(api::CreateSnapshotRequest {
                        name: snapshot,
                        volume: name,
                    })
                    .await
                    .map(|_| None),
                Op::DeleteSnapshot { snapshot } => c
                    .delete_snapshot(api::DeleteSnapshotRequest { name: snapshot })
                    .await
                    .map(|_| None),
                Op::Expand { bytes } => c
                    .expand_volume(api::ExpandVolumeRequest {
                        name,
                        required_bytes: bytes,
                    })
                    .await
                    .map(|_| None),
                Op::Delete => c
                    .delete_volume(api::DeleteVolumeRequest { name, force: true })
                    .await
                    .map(|_| None),
                Op::Get => match c.get_volume(api::GetVolumeRequest { name }).await {
                    Ok(v) => Ok(Some(seen(&v.into_inner()))),
                    // A certain answer: no such volume.
                    Err(s) if s.code() == Code::NotFound => Ok(Some(Seen::Missing)),
                    Err(s) => Err(s),
                },
            }
        };
        match tokio::time::timeout(Duration::from_secs(5), call).await {
            Ok(r) => r,
            Err(_) => Err(tonic::Status::deadline_exceeded("no answer within 5 s")),
        }
    }

    /// Sends `op` until a certain answer, for 20 s at most.
    async fn carry_out(&self, name: &str, op: &Op) -> (Outcome, Option<Seen>) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        for attempt in 0.. {
            let outcome = match self.send(attempt, name, op).await {
                Ok(seen) => return (Outcome::Ok, seen),
                // A repeated delete whose first answer was lost.
                Err(s)
                    if s.code() == Code::NotFound
                        && matches!(op, Op::Delete | Op::DeleteSnapshot { .. })
                        && attempt > 0 =>
                {
                    Outcome::Ok
                }
                Err(s) if uncertain(s.code()) => {
                    if tokio::time::Instant::now() >= deadline {
                        Outcome::Unknown
                    } else {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                }
                // A refusal after an uncertain attempt: that attempt may have landed.
                Err(_) if attempt > 0 => Outcome::Unknown,
                Err(s) => Outcome::Refused(s.code()),
            };
            return (outcome, None);
        }
        unreachable!("attempts never run out")
    }

    /// One client: requests one after the other until `stop`.
    pub async fn client(self: Arc<Self>, stop: Arc<std::sync::atomic::AtomicBool>) {
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let (name, op) = self.choose();
            let invoked = self.ms();
            let (outcome, seen) = self.carry_out(&name, &op).await;
            self.believe(&name, &op, outcome);
            self.history.lock().unwrap().push(Record {
                volume: name,
                op,
                invoked,
                completed: self.ms(),
                outcome,
                seen,
            });
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// What a read saw: a volume being deleted, or the nodes it is published
/// (or being published) on; a publication being undone is not counted.
fn seen(v: &api::Volume) -> Seen {
    if v.state == "deleting" {
        return Seen::Deleting;
    }
    Seen::Nodes(
        v.publications
            .iter()
            .filter(|p| p.state != "unpublishing")
            .map(|p| p.node.clone())
            .collect(),
    )
}
