//! Durable state behind one trait, so the manager does not know which engine
//! keeps it. [`RedbStore`] (one file on this machine) is the default.
//!
//! A store records the schema version its records are written in. A store
//! written before versions were recorded is version 1; a store from a newer
//! release (a higher version) is refused at open, never rewritten.

mod checks;
mod committer;
mod decisions;
mod embedded;
mod etcd;
mod load;
mod private;

use std::path::PathBuf;
use std::sync::Arc;

use berth_model::VolumeRecord;

pub use checks::{CaseVerdict, CheckCaseRecord, PluginCheckRecord};
pub use committer::{Change, CommitError, Committer, Table, Waits};
pub use embedded::RedbStore;
pub use embedded::check::{StoreCheck, check_file};
pub use embedded::create_beside;
pub use etcd::{DEPOSED, EtcdSettings, EtcdStore, EtcdTls, Fence, Mirror, Warm};
pub use etcd::{EtcdError, Members, range_all, unavailable};
pub use private::{private_dir, private_file};

/// The record format this release reads and writes.
pub const SCHEMA_VERSION: u64 = 1;

/// A failure of the embedded store's database, as the store reports it.
pub(crate) fn failed(e: impl std::fmt::Display) -> StoreError {
    StoreError::Failed(e.to_string())
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("opening the store {path}: {message}")]
    Open { path: PathBuf, message: String },
    #[error(
        "the store {path} was written by a newer release of Berth (schema version {found}; this release reads up to {supported}): run that release, or restore a backup made by this one; the store was not changed"
    )]
    NewerSchema {
        path: PathBuf,
        found: u64,
        supported: u64,
    },
    #[error("volume {id} in the store is unreadable: {message}")]
    Unreadable { id: String, message: String },
    #[error("encoding volume {id}: {message}")]
    Encode { id: String, message: String },
    #[error("etcd ({endpoints}): {message}")]
    Etcd { endpoints: String, message: String },
    #[error("the store is closed")]
    Closed,
    #[error(transparent)]
    Commit(#[from] committer::CommitError),
    #[error("the store failed: {0}")]
    Failed(String),
}

/// A node that has registered, kept so a restarted server still knows it
/// (shown as unknown until its agent is back).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NodeRecord {
    pub name: String,
    #[serde(default)]
    pub labels: std::collections::BTreeMap<String, String>,
    /// The node plugins it reported, by the operator's plugin name, with
    /// what NodeGetInfo said (kept so ControllerUnpublish has the node id
    /// while the agent is away).
    #[serde(default)]
    pub plugins: std::collections::BTreeMap<String, Option<berth_csi::fingerprint::NodeInfo>>,
    /// Left out of placement, its publications undone (`berth node drain`).
    #[serde(default)]
    pub draining: bool,
    /// Declared dead (`berth node forget --force`): node-side steps are
    /// skipped, and its agent is refused until the node is removed.
    #[serde(default)]
    pub forgotten: bool,
    /// The SHA-256 fingerprint of the certificate the node joined with; the
    /// only one its agent is let in with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert: Option<String>,
    /// Where the node's agent stages and publishes, as it last registered:
    /// volumes show their paths while the agent is away.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paths: Option<berth_model::Paths>,
}

/// A join token as the store keeps it: never the secret, only its SHA-256,
/// so a reader of the store cannot join with it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TokenRecord {
    /// The token's public part, also how it is listed and revoked.
    pub id: String,
    /// Hex SHA-256 of the token's secret part.
    pub secret_sha256: String,
    /// The one node it lets join; `None` for a token of several uses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Joins it still allows.
    pub uses_left: u32,
    /// Unix milliseconds after which it is refused (the server's clock).
    pub expires_ms: u64,
    pub created_ms: u64,
    /// It may take over the name of a node that holds a certificate.
    #[serde(default)]
    pub replace: bool,
}

/// What the API's access control keeps: tokens (never a secret, only its
/// SHA-256) and the policies they name. The store holds them as it finds
/// them; their rules are read by the access control, not here.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AclRecord {
    Token(AclTokenRecord),
    Policy(AclPolicyRecord),
    Quota(QuotaRecord),
    Certificate(AclCertificateRecord),
}

