//! The etcd store: volumes and nodes as keys below a prefix of an existing
//! etcd cluster, so several `berth serve` can share one durable state and
//! none of them is the only copy.
//!
//! Keys: `<prefix>/schema`, `<prefix>/volumes/<id>`, `<prefix>/nodes/<name>`;
//! values are the same JSON the embedded store keeps. Writes are grouped as
//! in the embedded store: everything waiting goes into one etcd transaction
//! (within etcd's default limits on operations and bytes), one transaction in
//! flight at a time so a later change to a key never lands before an earlier
//! one. A writer is answered once etcd has committed its change.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use berth_proto::etcd::etcdserverpb as pb;
use pb::kv_client::KvClient;
use tokio::sync::{mpsc, oneshot};
use tonic::transport::{Channel, Endpoint};

use super::{NodeRecord, SCHEMA_VERSION, Store, StoreError, decode, encode};
use crate::model::VolumeRecord;

/// etcd's default `--max-txn-ops`.
const MAX_TXN_OPS: usize = 128;
/// Below etcd's default `--max-request-bytes` (1.5 MiB).
const MAX_TXN_BYTES: usize = 1 << 20;
/// Keys read per range request at start.
const PAGE: i64 = 1000;
/// How long one request to etcd may take before the store reports it unavailable.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the store lives in etcd.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdSettings {
    /// Client URLs of the etcd members (`http://host:port`).
    pub endpoints: Vec<String>,
    /// Every key Berth writes is below this; several Berth clusters can
    /// share one etcd with different prefixes.
    pub prefix: String,
}

impl EtcdSettings {
    /// Client URLs are plain http (TLS to etcd is not supported yet, so it
    /// is refused rather than half-done); the prefix defaults to `/berth`.
    /// An error names the `[store]` key at fault.
    pub fn new(endpoints: Vec<String>, prefix: Option<String>) -> Result<Self, (&'static str, String)> {
        if endpoints.is_empty() {
            return Err((
                "store.etcd",
                "name at least one etcd member's client URL, like \"http://127.0.0.1:2379\" (leave [store] out for the embedded store)".into(),
            ));
        }
        for url in &endpoints {
            let ok = url
                .strip_prefix("http://")
                .is_some_and(|rest| !rest.is_empty() && url.parse::<tonic::transport::Uri>().is_ok());
            if !ok {
                return Err((
                    "store.etcd",
                    format!("{url:?} is not an http://host:port URL (TLS to etcd is not supported yet)"),
                ));
            }
        }
        let prefix = prefix.unwrap_or_else(|| "/berth".into());
        let well_formed = prefix.starts_with('/')
            && !prefix.ends_with('/')
            && prefix.len() <= 128
            && prefix.bytes().all(|b| b.is_ascii_graphic());
        if !well_formed {
            return Err((
                "store.prefix",
                format!(
                    "{prefix:?} must start with '/', not end with one, and be printable ASCII (at most 128 bytes)"
                ),
            ));
        }
        Ok(EtcdSettings { endpoints, prefix })
    }
}

type Reply = oneshot::Sender<Result<(), String>>;

/// One key's change: a value to put, or `None` to delete.
struct Write {
    key: Vec<u8>,
    value: Option<Vec<u8>>,
}

pub struct EtcdStore {
    settings: EtcdSettings,
    writes: mpsc::UnboundedSender<(Write, Reply)>,
    /// What was read at connect, for the one `load` and `load_nodes` at start.
    volumes: Mutex<Option<Vec<VolumeRecord>>>,
    nodes: Mutex<Option<Vec<NodeRecord>>>,
}

fn unavailable(settings: &EtcdSettings, message: impl std::fmt::Display) -> StoreError {
    StoreError::Etcd {
        endpoints: settings.endpoints.join(","),
        message: message.to_string(),
    }
}

/// The key just past every key that starts with `prefix`.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // All 0xff: every key from `prefix` on.
    vec![0]
}

/// One client per member, tried in turn from the last one that answered: a
/// member that is down or cut off from the quorum is passed over. Every
/// request Berth makes is safe to repeat (puts and deletes of whole values).
#[derive(Clone)]
struct Members {
    clients: Arc<Vec<KvClient<Channel>>>,
    current: Arc<AtomicUsize>,
}

impl Members {
    fn new(settings: &EtcdSettings) -> Result<Members, StoreError> {
        let mut clients = Vec::new();
        for url in &settings.endpoints {
            let endpoint = Endpoint::from_shared(url.clone())
                .map_err(|e| unavailable(settings, format!("{url}: {e}")))?
                .connect_timeout(Duration::from_secs(2))
                .tcp_nodelay(true);
            clients.push(KvClient::new(endpoint.connect_lazy()));
        }
        Ok(Members {
            clients: Arc::new(clients),
            current: Arc::new(AtomicUsize::new(0)),
        })
    }

