//! The etcd store: volumes and nodes as keys below a prefix of an existing
//! etcd cluster, so several `berth serve` can share one durable state and
//! none of them is the only copy.
//!
//! Keys: `<prefix>/schema`, `<prefix>/volumes/<id>`, `<prefix>/nodes/<name>`,
//! `<prefix>/tokens/<id>`, `<prefix>/acl/token/<accessor>`, `<prefix>/acl/policy/<name>`, `<prefix>/acl/quota/<namespace>`, `<prefix>/policy/set`, `<prefix>/checks/<plugin>`, `<prefix>/compaction`
//! (when the leader last compacted etcd's history: see `compact`), `<prefix>/writer`
//! (put by every transaction, which orders them: see `commit`);
//! values are the same JSON the embedded store keeps. Writes are grouped as
//! in the embedded store: everything waiting goes into one etcd transaction
//! (within etcd's default limits on operations and bytes), one transaction in
//! flight at a time, each compared against the last one that landed, so an
//! earlier change never lands after a later one, not even a copy sent again
//! to another member. A writer is answered once etcd has committed its change.

use std::sync::Mutex;

use berth_proto::etcd::etcdserverpb as pb;
use tokio::sync::{mpsc, oneshot};

use commit::{Reply, WRITE_QUEUE, Write, Writer, commit_loop};

use crate::{
    NodeRecord, SCHEMA_VERSION, Store, StoreError, TokenRecord, decisions, decode, encode, encode_json,
};
use berth_model::VolumeRecord;

mod commit;
mod compact;
mod members;
mod mirror;
mod settings;

pub use members::{EtcdError, Members, range_all, unavailable};
pub use mirror::{Mirror, Warm};
pub use settings::{DEPOSED, EtcdSettings, EtcdTls, Fence};