impl AclRecord {
    /// The record's key: `token/<accessor>`, `policy/<name>`,
    /// `quota/<namespace>` or `certificate/<subject>`.
    pub fn key(&self) -> String {
        match self {
            AclRecord::Token(t) => format!("token/{}", t.accessor),
            AclRecord::Policy(p) => format!("policy/{}", p.name),
            AclRecord::Quota(q) => format!("quota/{}", q.namespace),
            AclRecord::Certificate(c) => format!("certificate/{}", c.subject),
        }
    }
}

/// A client certificate's subject bound to policies: whoever presents a
/// certificate of the API's client CA with that common name holds them.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AclCertificateRecord {
    /// The certificate subject's common name.
    pub subject: String,
    /// The policies it holds, by name.
    pub policies: Vec<String>,
    pub modified_ms: u64,
}

/// An ACL token: who may call the API, with which policies.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AclTokenRecord {
    /// The token's public part: how it is listed, revoked and audited.
    pub accessor: String,
    /// What the operator called it (a person, a CI job).
    pub name: String,
    /// The policies it holds, by name.
    pub policies: Vec<String>,
    /// It may do everything (what the API socket's user may).
    pub management: bool,
    /// Hex SHA-256 of the token's secret part.
    pub secret_sha256: String,
    pub created_ms: u64,
    /// Unix milliseconds after which it is refused; none: until revoked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_ms: Option<u64>,
}

/// What a namespace may hold at most; a limit not set is no limit.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QuotaRecord {
    pub namespace: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volumes: Option<u64>,
    /// Bytes the namespace's volumes may ask for (their required bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshots: Option<u64>,
}

/// An ACL policy: its rules as the operator wrote them (TOML).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AclPolicyRecord {
    pub name: String,
    pub description: String,
    pub rules: String,
    pub modified_ms: u64,
}

/// The cluster's policy set as stored: its `[[policy]]` tables, every
/// module pinned by digest, and a version that every apply raises.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PolicySetRecord {
    pub version: u64,
    /// Unix milliseconds (the applying server's clock).
    pub applied_ms: u64,
    /// The server that stored it.
    #[serde(default)]
    pub applied_by: String,
    pub text: String,
    /// How this version came to be: `apply`, `promote naming`, `rollback to
    /// version 3`, or the guard's reason for rolling back. Sets stored before
    /// rollouts have none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub change: String,
    /// After a promotion, the decisions promoted: the guard watches their
    /// modules until its window closes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub promoted: Vec<String>,
    /// The versions before this one, newest last (at most [`SET_HISTORY`]):
    /// what a rollback returns to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<PriorSet>,
}

/// New entries of one kind of the decision log.
#[derive(Clone, Debug)]
pub struct LoggedBatch {
    pub kind: String,
    /// Keys that sort in time order, oldest first, and each entry's JSON.
    pub entries: Vec<(String, Vec<u8>)>,
}

impl LoggedBatch {
    /// The kind and the entries a ring of `keep` stores: the newest `keep`
    /// (a batch larger than the ring loses its oldest).
    pub fn kept(self, keep: usize) -> (String, Vec<(String, Vec<u8>)>) {
        let mut entries = self.entries;
        entries.drain(..entries.len().saturating_sub(keep));
        (self.kind, entries)
    }
}

/// Versions of the policy set kept for rollback.
pub const SET_HISTORY: usize = 8;

/// An earlier version of the policy set.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PriorSet {
    pub version: u64,
    pub applied_ms: u64,
    #[serde(default)]
    pub applied_by: String,
    pub text: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub change: String,
}

impl PolicySetRecord {
    /// The version after this one: `text`, stored by `server` for `change`,
    /// with this one kept in the history.
    pub fn next(&self, text: String, server: &str, change: String, promoted: Vec<String>) -> PolicySetRecord {
        let mut history = self.history.clone();
        history.push(PriorSet {
            version: self.version,
            applied_ms: self.applied_ms,
            applied_by: self.applied_by.clone(),
            text: self.text.clone(),
            change: self.change.clone(),
        });
        let over = history.len().saturating_sub(SET_HISTORY);
        history.drain(..over);
        PolicySetRecord {
            version: self.version + 1,
            applied_ms: berth_model::clock::now_ms(),
            applied_by: server.to_string(),
            text,
            change,
            promoted,
            history,
        }
    }

