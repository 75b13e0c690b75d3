//! A follower's warm copy of the prefix: every volume, node and join token,
//! read once and then kept up to date by an etcd watch, so that a server
//! elected leader starts from memory and what changed, not from a read of
//! the whole prefix (which grows with the store, and sat on the failover
//! path).
//!
//! The watch resumes from the last revision applied when its stream breaks;
//! when etcd has compacted that revision away, the copy is read again whole.
//! A new leader takes the copy once the watch has brought the leader key's
//! own creation: events come in revision order, so every change before the
//! election is then in, and nothing the old leader writes after it passes
//! the fence. etcd's counts of volumes, nodes and tokens at the copy's
//! revision are checked against the copy's as well. (A watch's progress
//! response is not the barrier: etcd before 3.4.24 may send one ahead of
//! events still on their way.) If that does not come in time, or a count
//! differs, the term reads the prefix as before.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use berth_proto::etcd::etcdserverpb as pb;
use berth_proto::etcd::mvccpb;
use pb::watch_client::WatchClient;
use tokio::sync::{mpsc, watch};
use tokio_stream::StreamExt;

use super::members::{EtcdError, MAX_ANSWER, prefix_end, range_all_at};
use super::{EtcdSettings, Members};
use crate::{NodeRecord, StoreError, TokenRecord, decode};
use berth_model::VolumeRecord;

/// What a new leader takes over.
#[derive(Default)]
pub struct Warm {
    pub volumes: HashMap<String, VolumeRecord>,
    pub nodes: HashMap<String, NodeRecord>,
    pub tokens: HashMap<String, TokenRecord>,
    /// Every change up to this revision is in.
    pub revision: i64,
}

impl Warm {
    /// Applies a key's new value (`None`: deleted). A value that does not
    /// decode is left out and logged: the leader's own read would refuse it.
    fn apply(&mut self, prefix: &str, key: &[u8], value: Option<&[u8]>) {
        let Some(rest) = key
            .strip_prefix(prefix.as_bytes())
            .and_then(|r| r.strip_prefix(b"/"))
            .and_then(|r| std::str::from_utf8(r).ok())
        else {
            return;
        };
        let Some((kind, name)) = rest.split_once('/') else {
            return;
        };
        let name = name.to_string();
        let warn = |e: String| tracing::warn!(key = %String::from_utf8_lossy(key), error = %e, "warm copy: a value that does not decode");
        match (kind, value) {
            ("volumes", Some(v)) => match decode(&name, v) {
                Ok(r) => drop(self.volumes.insert(name, r)),
                Err(e) => warn(e.to_string()),
            },
            ("volumes", None) => drop(self.volumes.remove(&name)),
            ("nodes", Some(v)) => match serde_json::from_slice(v) {
                Ok(n) => drop(self.nodes.insert(name, n)),
                Err(e) => warn(e.to_string()),
            },
            ("nodes", None) => drop(self.nodes.remove(&name)),
            ("tokens", Some(v)) => match serde_json::from_slice(v) {
                Ok(t) => drop(self.tokens.insert(name, t)),
                Err(e) => warn(e.to_string()),
            },
            ("tokens", None) => drop(self.tokens.remove(&name)),
            _ => {}
        }
    }
}

