//! The leader compacts etcd's history, as kube-apiserver does: etcd keeps
//! every revision of every key until it is told otherwise, and Berth's
//! writes (volume records, the decision log) would otherwise fill etcd's
//! quota (2 GiB by default), after which etcd refuses every write
//! (`NOSPACE`) until an operator compacts, defragments and disarms it.
//!
//! The schedule outlives a term: `<prefix>/compaction` holds the revision
//! etcd was at when the last compaction was due, and when (this server's
//! wall clock). Whenever that is `every` old (checked at a term's start and
//! every half interval), the leader compacts to that revision and records
//! the current one: history between one and about two intervals old is kept,
//! however often leadership changes. A follower's warm copy that falls
//! behind a compaction reads the prefix again. The compaction is not
//! physical: etcd answers once it is recorded and frees the space itself.
//! Compaction is etcd-wide, not the prefix's: `compact_every = "0s"` leaves
//! it to etcd's own `--auto-compaction-retention` where other users share
//! the cluster and want a longer history. A deposed leader's late marker
//! only makes a compaction refused as already done: nothing depends on it.

use std::time::Duration;

use berth_proto::etcd::etcdserverpb as pb;

use super::members::{EtcdError, Members};

/// Compacts on schedule until the task is dropped (the term's end).
pub(super) async fn compact_loop(kv: Members, marker: Vec<u8>, every: Duration) {
    loop {
        match due(&kv, &marker, every).await {
            Ok(Some(revision)) => match compact(&kv, revision).await {
                Ok(()) => {
                    tracing::info!(revision, "etcd history compacted");
                    berth_metrics::store_compacted(revision);
                }
                // Compacted further already (etcd's own retention, another prefix's leader).
                Err(EtcdError::Refused { message, .. }) if message.contains("compacted") => {
                    tracing::debug!(revision, "etcd history was already compacted past this revision")
                }
                Err(e) => tracing::warn!(error = %e, revision, "etcd compaction failed; next time"),
            },
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "etcd compaction: cannot read or record the schedule; next time")
            }
        }
        tokio::time::sleep(every / 2).await;
    }
}

/// The schedule's record: a revision, and when it was etcd's current one.
#[derive(serde::Serialize, serde::Deserialize)]
struct Marker {
    revision: i64,
    /// Seconds since the Unix epoch, by the recording server's clock.
    at: u64,
}

/// When a compaction is due, records the current revision for the next one
/// and answers the revision recorded last (`None`: not due, or the first).
async fn due(kv: &Members, key: &[u8], every: Duration) -> Result<Option<i64>, EtcdError> {
    let read = pb::RangeRequest {
        key: key.to_vec(),
        ..Default::default()
    };
    let answer = kv
        .call(|mut c| {
            let read = read.clone();
            async move { c.range(read).await }
        })
        .await?;
    let now = answer.header.map(|h| h.revision).unwrap_or_default();
    let recorded: Option<Marker> = answer
        .kvs
        .first()
        .and_then(|kv| serde_json::from_slice(&kv.value).ok());
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let every = every.as_secs().max(1);
    // A marker from the future (a clock stepped back) counts as due too.
    if let Some(m) = &recorded
        && clock.saturating_sub(m.at) < every
        && m.at <= clock + every
    {
        return Ok(None);
    }
    let next = Marker {
        revision: now,
        at: clock,
    };
    let put = pb::PutRequest {
        key: key.to_vec(),
        value: serde_json::to_vec(&next).unwrap_or_default(),
        ..Default::default()
    };
    kv.call(|mut c| {
        let put = put.clone();
        async move { c.put(put).await }
    })
    .await?;
    Ok(recorded.map(|m| m.revision).filter(|r| *r > 0))
}

async fn compact(kv: &Members, revision: i64) -> Result<(), EtcdError> {
    let request = pb::CompactionRequest {
        revision,
        physical: false,
    };
    kv.call(|mut c| async move { c.compact(request).await })
        .await
        .map(|_| ())
}