    /// The first version.
    pub fn first(text: String, server: &str, change: String) -> PolicySetRecord {
        PolicySetRecord {
            version: 1,
            applied_ms: berth_model::clock::now_ms(),
            applied_by: server.to_string(),
            text,
            change,
            promoted: Vec::new(),
            history: Vec::new(),
        }
    }
}

/// Where volume records live. Writes return once durable; concurrent writes
/// may share one commit.
#[tonic::async_trait]
pub trait Store: Send + Sync {
    /// Every stored volume (at start).
    fn load(&self) -> Result<Vec<VolumeRecord>, StoreError>;
    /// Every stored volume, one at a time and in no particular order, so
    /// that no list of them all is held at once: what a start uses.
    fn load_each(&self, each: &mut dyn FnMut(VolumeRecord)) -> Result<(), StoreError> {
        self.load()?.into_iter().for_each(each);
        Ok(())
    }
    /// Every stored volume with what the volume table indexes, one at a
    /// time: kept as stored (decoded when read) where the store can, so a
    /// start indexes a million volumes without building a million records.
    fn load_keyed(&self, each: &mut dyn FnMut(Loaded)) -> Result<(), StoreError> {
        self.load_each(&mut |r| each(Loaded::Record(r)))
    }
    /// How many volumes are stored, when the store can tell without
    /// reading them (0 otherwise): room is made for them before loading.
    fn volume_count(&self) -> Result<u64, StoreError> {
        Ok(0)
    }
    /// Stores a record, replacing the one with its id.
    async fn put(&self, record: &VolumeRecord) -> Result<(), StoreError>;
    /// Removes a record; removing one that is not there is not an error.
    async fn remove(&self, id: &str) -> Result<(), StoreError>;
    /// Every registered node (at start).
    fn load_nodes(&self) -> Result<Vec<NodeRecord>, StoreError>;
    /// Stores a node, replacing the one with its name.
    async fn put_node(&self, node: &NodeRecord) -> Result<(), StoreError>;
    /// Forgets a node; removing one that is not there is not an error.
    async fn remove_node(&self, name: &str) -> Result<(), StoreError>;
    /// Every join token not yet removed (at start).
    fn load_tokens(&self) -> Result<Vec<TokenRecord>, StoreError>;
    /// Stores a token, replacing the one with its id.
    async fn put_token(&self, token: &TokenRecord) -> Result<(), StoreError>;
    /// Removes a token; removing one that is not there is not an error.
    async fn remove_token(&self, id: &str) -> Result<(), StoreError>;
    /// Every ACL token and policy (at start).
    fn load_acl(&self) -> Result<Vec<AclRecord>, StoreError>;
    /// Stores an ACL record, replacing the one with its key.
    async fn put_acl(&self, record: &AclRecord) -> Result<(), StoreError>;
    /// Removes the ACL record of that key; one not there is not an error.
    async fn remove_acl(&self, key: &str) -> Result<(), StoreError>;
    /// The cluster's policy set; none before the first is stored.
    fn load_policy_set(&self) -> Result<Option<PolicySetRecord>, StoreError>;
    /// Stores the policy set, replacing the one before.
    async fn put_policy_set(&self, set: &PolicySetRecord) -> Result<(), StoreError>;
    /// The latest conformance report of each plugin that has one.
    fn load_plugin_checks(&self) -> Result<Vec<PluginCheckRecord>, StoreError>;
    /// Stores a plugin's report, replacing the one before.
    async fn put_plugin_check(&self, check: &PluginCheckRecord) -> Result<(), StoreError>;
    /// Appends entries to the decision log, each kind's (each a key that
    /// sorts in time order, and its JSON) stored together in a chunk or a
    /// few, and drops each kind's oldest chunks while the newer ones still
    /// hold `keep` entries: one write, one commit.
    async fn append_decisions(&self, batches: Vec<LoggedBatch>, keep: usize) -> Result<(), StoreError>;
    /// Up to `limit` entries of the decision log of `kind` with keys after
    /// `after` (from the oldest when empty), oldest first.
    async fn read_decisions(
        &self,
        kind: &str,
        after: &str,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError>;
}

/// The most a stored record may take: below etcd's default request limit
/// (1.5 MiB) with room for the key and the transaction around it.
pub const MAX_RECORD_BYTES: usize = 1 << 20;

/// What a record's encoding starts with: a published volume with its events
/// and explanation takes 1–3 KiB.
const ENCODE_ROOM: usize = 4096;

/// A record's stored form, within [`MAX_RECORD_BYTES`]: when its events
/// would take it past that, the oldest of them make room (the record in
/// memory keeps them until its next change).
pub fn encode(record: &VolumeRecord) -> Result<Vec<u8>, StoreError> {
    let encoded = |r: &VolumeRecord| -> Result<Vec<u8>, StoreError> {
        // Room for a usual record from the start: grown in steps, the buffer
        // was copied four or five times on every write.
        let mut bytes = Vec::with_capacity(ENCODE_ROOM);
        serde_json::to_writer(&mut bytes, r).map_err(|e| StoreError::Encode {
            id: record.id.clone(),
            message: e.to_string(),
        })?;
        Ok(bytes)
    };
    let mut bytes = encoded(record)?;
    if bytes.len() <= MAX_RECORD_BYTES {
        return Ok(bytes);
    }
    let mut smaller = record.clone();
    while bytes.len() > MAX_RECORD_BYTES && !smaller.events.is_empty() {
        let drop = smaller.events.len().div_ceil(4);
        std::sync::Arc::make_mut(&mut smaller.events).drain(..drop);
        bytes = encoded(&smaller)?;
    }
    if bytes.len() > MAX_RECORD_BYTES {
        return Err(StoreError::Encode {
            id: record.id.clone(),
            message: format!(
                "the record takes {} bytes, more than the {MAX_RECORD_BYTES} a record may",
                bytes.len()
            ),
        });
    }
    Ok(bytes)
}

/// A node's or a token's stored form.
pub fn encode_json(id: &str, value: &impl serde::Serialize) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(value).map_err(|e| StoreError::Encode {
        id: id.to_string(),
        message: e.to_string(),
    })
}

