//! The etcd store's one writer: changes grouped into transactions, one in
//! flight at a time, each fenced and ordered.
//!
//! Invariant: a transaction lands only right after the one this store last
//! knew landed. Every transaction compares the writer key's mod revision
//! with the revision of the last transaction this store saw land, and puts
//! the writer key itself. A copy sent to one member that got no answer in
//! time, and then sent again to the next, may still be applied late, after
//! a later transaction: its compare then fails and it changes nothing,
//! instead of putting back a record a later change had removed.

use std::collections::HashMap;

use berth_proto::etcd::etcdserverpb as pb;
use pb::request_op::Request;
use pb::response_op::Response;
use tokio::sync::{mpsc, oneshot};

use super::{EtcdError, Fence, Members};

/// etcd's default `--max-txn-ops`.
const MAX_TXN_OPS: usize = 128;
/// Below etcd's default `--max-request-bytes` (1.5 MiB).
const MAX_TXN_BYTES: usize = 1 << 20;
/// Writes waiting for a transaction; a writer past this waits its turn.
pub(super) const WRITE_QUEUE: usize = 4 * MAX_TXN_OPS;
/// Tries of one transaction whose writer compare failed because a copy of
/// an earlier one landed in between; more means another writer shares the key.
const ORDER_TRIES: usize = 8;

pub(super) type Reply = oneshot::Sender<Result<(), EtcdError>>;

/// One key's change: a value to put, or `None` to delete.
pub(super) struct Write {
    pub key: Vec<u8>,
    pub value: Option<Vec<u8>>,
}

/// Changes waiting for one transaction; a key changed twice keeps its last
/// change (etcd refuses a transaction that names a key twice).
#[derive(Default)]
struct Batch {
    writes: Vec<Write>,
    at: HashMap<Vec<u8>, usize>,
    replies: Vec<Reply>,
    bytes: usize,
}

impl Batch {
    fn add(&mut self, (write, reply): (Write, Reply)) {
        self.bytes += write.key.len() + write.value.as_ref().map_or(0, Vec::len);
        self.replies.push(reply);
        match self.at.get(&write.key) {
            Some(&i) => self.writes[i] = write,
            None => {
                self.at.insert(write.key.clone(), self.writes.len());
                self.writes.push(write);
            }
        }
    }

    /// Full one short of etcd's limit: the writer key's put is one more.
    fn full(&self) -> bool {
        self.writes.len() + 1 >= MAX_TXN_OPS || self.bytes >= MAX_TXN_BYTES
    }

    fn operations(&mut self) -> Vec<pb::RequestOp> {
        self.writes
            .drain(..)
            .map(|w| match w.value {
                Some(value) => put(w.key, value),
                None => pb::RequestOp {
                    request: Some(Request::RequestDeleteRange(pb::DeleteRangeRequest {
                        key: w.key,
                        ..Default::default()
                    })),
                },
            })
            .collect()
    }
}

fn put(key: Vec<u8>, value: Vec<u8>) -> pb::RequestOp {
    pb::RequestOp {
        request: Some(Request::RequestPut(pb::PutRequest {
            key,
            value,
            ..Default::default()
        })),
    }
}

fn range(key: &[u8]) -> pb::RequestOp {
    pb::RequestOp {
        request: Some(Request::RequestRange(pb::RangeRequest {
            key: key.to_vec(),
            ..Default::default()
        })),
    }
}

/// This store's place in the order of transactions on its prefix.
pub(super) struct Writer {
    /// `<prefix>/writer`: put by every transaction.
    key: Vec<u8>,
    /// Tells this store's transactions from any other's (random).
    id: String,
    /// Transactions built so far; with `id`, each one's own value.
    sent: u64,
    /// The revision of the last transaction seen to land (0: none yet,
    /// which etcd compares equal for a key that does not exist).
    last: i64,
}

impl Writer {
    pub(super) fn new(prefix: &str) -> Writer {
        Writer {
            key: format!("{prefix}/writer").into_bytes(),
            id: berth_model::new_id(),
            sent: 0,
            last: 0,
        }
    }

    /// The transaction of `writes`, fenced, ordered after the last one seen
    /// to land, and its writer value (which says it landed if found later).
    fn transaction(
        &mut self,
        writes: Vec<pb::RequestOp>,
        fence: Option<&Fence>,
    ) -> (pb::TxnRequest, Vec<u8>) {
        use pb::compare::{CompareResult, CompareTarget, TargetUnion};
        self.sent += 1;
        let tag = format!("{}:{}", self.id, self.sent).into_bytes();
        let mut success = writes;
        success.push(put(self.key.clone(), tag.clone()));
        let mut failure = vec![range(&self.key)];
        failure.extend(fence.map(|f| range(&f.key)));
        let ordered = pb::Compare {
            result: CompareResult::Equal as i32,
            target: CompareTarget::Mod as i32,
            key: self.key.clone(),
            target_union: Some(TargetUnion::ModRevision(self.last)),
            range_end: Vec::new(),
        };
        let txn = pb::TxnRequest {
            compare: fence.map(Fence::compare).into_iter().chain([ordered]).collect(),
            success,
            failure,
        };
        (txn, tag)
    }

