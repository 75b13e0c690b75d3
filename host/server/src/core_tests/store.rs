//! A store in memory: the `Store` contract (a write is visible to `load`
//! once it returns) with nothing that waits outside the runtime, so paused
//! time is not advanced under a write in flight.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::model::VolumeRecord;
use crate::store::{NodeRecord, PolicySetRecord, Store, StoreError, TokenRecord};

#[derive(Default)]
pub struct MemoryStore {
    volumes: Mutex<BTreeMap<String, VolumeRecord>>,
    nodes: Mutex<BTreeMap<String, NodeRecord>>,
    tokens: Mutex<BTreeMap<String, TokenRecord>>,
    acl: Mutex<BTreeMap<String, berth_store::AclRecord>>,
    checks: Mutex<BTreeMap<String, berth_store::PluginCheckRecord>>,
    policy_set: Mutex<Option<PolicySetRecord>>,
    decisions: Mutex<BTreeMap<(String, String), Vec<u8>>>,
    /// Volume records written, in order, for counting (and explaining) a
    /// lifecycle's writes.
    puts: Mutex<Vec<VolumeRecord>>,
    /// Set: every volume write answers with an error; `true`, after
    /// keeping it (what etcd does when its answer is lost on the way).
    failing: Mutex<Option<bool>>,
}

/// How the store answers volume writes.
#[derive(Clone, Copy)]
pub enum Writes {
    Answered,
    /// Kept, yet answered with an error.
    KeptUnanswered,
    Refused,
}

impl MemoryStore {
    /// The volume records written since the `since`th write.
    pub fn puts(&self, since: usize) -> Vec<VolumeRecord> {
        self.puts
            .lock()
            .unwrap()
            .get(since..)
            .unwrap_or_default()
            .to_vec()
    }

    pub fn writes(&self, how: Writes) {
        *self.failing.lock().unwrap() = match how {
            Writes::Answered => None,
            Writes::KeptUnanswered => Some(true),
            Writes::Refused => Some(false),
        };
    }

    /// The volume's record as stored (what a next leader would load).
    pub fn stored(&self, id: &str) -> Option<VolumeRecord> {
        self.volumes.lock().unwrap().get(id).cloned()
    }
}

#[tonic::async_trait]
impl Store for MemoryStore {
    fn load(&self) -> Result<Vec<VolumeRecord>, StoreError> {
        Ok(self.volumes.lock().unwrap().values().cloned().collect())
    }
    async fn put(&self, record: &VolumeRecord) -> Result<(), StoreError> {
        let failing = *self.failing.lock().unwrap();
        if failing != Some(false) {
            self.puts.lock().unwrap().push(record.clone());
            self.volumes
                .lock()
                .unwrap()
                .insert(record.id.clone(), record.clone());
        }
        match failing {
            None => Ok(()),
            Some(_) => Err(StoreError::Failed("no answer from the store".into())),
        }
    }
    async fn remove(&self, id: &str) -> Result<(), StoreError> {
        self.volumes.lock().unwrap().remove(id);
        Ok(())
    }
    fn load_nodes(&self) -> Result<Vec<NodeRecord>, StoreError> {
        Ok(self.nodes.lock().unwrap().values().cloned().collect())
    }
    async fn put_node(&self, node: &NodeRecord) -> Result<(), StoreError> {
        self.nodes.lock().unwrap().insert(node.name.clone(), node.clone());
        Ok(())
    }
    async fn remove_node(&self, name: &str) -> Result<(), StoreError> {
        self.nodes.lock().unwrap().remove(name);
        Ok(())
    }
    fn load_tokens(&self) -> Result<Vec<TokenRecord>, StoreError> {
        Ok(self.tokens.lock().unwrap().values().cloned().collect())
    }
    async fn put_token(&self, token: &TokenRecord) -> Result<(), StoreError> {
        self.tokens
            .lock()
            .unwrap()
            .insert(token.id.clone(), token.clone());
        Ok(())
    }
    async fn remove_token(&self, id: &str) -> Result<(), StoreError> {
        self.tokens.lock().unwrap().remove(id);
        Ok(())
    }
    fn load_acl(&self) -> Result<Vec<berth_store::AclRecord>, StoreError> {
        Ok(self.acl.lock().unwrap().values().cloned().collect())
    }
    async fn put_acl(&self, record: &berth_store::AclRecord) -> Result<(), StoreError> {
        self.acl.lock().unwrap().insert(record.key(), record.clone());
        Ok(())
    }
    async fn remove_acl(&self, key: &str) -> Result<(), StoreError> {
        self.acl.lock().unwrap().remove(key);
        Ok(())
    }
    fn load_plugin_checks(&self) -> Result<Vec<berth_store::PluginCheckRecord>, StoreError> {
        Ok(self.checks.lock().unwrap().values().cloned().collect())
    }
    async fn put_plugin_check(&self, check: &berth_store::PluginCheckRecord) -> Result<(), StoreError> {
        self.checks
            .lock()
            .unwrap()
            .insert(check.plugin.clone(), check.clone());
        Ok(())
    }
    fn load_policy_set(&self) -> Result<Option<PolicySetRecord>, StoreError> {
        Ok(self.policy_set.lock().unwrap().clone())
    }
    async fn put_policy_set(&self, set: &PolicySetRecord) -> Result<(), StoreError> {
        *self.policy_set.lock().unwrap() = Some(set.clone());
        Ok(())
    }
    async fn append_decisions(
        &self,
        batches: Vec<crate::store::LoggedBatch>,
        keep: usize,
    ) -> Result<(), StoreError> {
        let mut log = self.decisions.lock().unwrap();
        for batch in batches {
            for (key, json) in batch.entries {
                log.insert((batch.kind.clone(), key), json);
            }
            let of_kind: Vec<(String, String)> =
                log.keys().filter(|(k, _)| *k == batch.kind).cloned().collect();
            for key in of_kind.iter().take(of_kind.len().saturating_sub(keep)) {
                log.remove(key);
            }
        }
        Ok(())
    }
    async fn read_decisions(
        &self,
        kind: &str,
        after: &str,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        Ok(self
            .decisions
            .lock()
            .unwrap()
            .iter()
            .filter(|((k, key), _)| k == kind && key.as_str() > after)
            .take(limit)
            .map(|((_, key), json)| (key.clone(), json.clone()))
            .collect())
    }
}
