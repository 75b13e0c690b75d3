//! A follower's warm copy of the prefix: every volume, node and join token,
//! read once and then kept up to date by an etcd watch, so that a server
//! elected leader starts from memory and what changed, not from a read of
//! the whole prefix (which grows with the store, and sat on the failover
//! path).
//!
//! The watch resumes from the last revision applied when its stream breaks;
//! when etcd has compacted that revision away, the copy is read again whole.
//! A new leader takes the copy only once etcd has said (a progress response)
//! that every change up to the leader key's revision was sent; if that does
//! not come in time, the term reads the prefix as before.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use berth_proto::etcd::etcdserverpb as pb;
use berth_proto::etcd::mvccpb;
use pb::watch_client::WatchClient;
use tokio::sync::{mpsc, watch};
use tokio_stream::StreamExt;

use super::members::{MAX_ANSWER, prefix_end, range_all_at};
use super::{EtcdSettings, Members};
use crate::model::VolumeRecord;
use crate::store::{NodeRecord, TokenRecord, decode};

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
    copy: Arc<Mutex<Option<Warm>>>,
    /// The revision up to which etcd said every change was sent.
    confirmed: watch::Receiver<i64>,
    /// Asks the watch for a progress response.
    progress: mpsc::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Mirror {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Mirror {
    /// Starts keeping the copy, in the background.
    pub fn start(settings: EtcdSettings) -> Result<Mirror, String> {
        let kv = Members::new(&settings).map_err(|e| e.to_string())?;
        let copy = Arc::new(Mutex::new(None));
        let (confirm, confirmed) = watch::channel(0);
        let (progress, asked) = mpsc::channel(4);
        let task = tokio::spawn(keep(settings, kv, copy.clone(), confirm, asked));
        Ok(Mirror {
            copy,
            confirmed,
            progress,
            task,
        })
    }

    /// The copy, once etcd confirms every change up to `revision` is in it
    /// (asking for that confirmation), within `within`. The mirror stops:
    /// a leader writes the prefix itself.
    pub async fn take(self, revision: i64, within: Duration) -> Option<Warm> {
        let mut confirmed = self.confirmed.clone();
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if *confirmed.borrow_and_update() >= revision {
                break;
            }
            let _ = self.progress.try_send(());
            let asked_again = tokio::time::Instant::now() + Duration::from_millis(50);
            match tokio::time::timeout_at(asked_again.min(deadline), confirmed.changed()).await {
                Ok(Ok(())) | Err(_) if tokio::time::Instant::now() < deadline => {}
                _ => return None,
            }
        }
        self.task.abort();
        let warm = self.copy.lock().unwrap_or_else(|p| p.into_inner()).take()?;
        (warm.revision >= revision).then_some(warm)
    }
}

/// Reads the prefix, then follows it; again whole after a compaction.
async fn keep(
    settings: EtcdSettings,
    kv: Members,
    copy: Arc<Mutex<Option<Warm>>>,
    confirm: watch::Sender<i64>,
    mut asked: mpsc::Receiver<()>,
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
        confirm.send_replace(revision);
        // Follow from the next revision; resume from the last applied.
        loop {
            let from = copy
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
                .map_or(revision, |w| w.revision);
            match follow(&settings, &kv, &prefix, from + 1, &copy, &confirm, &mut asked).await {
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
    confirm: &watch::Sender<i64>,
    asked: &mut mpsc::Receiver<()>,
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
        Err(status) => return Ended::Broken(crate::csi::error_chain(&status)),
    };
    loop {
        let response = tokio::select! {
            r = responses.next() => r,
            Some(()) = asked.recv() => {
                let progress = pb::WatchRequest {
                    request_union: Some(RequestUnion::ProgressRequest(pb::WatchProgressRequest {})),
                };
                let _ = requests.send(progress).await;
                continue;
            }
        };
        let response = match response {
            Some(Ok(r)) => r,
            Some(Err(status)) => return Ended::Broken(crate::csi::error_chain(&status)),
            None => return Ended::Broken("the watch ended".into()),
        };
        if response.compact_revision > 0 {
            return Ended::Compacted;
        }
        if response.canceled {
            return Ended::Broken(format!("the watch was canceled: {}", response.cancel_reason));
        }
        let revision = response.header.as_ref().map_or(0, |h| h.revision);
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
        // A progress response (no events, not the watch's creation) says
        // every change up to its header's revision was sent; events, that
        // every change up to the last of them was (they come in order).
        if response.events.is_empty() && !response.fragment && !response.created {
            applied = applied.max(revision);
        }
        warm.revision = applied;
        drop(guard);
        confirm.send_if_modified(|c| {
            let newer = applied > *c;
            *c = (*c).max(applied);
            newer
        });
    }
}