    async fn call<T, F, Fut>(&self, call: F) -> Result<T, String>
    where
        F: Fn(KvClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let n = self.clients.len();
        let first = self.current.load(Ordering::Relaxed);
        let mut failures = Vec::new();
        for k in 0..n {
            let i = (first + k) % n;
            let failure = match tokio::time::timeout(CALL_TIMEOUT, call(self.clients[i].clone())).await {
                Ok(Ok(r)) => {
                    self.current.store(i, Ordering::Relaxed);
                    return Ok(r.into_inner());
                }
                Ok(Err(status)) => {
                    let elsewhere = matches!(
                        status.code(),
                        tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Unknown
                    );
                    let message = format!("{:?}: {}", status.code(), status.message());
                    if !elsewhere {
                        return Err(message);
                    }
                    message
                }
                Err(_) => format!("no answer within {}s", CALL_TIMEOUT.as_secs()),
            };
            failures.push(format!("member {}: {failure}", i + 1));
        }
        Err(format!(
            "Unavailable: no member answered ({})",
            failures.join("; ")
        ))
    }
}

/// Every key and value below `prefix`, read page by page at one revision.
async fn range_all(kv: &Members, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>, String> {
    let range_end = prefix_end(prefix);
    let mut key = prefix.to_vec();
    let mut revision = 0;
    let mut out = Vec::new();
    loop {
        let request = pb::RangeRequest {
            key: key.clone(),
            range_end: range_end.clone(),
            limit: PAGE,
            revision,
            ..Default::default()
        };
        let page = kv
            .call(|mut c| {
                let request = request.clone();
                async move { c.range(request).await }
            })
            .await?;
        if revision == 0 {
            revision = page.header.map_or(0, |h| h.revision);
        }
        let more = page.more;
        let Some(last) = page.kvs.last().map(|kv| kv.key.clone()) else {
            break;
        };
        out.extend(page.kvs.into_iter().map(|kv| (kv.key, kv.value)));
        if !more {
            break;
        }
        // The next page starts just after the last key read.
        key = last;
        key.push(0);
    }
    Ok(out)
}

impl EtcdStore {
    /// Connects, checks the schema (recording it on a new prefix) and reads
    /// every volume and node.
    pub async fn connect(settings: EtcdSettings) -> Result<EtcdStore, StoreError> {
        let kv = Members::new(&settings)?;
        let schema_key = format!("{}/schema", settings.prefix).into_bytes();
        let read = pb::RangeRequest {
            key: schema_key.clone(),
            ..Default::default()
        };
        let schema = kv
            .call(|mut c| {
                let read = read.clone();
                async move { c.range(read).await }
            })
            .await
            .map_err(|e| unavailable(&settings, e))?;
        match schema.kvs.first() {
            Some(found) => {
                let found: u64 = std::str::from_utf8(&found.value)
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(|| unavailable(&settings, "the schema key is not a number"))?;
                if found > SCHEMA_VERSION {
                    return Err(StoreError::NewerSchema {
                        path: format!("etcd {}", settings.prefix).into(),
                        found,
                        supported: SCHEMA_VERSION,
                    });
                }
            }
            None => {
                let put = pb::PutRequest {
                    key: schema_key,
                    value: SCHEMA_VERSION.to_string().into_bytes(),
                    ..Default::default()
                };
                kv.call(|mut c| {
                    let put = put.clone();
                    async move { c.put(put).await }
                })
                .await
                .map_err(|e| unavailable(&settings, e))?;
            }
        }
        let volumes = range_all(&kv, format!("{}/volumes/", settings.prefix).as_bytes())
            .await
            .map_err(|e| unavailable(&settings, e))?
            .into_iter()
            .map(|(key, value)| {
                let id = String::from_utf8_lossy(&key)
                    .rsplit('/')
                    .next()
                    .unwrap_or_default()
                    .to_string();
                decode(&id, &value)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let nodes = range_all(&kv, format!("{}/nodes/", settings.prefix).as_bytes())
            .await
            .map_err(|e| unavailable(&settings, e))?
            .into_iter()
            .map(|(key, value)| {
                serde_json::from_slice(&value).map_err(|e| StoreError::Unreadable {
                    id: String::from_utf8_lossy(&key).into_owned(),
                    message: e.to_string(),
                })
            })
            .collect::<Result<Vec<NodeRecord>, _>>()?;
        let (writes, rx) = mpsc::unbounded_channel();
        tokio::spawn(commit_loop(kv, rx));
        Ok(EtcdStore {
            settings,
            writes,
            volumes: Mutex::new(Some(volumes)),
            nodes: Mutex::new(Some(nodes)),
        })
    }

    fn key(&self, kind: &str, name: &str) -> Vec<u8> {
        format!("{}/{kind}/{name}", self.settings.prefix).into_bytes()
    }

    async fn write(&self, key: Vec<u8>, value: Option<Vec<u8>>) -> Result<(), StoreError> {
        let (tx, rx) = oneshot::channel();
        self.writes
            .send((Write { key, value }, tx))
            .map_err(|_| StoreError::Closed)?;
        rx.await
            .map_err(|_| StoreError::Closed)?
            .map_err(|e| unavailable(&self.settings, e))
    }

    /// Read once at connect: a second load is a new connect's work.
    fn take<T>(&self, loaded: &Mutex<Option<Vec<T>>>, what: &str) -> Result<Vec<T>, StoreError> {
        loaded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .ok_or_else(|| {
                unavailable(
                    &self.settings,
                    format!("the {what} were loaded already; connect again"),
                )
            })
    }
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

    fn full(&self) -> bool {
        self.writes.len() >= MAX_TXN_OPS || self.bytes >= MAX_TXN_BYTES
    }

    fn request(&mut self) -> pb::TxnRequest {
        use pb::request_op::Request;
        let success = self
            .writes
            .drain(..)
            .map(|w| pb::RequestOp {
                request: Some(match w.value {
                    Some(value) => Request::RequestPut(pb::PutRequest {
                        key: w.key,
                        value,
                        ..Default::default()
                    }),
                    None => Request::RequestDeleteRange(pb::DeleteRangeRequest {
                        key: w.key,
                        ..Default::default()
                    }),
                }),
            })
            .collect();
        pb::TxnRequest {
            compare: Vec::new(),
            success,
            failure: Vec::new(),
        }
    }
}

async fn commit_loop(kv: Members, mut rx: mpsc::UnboundedReceiver<(Write, Reply)>) {
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
        let txn = batch.request();
        let result = kv
            .call(|mut c| {
                let txn = txn.clone();
                async move { c.txn(txn).await }
            })
            .await
            .and_then(|r| {
                r.succeeded
                    .then_some(())
                    .ok_or_else(|| "the transaction's conditions did not hold".to_string())
            });
        if let Err(e) = &result {
            tracing::error!(error = %e, changes, "etcd commit failed");
        }
        for reply in batch.replies {
            let _ = reply.send(result.clone());
        }
    }
}

#[tonic::async_trait]
impl Store for EtcdStore {
    fn load(&self) -> Result<Vec<VolumeRecord>, StoreError> {
        self.take(&self.volumes, "volumes")
    }

    async fn put(&self, record: &VolumeRecord) -> Result<(), StoreError> {
        self.write(self.key("volumes", &record.id), Some(encode(record)?))
            .await
    }

    async fn remove(&self, id: &str) -> Result<(), StoreError> {
        self.write(self.key("volumes", id), None).await
    }

    fn load_nodes(&self) -> Result<Vec<NodeRecord>, StoreError> {
        self.take(&self.nodes, "nodes")
    }

    async fn put_node(&self, node: &NodeRecord) -> Result<(), StoreError> {
        let value = serde_json::to_vec(node).map_err(|e| StoreError::Encode {
            id: node.name.clone(),
            message: e.to_string(),
        })?;
        self.write(self.key("nodes", &node.name), Some(value)).await
    }

    async fn remove_node(&self, name: &str) -> Result<(), StoreError> {
        self.write(self.key("nodes", name), None).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_name_the_key_at_fault() {
        let urls = |u: &[&str]| u.iter().map(|u| u.to_string()).collect::<Vec<_>>();
        let prefixed = EtcdSettings::new(urls(&["http://e:2379"]), Some("/site-a/berth".into())).unwrap();
        assert_eq!(prefixed.prefix, "/site-a/berth");
        for (endpoints, prefix, key, expected) in [
            (urls(&[]), None, "store.etcd", "name at least one"),
            (
                urls(&["https://e:2379"]),
                None,
                "store.etcd",
                "TLS to etcd is not supported yet",
            ),
            (
                urls(&["e:2379"]),
                None,
                "store.etcd",
                "is not an http://host:port URL",
            ),
            (
                urls(&["http://e:2379"]),
                Some("berth"),
                "store.prefix",
                "must start with '/'",
            ),
            (
                urls(&["http://e:2379"]),
                Some("/berth/"),
                "store.prefix",
                "not end with one",
            ),
        ] {
            let (k, message) = EtcdSettings::new(endpoints, prefix.map(Into::into)).unwrap_err();
            assert_eq!(k, key, "{message}");
            assert!(message.contains(expected), "expected {expected:?} in: {message}");
        }
    }

    #[test]
    fn a_prefix_ends_just_past_its_last_key() {
        assert_eq!(prefix_end(b"/berth/volumes/"), b"/berth/volumes0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
    }

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
        let txn = batch.request();
        assert_eq!(txn.success.len(), 2);
        assert!(matches!(
            &txn.success[0].request,
            Some(pb::request_op::Request::RequestDeleteRange(d)) if d.key == b"k1"
        ));
    }
}