    /// Sends `txn` until it lands or is refused: a failed compare with the
    /// fence holding means an earlier copy landed in between, learnt from
    /// the failure's reads; the transaction goes again after it.
    async fn commit(
        &mut self,
        kv: &Members,
        mut txn: pb::TxnRequest,
        tag: &[u8],
        fence: Option<&Fence>,
    ) -> Result<(), EtcdError> {
        for _ in 0..ORDER_TRIES {
            let answer = kv
                .call(|mut c| {
                    let txn = txn.clone();
                    async move { c.txn(txn).await }
                })
                .await?;
            let revision = answer.header.as_ref().map_or(0, |h| h.revision);
            if answer.succeeded {
                self.last = revision;
                return Ok(());
            }
            let mut reads = answer.responses.into_iter().map(|r| match r.response {
                Some(Response::ResponseRange(read)) => read.kvs.into_iter().next(),
                _ => None,
            });
            let writer = reads.next().flatten();
            if let Some(f) = fence {
                let holds = reads
                    .next()
                    .flatten()
                    .is_some_and(|k| k.create_revision == f.create_revision);
                if !holds {
                    return Err(EtcdError::Deposed);
                }
            }
            self.last = writer.as_ref().map_or(0, |k| k.mod_revision);
            if writer.is_some_and(|k| k.value == tag) {
                // A copy sent to a member that did not answer in time landed.
                return Ok(());
            }
            tracing::debug!(
                writer_revision = self.last,
                "etcd: an earlier transaction landed after its answer was given up; ordering after it"
            );
            for compare in &mut txn.compare {
                if compare.key == self.key {
                    compare.target_union = Some(pb::compare::TargetUnion::ModRevision(self.last));
                }
            }
        }
        Err(EtcdError::Contended(
            String::from_utf8_lossy(&self.key).into_owned(),
        ))
    }
}

pub(super) async fn commit_loop(
    kv: Members,
    mut rx: mpsc::Receiver<(Write, Reply)>,
    fence: Option<Fence>,
    mut writer: Writer,
) {
    while let Some(first) = rx.recv().await {
        let mut batch = Batch::default();
        batch.add(first);
        while !batch.full() {
            match rx.try_recv() {
                Ok(next) => batch.add(next),
                Err(_) => break,
            }
        }
        let changes = batch.replies.len();
        let (txn, tag) = writer.transaction(batch.operations(), fence.as_ref());
        let started = std::time::Instant::now();
        let result = writer.commit(&kv, txn, &tag, fence.as_ref()).await;
        berth_metrics::store_commit(changes, started.elapsed());
        if let Err(e) = &result {
            tracing::error!(error = %e, changes, "etcd commit failed");
        }
        for reply in batch.replies {
            let _ = reply.send(result.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_changed_twice_in_a_batch_keeps_its_last_change_and_both_answers() {
        let mut batch = Batch::default();
        let write = |key: &str, value: Option<&str>| {
            let (tx, _rx) = oneshot::channel();
            (
                Write {
                    key: key.into(),
                    value: value.map(Into::into),
                },
                tx,
            )
        };
        batch.add(write("k1", Some("a")));
        batch.add(write("k2", Some("b")));
        batch.add(write("k1", None));
        assert_eq!(batch.replies.len(), 3);
        let fence = Fence {
            key: b"/berth/leader".to_vec(),
            create_revision: 42,
        };
        let mut writer = Writer::new("/berth");
        let (txn, tag) = writer.transaction(batch.operations(), Some(&fence));
        assert_eq!(txn.compare[0], fence.compare(), "every write is fenced");
        assert_eq!(txn.compare[1].key, b"/berth/writer", "and ordered");
        assert_eq!(txn.success.len(), 3, "two keys and the writer key");
        assert!(matches!(
            &txn.success[0].request,
            Some(Request::RequestDeleteRange(d)) if d.key == b"k1"
        ));
        assert!(matches!(
            &txn.success[2].request,
            Some(Request::RequestPut(p)) if p.key == b"/berth/writer" && p.value == tag
        ));
        let (_, next) = writer.transaction(Vec::new(), Some(&fence));
        assert_ne!(tag, next, "each transaction's writer value is its own");
    }

    #[test]
    fn a_full_batch_leaves_room_for_the_writer_key() {
        let mut batch = Batch::default();
        for i in 0..MAX_TXN_OPS {
            if batch.full() {
                break;
            }
            let (tx, _rx) = oneshot::channel();
            batch.add((
                Write {
                    key: format!("k{i}").into_bytes(),
                    value: None,
                },
                tx,
            ));
        }
        let (txn, _) = Writer::new("/b").transaction(batch.operations(), None);
        assert_eq!(txn.success.len(), MAX_TXN_OPS, "etcd's limit, not one past it");
    }
}