pub struct Mirror {
    settings: EtcdSettings,
    kv: Members,
    copy: Arc<Mutex<Option<Warm>>>,
    /// The copy's revision, as it moves.
    applied: watch::Receiver<i64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Mirror {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Mirror {
    /// Starts keeping the copy, in the background.
    pub fn start(settings: EtcdSettings) -> Result<Mirror, StoreError> {
        let kv = Members::new(&settings)?;
        let copy = Arc::new(Mutex::new(None));
        let (moved, applied) = watch::channel(0);
        let task = tokio::spawn(keep(settings.clone(), kv.clone(), copy.clone(), moved));
        Ok(Mirror {
            settings,
            kv,
            copy,
            applied,
            task,
        })
    }

    /// The revision the copy holds everything up to (0 until it has read
    /// the prefix).
    pub fn revision(&self) -> i64 {
        *self.applied.borrow()
    }

    /// The copy, once it holds every change up to `revision` (which must be
    /// a change under the prefix, as the leader key's creation is: its event
    /// is the barrier), within `within`. Its counts are then checked against etcd's at the
    /// copy's own revision. The mirror stops: a leader writes the prefix
    /// itself.
    pub async fn take(self, revision: i64, within: Duration) -> Option<Warm> {
        let mut applied = self.applied.clone();
        let reached = tokio::time::timeout(within, applied.wait_for(|r| *r >= revision)).await;
        if !matches!(reached, Ok(Ok(_))) {
            return None;
        }
        self.task.abort();
        let warm = self.copy.lock().unwrap_or_else(|p| p.into_inner()).take()?;
        let counts = [warm.volumes.len(), warm.nodes.len(), warm.tokens.len()];
        match tokio::time::timeout(within, self.counted(warm.revision)).await {
            Ok(Ok(etcd)) if etcd == counts => Some(warm),
            Ok(Ok(etcd)) => {
                tracing::warn!(?etcd, copy = ?counts, revision = warm.revision, "warm copy: counts differ from etcd's; reading the store");
                None
            }
            Ok(Err(e)) => {
                tracing::info!(error = %e, "warm copy: etcd's counts not read; reading the store");
                None
            }
            Err(_) => None,
        }
    }

    /// How many volumes, nodes and tokens etcd held at `revision`.
    async fn counted(&self, revision: i64) -> Result<[usize; 3], EtcdError> {
        let count = |kind: &str| {
            let key = self.settings.key(&format!("{kind}/"));
            let request = pb::RangeRequest {
                range_end: prefix_end(&key),
                key,
                count_only: true,
                revision,
                ..Default::default()
            };
            async move {
                self.kv
                    .call(|mut c| {
                        let request = request.clone();
                        async move { c.range(request).await }
                    })
                    .await
                    .map(|a| a.count as usize)
            }
        };
        let (v, n, t) = tokio::try_join!(count("volumes"), count("nodes"), count("tokens"))?;
        Ok([v, n, t])
    }
}

/// Reads the prefix, then follows it; again whole after a compaction.
async fn keep(
    settings: EtcdSettings,
    kv: Members,
    copy: Arc<Mutex<Option<Warm>>>,
    moved: watch::Sender<i64>,
) {
    let prefix = format!("{}/", settings.prefix).into_bytes();
    let mut pause = Duration::from_millis(100);
    'read: loop {
        let (read, revision) = match range_all_at(&kv, &prefix).await {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(error = %e, "warm copy: reading the prefix failed; trying again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        let mut warm = Warm {
            revision,
            ..Warm::default()
        };
        for (key, value) in &read {
            warm.apply(&settings.prefix, key, Some(value));
        }
        drop(read);
        tracing::info!(
            volumes = warm.volumes.len(),
            revision,
            "warm copy of the store read"
        );
        *copy.lock().unwrap_or_else(|p| p.into_inner()) = Some(warm);
        moved.send_replace(revision);
        // Follow from the next revision; resume from the last applied.
        loop {
            let from = copy
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
                .map_or(revision, |w| w.revision);
            match follow(&settings, &kv, &prefix, from + 1, &copy, &moved).await {
                Ended::Compacted => {
                    tracing::info!(
                        from,
                        "warm copy: etcd compacted past it; reading the prefix again"
                    );
                    continue 'read;
                }
                Ended::Broken(e) => {
                    tracing::debug!(error = %e, "warm copy: the watch broke; resuming");
                    kv.pass_over();
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
}

enum Ended {
    Compacted,
    Broken(String),
}

async fn follow(
    settings: &EtcdSettings,
    kv: &Members,
    prefix: &[u8],
    start: i64,
    copy: &Arc<Mutex<Option<Warm>>>,
    moved: &watch::Sender<i64>,
) -> Ended {
    use pb::watch_request::RequestUnion;
    let (requests, rx) = mpsc::channel(4);
    let create = pb::WatchRequest {
        request_union: Some(RequestUnion::CreateRequest(pb::WatchCreateRequest {
            key: prefix.to_vec(),
            range_end: prefix_end(prefix),
            start_revision: start,
            progress_notify: true,
            prev_kv: false,
        })),
    };
    if requests.send(create).await.is_err() {
        return Ended::Broken("the request queue closed".into());
    }
    let mut client = WatchClient::new(kv.current()).max_decoding_message_size(MAX_ANSWER);
    let mut responses = match client
        .watch(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
    {
        Ok(r) => r.into_inner(),
        Err(status) => return Ended::Broken(berth_csi::error_chain(&status)),
    };
    loop {
        let response = match responses.next().await {
            Some(Ok(r)) => r,
            Some(Err(status)) => return Ended::Broken(berth_csi::error_chain(&status)),
            None => return Ended::Broken("the watch ended".into()),
        };
        if response.compact_revision > 0 {
            return Ended::Compacted;
        }
        if response.canceled {
            return Ended::Broken(format!("the watch was canceled: {}", response.cancel_reason));
        }
        let mut guard = copy.lock().unwrap_or_else(|p| p.into_inner());
        let Some(warm) = guard.as_mut() else {
            return Ended::Broken("the copy was taken".into());
        };
        let mut applied = warm.revision;
        for event in &response.events {
            let Some(kv) = &event.kv else { continue };
            let value = match event.r#type() {
                mvccpb::event::EventType::Put => Some(kv.value.as_slice()),
                mvccpb::event::EventType::Delete => None,
            };
            warm.apply(&settings.prefix, &kv.key, value);
            applied = applied.max(kv.mod_revision);
        }
        // Events come in order: every change up to the last is in.
        warm.revision = applied;
        drop(guard);
        moved.send_replace(applied);
    }
}
