//! Join tokens an operator controls: each is stored (its secret only as a
//! SHA-256) when made, lives at most the server's maximum lifetime, lets
//! one named node join once (or several new nodes, a counted number of
//! times), and can be listed and revoked. A token is used up in the store
//! before the certificate it pays for is handed out, so a crash never lets
//! it be used twice.
//!
//! The text is `berth2.<CA fingerprint>.<id>.<secret>`: the agent pins the CA
//! by the fingerprint before it sends anything; the server finds the record
//! by the id and compares the secret's hash.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

pub use berth_model::credentials::JoinToken;
use berth_model::credentials::{TOKEN_PREFIX, hex};
use berth_store::{Store, StoreError, TokenRecord};

/// Live tokens at most: each is a record in the store.
const MAX_TOKENS: usize = 1000;
/// Joins one token may allow.
pub const MAX_USES: u32 = 1000;

/// How often joins may be tried from everywhere by default, in a minute
/// (`joins_per_minute`); one address may take a sixth of it.
pub const JOINS_PER_MINUTE: u32 = 60;
const MINUTE: Duration = Duration::from_secs(60);
/// Addresses remembered by the limiter; past this, the oldest windows go.
const MAX_ADDRESSES: usize = 4096;

fn sha256_hex(text: &str) -> String {
    hex(&Sha256::digest(text.as_bytes()))
}

/// Two hashes compared in constant time.
fn same_hash(a: &str, b: &str) -> bool {
    a.bytes()
        .zip(b.bytes())
        .fold(a.len() ^ b.len(), |d, (x, y)| d | usize::from(x ^ y))
        == 0
}

use berth_model::clock::now_ms;

