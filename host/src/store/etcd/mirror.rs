//! A follower's warm copy of the prefix: every volume, node and join token,
//! read once and then kept up to date by an etcd watch, so that a server
//! elected leader starts from memory and what changed, not from a read of
//! the whole prefix (which grows with the store, and sat on the failover
//! path).
//!
//! The watch resumes from the last revision applied when its stream breaks;
//! when etcd has compacted that revision away, the copy is read again whole.
//! A new leader takes the copy only once etcd confirms it, at a revision no
//! older than the leader key's: for volumes, nodes and tokens each, no key
//! changed after the copy's revision, and as many keys as the copy holds.
//! (A watch's progress response is not taken as that confirmation: etcd
//! before 3.4.24 may send one ahead of events still on their way.) If that
//! does not come in time, the term reads the prefix as before.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use berth_proto::etcd::etcdserverpb as pb;
use berth_proto::etcd::mvccpb;
use pb::watch_client::WatchClient;
use tokio::sync::mpsc;
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
    settings: EtcdSettings,
    kv: Members,
    copy: Arc<Mutex<Option<Warm>>>,
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
        let task = tokio::spawn(keep(settings.clone(), kv.clone(), copy.clone()));
        Ok(Mirror {
            settings,
            kv,
            copy,
            task,
        })
    }

    /// The copy, once etcd confirms it at `revision` or later (checked every
    /// 20 ms), within `within`. The mirror stops: a leader writes the prefix
    /// itself.
    pub async fn take(self, revision: i64, within: Duration) -> Option<Warm> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let seen = {
                let copy = self.copy.lock().unwrap_or_else(|p| p.into_inner());
                copy.as_ref()
                    .map(|w| (w.revision, [w.volumes.len(), w.nodes.len(), w.tokens.len()]))
            };
            if let Some((at, counts)) = seen
                && self.confirmed(at, counts, revision).await
            {
                let mut copy = self.copy.lock().unwrap_or_else(|p| p.into_inner());
                // Taken only as it was confirmed: a change applied meanwhile
                // is checked again.
                if copy.as_ref().is_some_and(|w| w.revision == at) {
                    self.task.abort();
                    return copy.take();
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Whether etcd, at one revision no older than `revision`, has no key
    /// changed after `at` and as many keys as `counts` below volumes, nodes
    /// and tokens: then the copy is the prefix as of that revision.
    async fn confirmed(&self, at: i64, counts: [usize; 3], revision: i64) -> bool {
        let mut pinned = 0;
        for (kind, count) in ["volumes", "nodes", "tokens"].into_iter().zip(counts) {
            let key = self.settings.key(&format!("{kind}/"));
            for newer in [false, true] {
                // etcd counts before it filters by revision: keys changed
                // after `at` are asked for (their keys only), and counted here.
                let request = pb::RangeRequest {
                    range_end: prefix_end(&key),
                    key: key.clone(),
                    count_only: !newer,
                    keys_only: newer,
                    revision: pinned,
                    min_mod_revision: if newer { at + 1 } else { 0 },
                    ..Default::default()
                };
                let Ok(answer) = self
                    .kv
                    .call(|mut c| {
                        let request = request.clone();
                        async move { c.range(request).await }
                    })
                    .await
                else {
                    return false;
                };
                if pinned == 0 {
                    pinned = answer.header.map_or(0, |h| h.revision);
                    if pinned < revision {
                        return false;
                    }
                }
                let agrees = match newer {
                    true => answer.kvs.is_empty(),
                    false => answer.count == count as i64,
                };
                if !agrees {
                    return false;
                }
            }
        }
        true
    }
}

/// Reads the prefix, then follows it; again whole after a compaction.
async fn keep(settings: EtcdSettings, kv: Members, copy: Arc<Mutex<Option<Warm>>>) {
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
        // Follow from the next revision; resume from the last applied.
        loop {
            let from = copy
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
                .map_or(revision, |w| w.revision);
            match follow(&settings, &kv, &prefix, from + 1, &copy).await {
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
        let response = match responses.next().await {
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
    }
}