/// A volume as a start reads it.
pub enum Loaded {
    Record(VolumeRecord),
    Stored(StoredVolume),
}

/// A volume's record as stored, with what the table indexes read from it:
/// decoded in full (with [`decode`]) only when it is read.
pub struct StoredVolume {
    pub keys: berth_model::RecordKeys,
    /// The stored text, checked as UTF-8.
    pub text: Arc<[u8]>,
}

/// Reads a stored record's keys and keeps its text; the same checks as
/// [`decode`] makes of what the keys hold.
pub fn keyed(id: &str, bytes: &[u8]) -> Result<StoredVolume, StoreError> {
    let unreadable = |message: String| StoreError::Unreadable {
        id: id.to_string(),
        message,
    };
    let text = std::str::from_utf8(bytes).map_err(|e| unreadable(e.to_string()))?;
    let keys: berth_model::RecordKeys = serde_json::from_str(text).map_err(|e| unreadable(e.to_string()))?;
    berth_model::bounds::plain("volume id", &keys.id).map_err(|e| unreadable(e.to_string()))?;
    // Every release stores a record under its own id: one under another
    // key would be a second record of some volume, which the table, taking
    // each key's record as new, must never be handed.
    if keys.id != id {
        return Err(unreadable(format!(
            "it is stored under another volume's id: {:?}",
            keys.id
        )));
    }
    Ok(StoredVolume {
        keys,
        text: Arc::from(bytes),
    })
}