/// What an operator asks for.
#[derive(Clone, Debug)]
pub struct TokenRequest {
    pub ttl: Duration,
    /// The one node it is for; `None` asks for a token of `uses` joins.
    pub node: Option<String>,
    pub uses: u32,
    pub replace: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Unreadable(#[from] berth_model::credentials::TokenError),
    /// The agent's certificate request could not be signed.
    #[error(transparent)]
    Certificate(#[from] crate::pki::PkiError),
    #[error("too many joins from {0} in the last minute; try again later")]
    TooMany(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<TokenError> for tonic::Status {
    fn from(e: TokenError) -> tonic::Status {
        let message = e.to_string();
        match e {
            TokenError::Invalid(_) | TokenError::Certificate(_) => tonic::Status::invalid_argument(message),
            TokenError::Refused(_) | TokenError::Unreadable(_) => tonic::Status::permission_denied(message),
            TokenError::TooMany(_) => tonic::Status::resource_exhausted(message),
            TokenError::Store(_) => tonic::Status::unavailable(message),
        }
    }
}

/// Counts attempts in fixed windows, per address and overall.
struct Limiter {
    by_address: HashMap<IpAddr, (Instant, u32)>,
    overall: Option<(Instant, u32)>,
    per_minute: u32,
}

fn within(window: &mut (Instant, u32), (most, length): (u32, Duration), now: Instant) -> bool {
    if now.duration_since(window.0) >= length {
        *window = (now, 0);
    }
    window.1 += 1;
    window.1 <= most
}

impl Limiter {
    fn new(per_minute: u32) -> Self {
        Limiter {
            by_address: HashMap::new(),
            overall: None,
            per_minute: per_minute.max(1),
        }
    }

    fn admit(&mut self, from: Option<IpAddr>, now: Instant) -> bool {
        let overall = self.overall.get_or_insert((now, 0));
        if !within(overall, (self.per_minute, MINUTE), now) {
            return false;
        }
        let per_address = (self.per_minute / 6).max(1);
        let Some(ip) = from else { return true };
        if self.by_address.len() >= MAX_ADDRESSES && !self.by_address.contains_key(&ip) {
            self.by_address
                .retain(|_, (start, _)| now.duration_since(*start) < MINUTE);
            if self.by_address.len() >= MAX_ADDRESSES {
                return false;
            }
        }
        within(
            self.by_address.entry(ip).or_insert((now, 0)),
            (per_address, MINUTE),
            now,
        )
    }
}

pub struct JoinTokens {
    store: Arc<dyn Store>,
    ca_fingerprint: String,
    max_ttl: Duration,
    /// Held across the store write that uses a token up: joins are rare,
    /// and two joins must not both spend its last use.
    records: tokio::sync::Mutex<BTreeMap<String, TokenRecord>>,
    limiter: std::sync::Mutex<Limiter>,
    /// Tokens that ended since this server started, so a join with one is
    /// told how it ended; in memory only, the newest [`ENDED_KEPT`].
    ended: std::sync::Mutex<std::collections::VecDeque<EndedToken>>,
}

/// Ended tokens remembered for their refusals' sake.
const ENDED_KEPT: usize = 1024;

/// How a token stopped being valid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    Revoked,
    UsedUp,
}

/// A token that ended: its id and its secret's hash (a refusal says how it
/// ended only to whoever holds the secret).
struct EndedToken {
    id: String,
    secret_sha256: String,
    how: Ended,
}

impl JoinTokens {
    /// The tokens kept in `store`, for the CA with `ca_fingerprint`.
    pub fn load(
        store: Arc<dyn Store>,
        ca_fingerprint: String,
        max_ttl: Duration,
    ) -> Result<Self, StoreError> {
        let records = store
            .load_tokens()?
            .into_iter()
            .map(|t| (t.id.clone(), t))
            .collect();
        Ok(JoinTokens {
            store,
            ca_fingerprint,
            max_ttl,
            records: tokio::sync::Mutex::new(records),
            limiter: std::sync::Mutex::new(Limiter::new(JOINS_PER_MINUTE)),
            ended: Default::default(),
        })
    }

    /// How many joins may be tried in a minute from everywhere (one
    /// address: a sixth of it); [`JOINS_PER_MINUTE`] by default.
    pub fn with_joins_per_minute(self, per_minute: u32) -> Self {
        *self.limiter.lock().unwrap_or_else(|p| p.into_inner()) = Limiter::new(per_minute);
        self
    }

    pub fn max_ttl(&self) -> Duration {
        self.max_ttl
    }

    /// A new token: its text (shown once, never kept) and its record.
    pub async fn create(&self, request: TokenRequest) -> Result<(String, TokenRecord), TokenError> {
        let invalid = |m: String| Err(TokenError::Invalid(m));
        if request.ttl.is_zero() || request.ttl > self.max_ttl {
            return invalid(format!(
                "a join token lives at most {} on this server (join_token_max_ttl); asked for {}",
                humantime::format_duration(self.max_ttl),
                humantime::format_duration(request.ttl)
            ));
        }
        let uses = match (&request.node, request.uses) {
            (Some(node), 0 | 1) => {
                berth_model::bounds::name(node).map_err(|e| TokenError::Invalid(format!("node {e}")))?;
                1
            }
            (Some(_), _) => return invalid("a token for one node is used once; leave out --uses".into()),
            (None, 0) => {
                return invalid(
                    "name the node the token is for (--node NAME), or say how many new nodes may join with it (--uses N)"
                        .into(),
                );
            }
            (None, n) if n > MAX_USES => return invalid(format!("--uses is at most {MAX_USES}")),
            (None, n) => n,
        };
        if request.replace && request.node.is_none() {
            return invalid("--replace takes over one named node's identity: give --node".into());
        }
        let now = now_ms();
        let mut records = self.records.lock().await;
        let expired: Vec<String> = records
            .values()
            .filter(|t| t.expires_ms < now)
            .map(|t| t.id.clone())
            .collect();
        for id in expired {
            self.store.remove_token(&id).await?;
            records.remove(&id);
        }
        if records.len() >= MAX_TOKENS {
            return invalid(format!(
                "{MAX_TOKENS} join tokens are live already: revoke some (`berth cluster token list`, `revoke ID`)"
            ));
        }
        let (id, secret) = {
            let mut rng = rand::rng();
            (hex(&rng.random::<[u8; 8]>()), hex(&rng.random::<[u8; 32]>()))
        };
        let record = TokenRecord {
            id: id.clone(),
            secret_sha256: sha256_hex(&secret),
            node: request.node,
            uses_left: uses,
            expires_ms: now + request.ttl.as_millis() as u64,
            created_ms: now,
            replace: request.replace,
        };
        self.store.put_token(&record).await?;
        records.insert(id.clone(), record.clone());
        let text = format!("{TOKEN_PREFIX}.{}.{id}.{secret}", self.ca_fingerprint);
        Ok((text, record))
    }

    /// Every live token, oldest first.
    pub async fn list(&self) -> Vec<TokenRecord> {
        let mut out: Vec<TokenRecord> = self.records.lock().await.values().cloned().collect();
        out.sort_by_key(|t| (t.created_ms, t.id.clone()));
        out
    }

    /// Removes a token; false when there was none with that id.
    pub async fn revoke(&self, id: &str) -> Result<bool, StoreError> {
        let mut records = self.records.lock().await;
        if !records.contains_key(id) {
            return Ok(false);
        }
        self.store.remove_token(id).await?;
        if let Some(r) = records.remove(id) {
            self.remember_ended(&r, Ended::Revoked);
        }
        Ok(true)
    }

    fn remember_ended(&self, r: &TokenRecord, how: Ended) {
        let mut ended = self.ended.lock().unwrap_or_else(|p| p.into_inner());
        if ended.len() >= ENDED_KEPT {
            ended.pop_front();
        }
        ended.push_back(EndedToken {
            id: r.id.clone(),
            secret_sha256: r.secret_sha256.clone(),
            how,
        });
    }

    /// How the token `id` with secret hash `presented` ended, if it did
    /// since this server started.
    fn ended(&self, id: &str, presented: &str) -> Option<Ended> {
        let ended = self.ended.lock().unwrap_or_else(|p| p.into_inner());
        ended
            .iter()
            .rev()
            .find(|e| e.id == id && same_hash(presented, &e.secret_sha256))
            .map(|e| e.how)
    }

    /// Whether a join from `from` may be tried now.
    pub fn admit(&self, from: Option<IpAddr>) -> Result<(), TokenError> {
        let admitted = self
            .limiter
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .admit(from, Instant::now());
        match admitted {
            true => Ok(()),
            false => Err(TokenError::TooMany(
                from.map_or_else(|| "everywhere".into(), |ip| ip.to_string()),
            )),
        }
    }

    /// Spends one use of the token `text` for `node`, durably, and returns
    /// its record. `taken`: the node already holds an identity (a
    /// certificate, or a live session), which only a replacing token may take.
    pub async fn redeem(&self, text: &str, node: &str, taken: bool) -> Result<TokenRecord, TokenError> {
        let refused = |m: String| Err(TokenError::Refused(m));
        let token = JoinToken::parse(text)?;
        if token.ca_fingerprint != self.ca_fingerprint {
            return refused(
                "the join token is for another cluster (its CA fingerprint is not this one's)".into(),
            );
        }
        let mut records = self.records.lock().await;
        let presented = sha256_hex(token.secret());
        let Some(record) = records.get(&token.id).cloned() else {
            return refused(match self.ended(&token.id, &presented) {
                Some(Ended::Revoked) => "the join token was revoked: `berth cluster token` makes a new one".into(),
                Some(Ended::UsedUp) => {
                    "the join token is used up (each join spends one use): `berth cluster token` makes a new one".into()
                }
                None => "the join token is not known to this cluster (never made here, or ended before the server last started)".into(),
            });
        };
        if !same_hash(&presented, &record.secret_sha256) {
            return refused("the join token is not valid (a wrong or altered token)".into());
        }
        if record.expires_ms < now_ms() {
            return refused("the join token has expired: `berth cluster token` makes a new one".into());
        }
        if let Some(only) = &record.node
            && only != node
        {
            return refused(format!(
                "the join token is for node {}, not {}",
                berth_model::text::echo(only),
                berth_model::text::echo(node)
            ));
        }
        if taken && !record.replace {
            return refused(format!(
                "node {} has joined already: `berth node remove {}` first, or make a token with --node {} --replace to take its identity over",
                berth_model::text::echo(node),
                berth_model::text::shell_word(node),
                berth_model::text::shell_word(node),
            ));
        }
        let mut spent = record.clone();
        spent.uses_left -= 1;
        if spent.uses_left == 0 {
            self.store.remove_token(&spent.id).await?;
            records.remove(&spent.id);
            self.remember_ended(&spent, Ended::UsedUp);
        } else {
            self.store.put_token(&spent).await?;
            records.insert(spent.id.clone(), spent.clone());
        }
        Ok(spent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_store::RedbStore;

    fn tokens(dir: &std::path::Path) -> JoinTokens {
        let store: Arc<dyn Store> = Arc::new(RedbStore::open(&dir.join("s.redb")).unwrap());
        JoinTokens::load(store, "ab".repeat(32), Duration::from_secs(3600)).unwrap()
    }

    fn for_node(node: &str) -> TokenRequest {
        TokenRequest {
            ttl: Duration::from_secs(600),
            node: Some(node.into()),
            uses: 0,
            replace: false,
        }
    }

    #[tokio::test]
    async fn a_token_joins_its_node_once_and_is_stored_hashed() {
        let dir = tempfile::tempdir().unwrap();
        let t = tokens(dir.path());
        let (text, record) = t.create(for_node("node-a")).await.unwrap();
        let secret = text.rsplit('.').next().unwrap();
        assert_ne!(record.secret_sha256, secret);
        assert!(
            t.redeem(&text, "node-b", false)
                .await
                .unwrap_err()
                .to_string()
                .contains("for node")
        );
        assert!(
            t.redeem(&text, "node-a", true)
                .await
                .unwrap_err()
                .to_string()
                .contains("joined already")
        );
        t.redeem(&text, "node-a", false).await.unwrap();
        let again = t.redeem(&text, "node-a", false).await.unwrap_err();
        assert!(again.to_string().contains("is used up"), "{again}");
        assert!(t.list().await.is_empty());
    }

    #[tokio::test]
    async fn tokens_survive_a_restart_and_can_be_revoked() {
        let dir = tempfile::tempdir().unwrap();
        let text = {
            let t = tokens(dir.path());
            let (text, _) = t
                .create(TokenRequest {
                    uses: 3,
                    node: None,
                    ..for_node("x")
                })
                .await
                .unwrap();
            t.redeem(&text, "n1", false).await.unwrap();
            text
        };
        let t = tokens(dir.path());
        let listed = t.list().await;
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].uses_left, 2);
        let raw = std::fs::read(dir.path().join("s.redb")).unwrap();
        let secret = text.rsplit('.').next().unwrap().as_bytes();
        assert!(
            !raw.windows(secret.len()).any(|w| w == secret),
            "the secret is not stored"
        );
        assert!(t.revoke(&listed[0].id).await.unwrap());
        assert!(!t.revoke(&listed[0].id).await.unwrap());
        let revoked = t.redeem(&text, "n2", false).await.unwrap_err().to_string();
        assert!(revoked.contains("was revoked"), "{revoked}");
        // How it ended is told only with its secret: another secret under
        // the same id is simply unknown.
        let (head, _) = text.rsplit_once('.').unwrap();
        let forged = format!("{head}.{}", "0".repeat(text.len() - head.len() - 1));
        let unknown = t.redeem(&forged, "n2", false).await.unwrap_err().to_string();
        assert!(unknown.contains("not known to this cluster"), "{unknown}");
        // After a restart the server no longer knows how it ended.
        drop(t);
        let t = tokens(dir.path());
        let unknown = t.redeem(&text, "n2", false).await.unwrap_err().to_string();
        assert!(unknown.contains("not known to this cluster"), "{unknown}");
    }

    #[tokio::test]
    async fn requests_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let t = tokens(dir.path());
        let long = TokenRequest {
            ttl: Duration::from_secs(7200),
            ..for_node("a")
        };
        assert!(
            t.create(long)
                .await
                .unwrap_err()
                .to_string()
                .contains("at most 1h")
        );
        let neither = TokenRequest {
            node: None,
            ..for_node("a")
        };
        assert!(
            t.create(neither)
                .await
                .unwrap_err()
                .to_string()
                .contains("--uses")
        );
        let replace_any = TokenRequest {
            node: None,
            uses: 2,
            replace: true,
            ..for_node("a")
        };
        assert!(t.create(replace_any).await.is_err());
        assert!(t.create(for_node("../x")).await.is_err());
        let (text, _) = t.create(for_node("a")).await.unwrap();
        let mut altered = text.clone();
        let last = altered.pop().unwrap();
        altered.push(if last == '0' { '1' } else { '0' });
        assert!(
            t.redeem(&altered, "a", false)
                .await
                .unwrap_err()
                .to_string()
                .contains("altered")
        );
        assert!(
            JoinToken::parse("berth1.aa.bb.cc").unwrap_err()
                == berth_model::credentials::TokenError::OldRelease
        );
    }

    #[test]
    fn joins_are_limited_per_address_and_overall() {
        let mut l = Limiter::new(JOINS_PER_MINUTE);
        let now = Instant::now();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        assert!((0..10).all(|_| l.admit(Some(a), now)));
        assert!(!l.admit(Some(a), now), "one address is held back");
        assert!(
            l.admit(Some(a), now + MINUTE),
            "and let in once the window passes"
        );
        let mut l = Limiter::new(JOINS_PER_MINUTE);
        let admitted = (0..200u32)
            .filter(|i| l.admit(Some(IpAddr::from([10, 0, (i / 256) as u8, (i % 256) as u8])), now))
            .count();
        assert_eq!(admitted, 60);
    }

    #[test]
    fn a_fleet_sized_rate_lets_a_fleet_join_from_one_address() {
        let mut l = Limiter::new(60_000);
        let now = Instant::now();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        assert_eq!((0..20_000).filter(|_| l.admit(Some(a), now)).count(), 10_000);
        // Every attempt counts toward the overall limit, refused ones too.
        assert_eq!((0..60_000).filter(|_| l.admit(None, now)).count(), 40_000);
    }
}