pub struct EtcdStore {
    settings: EtcdSettings,
    /// For reads after start (the decision log).
    kv: Members,
    writes: mpsc::Sender<(Write, Reply)>,
    /// What was read at connect, for the one `load` and `load_nodes` at start.
    volumes: Mutex<Option<Vec<VolumeRecord>>>,
    nodes: Mutex<Option<Vec<NodeRecord>>>,
    tokens: Mutex<Option<Vec<TokenRecord>>>,
    acl: Mutex<Option<Vec<crate::AclRecord>>>,
    /// The policy set as last read or written by this store.
    policy_set: Mutex<Option<crate::PolicySetRecord>>,
    /// Each plugin's latest conformance report, by plugin: read at open, as
    /// the policy set, and kept as written.
    checks: Mutex<std::collections::BTreeMap<String, crate::PluginCheckRecord>>,
    /// A leader's store compacts etcd's history while it lives.
    _compaction: Option<AbortOnDrop>,
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl EtcdStore {
    /// Connects, checks the schema (recording it on a new prefix) and reads
    /// every volume and node. With a fence, every write is the leader's.
    pub async fn connect(settings: EtcdSettings, fence: Option<Fence>) -> Result<EtcdStore, StoreError> {
        EtcdStore::connect_warm(settings, fence, None).await
    }

    /// [`EtcdStore::connect`], starting from a follower's warm copy (every
    /// change up to the term's start in it) instead of reading the prefix.
    pub async fn connect_warm(
        settings: EtcdSettings,
        fence: Option<Fence>,
        warm: Option<Warm>,
    ) -> Result<EtcdStore, StoreError> {
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
        let (volumes, nodes, tokens) = match warm {
            Some(warm) => (
                warm.volumes.into_values().collect(),
                warm.nodes.into_values().collect(),
                warm.tokens.into_values().collect(),
            ),
            None => {
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
                let nodes = load_json(&kv, &settings, "nodes").await?;
                let tokens = load_json(&kv, &settings, "tokens").await?;
                (volumes, nodes, tokens)
            }
        };
        // Read afresh, as the policy set: few, and every term's own.
        let acl = load_json(&kv, &settings, "acl").await?;
        // Read afresh even from a warm copy: a term loads the set as stored now.
        let policy_set: Option<crate::PolicySetRecord> =
            load_json(&kv, &settings, "policy").await?.into_iter().next();
        let checks: Vec<crate::PluginCheckRecord> = load_json(&kv, &settings, "checks").await?;
        let (writes, rx) = mpsc::channel(WRITE_QUEUE);
        let compaction = (fence.is_some() && !settings.compact_every.is_zero()).then(|| {
            let marker = format!("{}/compaction", settings.prefix).into_bytes();
            AbortOnDrop(tokio::spawn(compact::compact_loop(
                kv.clone(),
                marker,
                settings.compact_every,
            )))
        });
        let writer = Writer::new(&settings.prefix);
        tokio::spawn(commit_loop(kv.clone(), rx, fence, writer));
        Ok(EtcdStore {
            settings,
            kv,
            writes,
            volumes: Mutex::new(Some(volumes)),
            nodes: Mutex::new(Some(nodes)),
            tokens: Mutex::new(Some(tokens)),
            acl: Mutex::new(Some(acl)),
            policy_set: Mutex::new(policy_set),
            checks: Mutex::new(checks.into_iter().map(|c| (c.plugin.clone(), c)).collect()),
            _compaction: compaction,
        })
    }

    fn key(&self, kind: &str, name: &str) -> Vec<u8> {
        format!("{}/{kind}/{name}", self.settings.prefix).into_bytes()
    }

    async fn write(&self, key: Vec<u8>, value: Option<Vec<u8>>) -> Result<(), StoreError> {
        let (tx, rx) = oneshot::channel();
        self.writes
            .send((Write { key, value }, tx))
            .await
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

/// Every JSON value below `<prefix>/<kind>/`.
async fn load_json<T: serde::de::DeserializeOwned>(
    kv: &Members,
    settings: &EtcdSettings,
    kind: &str,
) -> Result<Vec<T>, StoreError> {
    range_all(kv, format!("{}/{kind}/", settings.prefix).as_bytes())
        .await
        .map_err(|e| unavailable(settings, e))?
        .into_iter()
        .map(|(key, value)| {
            serde_json::from_slice(&value).map_err(|e| StoreError::Unreadable {
                id: String::from_utf8_lossy(&key).into_owned(),
                message: e.to_string(),
            })
        })
        .collect()
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
        let value = encode_json(&node.name, node)?;
        self.write(self.key("nodes", &node.name), Some(value)).await
    }

    async fn remove_node(&self, name: &str) -> Result<(), StoreError> {
        self.write(self.key("nodes", name), None).await
    }

    fn load_tokens(&self) -> Result<Vec<TokenRecord>, StoreError> {
        self.take(&self.tokens, "join tokens")
    }

    async fn put_token(&self, token: &TokenRecord) -> Result<(), StoreError> {
        let value = encode_json(&token.id, token)?;
        self.write(self.key("tokens", &token.id), Some(value)).await
    }

    async fn remove_token(&self, id: &str) -> Result<(), StoreError> {
        self.write(self.key("tokens", id), None).await
    }

    fn load_acl(&self) -> Result<Vec<crate::AclRecord>, StoreError> {
        // Few, and read by both the access control and the quotas: kept.
        Ok(self
            .acl
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_default())
    }

    async fn put_acl(&self, record: &crate::AclRecord) -> Result<(), StoreError> {
        let key = record.key();
        let value = encode_json(&key, record)?;
        // The key's '/' makes one more level below `acl/`, which the
        // loader's range over the prefix reads all the same.
        self.write(self.key("acl", &key), Some(value)).await
    }

    async fn remove_acl(&self, key: &str) -> Result<(), StoreError> {
        self.write(self.key("acl", key), None).await
    }

    fn load_policy_set(&self) -> Result<Option<crate::PolicySetRecord>, StoreError> {
        Ok(self.policy_set.lock().unwrap_or_else(|p| p.into_inner()).clone())
    }

    async fn put_policy_set(&self, set: &crate::PolicySetRecord) -> Result<(), StoreError> {
        let bytes = crate::encode_json("policy set", set)?;
        self.write(self.key("policy", "set"), Some(bytes)).await?;
        *self.policy_set.lock().unwrap_or_else(|p| p.into_inner()) = Some(set.clone());
        Ok(())
    }

    fn load_plugin_checks(&self) -> Result<Vec<crate::PluginCheckRecord>, StoreError> {
        let checks = self.checks.lock().unwrap_or_else(|p| p.into_inner());
        Ok(checks.values().cloned().collect())
    }

    async fn put_plugin_check(&self, check: &crate::PluginCheckRecord) -> Result<(), StoreError> {
        let bytes = crate::encode_json(&check.plugin, check)?;
        self.write(self.key("checks", &check.plugin), Some(bytes)).await?;
        let mut checks = self.checks.lock().unwrap_or_else(|p| p.into_inner());
        checks.insert(check.plugin.clone(), check.clone());
        Ok(())
    }

    async fn append_decisions(
        &self,
        batches: Vec<crate::LoggedBatch>,
        keep: usize,
    ) -> Result<(), StoreError> {
        let mut changes = Vec::new();
        for batch in batches {
            let (kind, fresh) = batch.kept(keep);
            // The chunk keys, oldest first, read by name only: a ring of
            // chunks is a few keys under load, at most `keep` when idle.
            let prefix = self.key("decisions", &format!("{kind}/"));
            let stored = self
                .range(pb::RangeRequest {
                    range_end: members::prefix_end(&prefix),
                    key: prefix.clone(),
                    keys_only: true,
                    ..Default::default()
                })
                .await?;
            let names: Vec<String> = stored.kvs.iter().map(|kv| under(&prefix, &kv.key)).collect();
            let trim = decisions::trim(&names, fresh.len(), keep);
            let chunk = |name: &str| self.key("decisions", &format!("{kind}/{name}"));
            let edge = match names.get(trim.whole) {
                Some(edge) if trim.cut > 0 => self
                    .range(pb::RangeRequest {
                        key: chunk(edge),
                        ..Default::default()
                    })
                    .await?
                    .kvs
                    .pop()
                    .map(|kv| kv.value),
                _ => None,
            };
            changes.extend(
                decisions::appended(&names, &trim, edge, fresh)
                    .into_iter()
                    .map(|(name, value)| (chunk(&name), value)),
            );
        }
        self.write_all(changes).await
    }

    async fn read_decisions(
        &self,
        kind: &str,
        after: &str,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let prefix = self.key("decisions", &format!("{kind}/"));
        let mut key = self.key("decisions", &format!("{kind}/{after}"));
        let mut page = decisions::Page::new(after, limit);
        // A few chunks at a time: each may hold hundreds of entries.
        while !page.full() {
            let chunks = self
                .range(pb::RangeRequest {
                    range_end: members::prefix_end(&prefix),
                    key: key.clone(),
                    limit: 4,
                    ..Default::default()
                })
                .await?;
            let Some(last) = chunks.kvs.last() else {
                break;
            };
            key = last.key.clone();
            key.push(0);
            let more = chunks.more;
            for kv in chunks.kvs {
                if page.take(&under(&prefix, &kv.key), kv.value) {
                    break;
                }
            }
            if !more {
                break;
            }
        }
        Ok(page.entries)
    }
}

/// A key's name under `prefix`.
fn under(prefix: &[u8], key: &[u8]) -> String {
    String::from_utf8_lossy(&key[prefix.len().min(key.len())..]).into_owned()
}

impl EtcdStore {
    async fn range(&self, request: pb::RangeRequest) -> Result<pb::RangeResponse, StoreError> {
        self.kv
            .call(|mut c| {
                let request = request.clone();
                async move { c.range(request).await }
            })
            .await
            .map_err(|e| unavailable(&self.settings, e))
    }

    /// Writes every change, sent together so they share transactions.
    async fn write_all(&self, changes: Vec<(Vec<u8>, Option<Vec<u8>>)>) -> Result<(), StoreError> {
        let mut replies = Vec::with_capacity(changes.len());
        for (key, value) in changes {
            let (tx, rx) = oneshot::channel();
            self.writes
                .send((Write { key, value }, tx))
                .await
                .map_err(|_| StoreError::Closed)?;
            replies.push(rx);
        }
        for rx in replies {
            rx.await
                .map_err(|_| StoreError::Closed)?
                .map_err(|e| unavailable(&self.settings, e))?;
        }
        Ok(())
    }
}