pub fn decode(id: &str, bytes: &[u8]) -> Result<VolumeRecord, StoreError> {
    let unreadable = |message: String| StoreError::Unreadable {
        id: id.to_string(),
        message,
    };
    // Checked as text once, whole: decoding from bytes checked each string
    // on its own, an eighth of the decoding time at start.
    let text = std::str::from_utf8(bytes).map_err(|e| unreadable(e.to_string()))?;
    let record: VolumeRecord = serde_json::from_str(text).map_err(|e| unreadable(e.to_string()))?;
    // A volume's id names its paths on nodes: whoever could write the store
    // must not be able to point them elsewhere.
    berth_model::bounds::plain("volume id", &record.id).map_err(|e| unreadable(e.to_string()))?;
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_model::{EVENT_MESSAGE_MAX, EVENT_STEP_MAX, FAILURE_MAX, VolumeSpec, new_id};

    #[test]
    fn a_record_keyed_reads_its_keys_and_refuses_another_volumes_id() {
        let r = VolumeRecord::new(
            new_id(),
            VolumeSpec {
                name: "data".into(),
                plugin: "hp".into(),
                ..Default::default()
            },
        );
        let text = serde_json::to_vec(&r).unwrap();
        let v = keyed(&r.id, &text).unwrap();
        assert_eq!(
            (v.keys.id.as_str(), v.keys.spec.name.as_str()),
            (r.id.as_str(), "data")
        );
        assert_eq!(&*v.text, &text[..]);
        assert_eq!(decode(&r.id, &v.text).unwrap(), r);
        match keyed("another", &text) {
            Err(StoreError::Unreadable { id, message }) => {
                assert_eq!(id, "another");
                assert!(message.contains(&r.id), "{message}");
            }
            other => panic!("expected the key refused, got {:?}", other.map(|v| v.keys)),
        }
    }

    #[test]
    fn a_batch_larger_than_the_ring_keeps_its_newest() {
        let batch = |n: usize| LoggedBatch {
            kind: "naming".into(),
            entries: (0..n).map(|i| (format!("{i:03}"), Vec::new())).collect(),
        };
        assert_eq!(batch(3).kept(10).1.len(), 3, "room for all");
        let (kind, kept) = batch(12).kept(10);
        assert_eq!(kind, "naming");
        assert_eq!(
            kept.first().map(|e| e.0.as_str()),
            Some("002"),
            "the oldest two go"
        );
    }

    #[test]
    fn a_policy_set_stored_before_rollouts_reads_and_its_history_is_bounded() {
        // As releases before promotion and rollback stored it.
        let old: PolicySetRecord =
            serde_json::from_str(r#"{"version":4,"applied_ms":7,"applied_by":"a","text":"t4"}"#).unwrap();
        assert!(old.history.is_empty() && old.change.is_empty() && old.promoted.is_empty());
        let mut set = old;
        for v in 5..20 {
            set = set.next(format!("t{v}"), "b", format!("apply {v}"), Vec::new());
        }
        assert_eq!(set.version, 19);
        assert_eq!(set.history.len(), SET_HISTORY);
        assert_eq!(set.history.last().map(|p| p.version), Some(18));
        assert_eq!(set.history[0].text, "t11");
        // And what older releases read of a new one: the fields they know.
        let json = serde_json::to_value(&set).unwrap();
        assert_eq!((&json["version"], &json["text"]), (&19.into(), &"t19".into()));
    }

    #[test]
    fn a_record_whose_id_is_not_a_plain_name_does_not_decode() {
        for id in ["../x", "a/b", "..", ""] {
            let r = VolumeRecord::new(id.into(), VolumeSpec::default());
            let bytes = serde_json::to_vec(&r).unwrap();
            assert!(decode("key", &bytes).is_err(), "{id:?}");
        }
        let r = VolumeRecord::new(new_id(), VolumeSpec::default());
        assert!(decode("key", &serde_json::to_vec(&r).unwrap()).is_ok());
    }

    #[test]
    fn a_record_at_every_bound_is_stored_within_the_limit_its_oldest_events_making_room() {
        let mut r = VolumeRecord::new(new_id(), VolumeSpec::default());
        // What a request may carry (4 KiB of parameters and of labels)...
        r.spec_mut().parameters.insert("p".into(), "x".repeat(4 << 10));
        r.spec_mut().labels.insert("l".into(), "y".repeat(4 << 10));
        // ...and what plugins and guests may say, at the most kept.
        for i in 0..1000u64 {
            r.note(
                1000,
                i,
                "s".repeat(10 * EVENT_STEP_MAX),
                "UNAVAILABLE",
                "m".repeat(10 * EVENT_MESSAGE_MAX),
            );
        }
        r.give_up("r".repeat(1 << 20));
        assert!(r.failure.as_ref().unwrap().len() <= FAILURE_MAX);
        assert!(
            r.failure
                .as_ref()
                .unwrap()
                .contains("[cut; 1048576 bytes in all]")
        );
        assert!(r.events.iter().all(|e| e.message.len() <= EVENT_MESSAGE_MAX));
        let bytes = encode(&r).unwrap();
        assert!(bytes.len() <= MAX_RECORD_BYTES, "{}", bytes.len());
        let back = decode(&r.id, &bytes).unwrap();
        assert!(!back.events.is_empty() && back.events.len() < 1000);
        assert_eq!(back.events.last(), r.events.last(), "the latest events are kept");
    }
}
