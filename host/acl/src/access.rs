//! The ACL state a leading server holds: tokens by accessor, policies by
//! name with their rules read; every change written to the store before it
//! takes effect, so what a caller was told holds after a restart or a
//! failover (the next term reads it back).
//!
//! Invariants:
//! - A revoked token is refused by the very next call (one server answers
//!   every call: followers pass theirs on to the leader).
//! - A secret is never kept, logged or answered after the one answer that
//!   made it; only its SHA-256 is stored.
//! - A token names only policies that exist when it is made; a policy
//!   deleted later grants nothing to the tokens still naming it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use berth_model::bounds::OutOfBounds;
use berth_model::clock::now_ms;
use berth_model::settings::ConfigError;
use berth_store::{AclCertificateRecord, AclPolicyRecord, AclRecord, AclTokenRecord, Store, StoreError};

use crate::bearer::{self, Minted};
use crate::capability::{Needs, VolumeCap};
use crate::rules::{Rules, combine};

/// Live tokens at most.
pub const MAX_TOKENS: usize = 4096;
/// Policies at most.
pub const MAX_POLICIES: usize = 512;
/// Policies one token may hold.
pub const MAX_TOKEN_POLICIES: usize = 32;
/// A policy's description, at most.
const DESCRIPTION_MAX: usize = 1024;

/// Who is calling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    /// The API socket's user (and a server passing on a call of its own
    /// socket's user): every capability.
    Management,
    /// The holder of a token.
    Token { accessor: String, name: String },
    /// Whoever presented a client certificate (of the API's client CA)
    /// whose subject's common name is bound to policies.
    Certificate { subject: String },
}

impl Caller {
    /// How the audit log and the metrics name the caller: never a secret.
    pub fn identity(&self) -> String {
        match self {
            Caller::Management => "management".into(),
            Caller::Token { accessor, .. } => format!("token:{accessor}"),
            Caller::Certificate { subject } => format!("cert:{subject}"),
        }
    }
}

impl std::fmt::Display for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Caller::Management => f.write_str("the management identity"),
            Caller::Token { accessor, name } => write!(f, "token {name:?} (accessor {accessor})"),
            Caller::Certificate { subject } => write!(f, "certificate subject {subject:?}"),
        }
    }
}

/// Why a caller is not known.
#[derive(Debug, thiserror::Error)]
pub enum Unauthenticated {
    #[error(
        "this API asks who you are: send an ACL token as `authorization: Bearer <token>` (BERTH_TOKEN), or present a client certificate of the API's client CA (BERTH_CLIENT_CERT)"
    )]
    NoToken,
    #[error(
        "certificate subject {subject:?} is bound to no policy: `berth acl certificate bind` names what it may do"
    )]
    Unbound { subject: String },
    #[error("the token sent is not an ACL token (they read berthacl.<accessor>.<secret>)")]
    NotAToken,
    #[error("the token is not valid: revoked, never made, or its secret is wrong")]
    Unknown,
    #[error("token {accessor} expired")]
    Expired { accessor: String },
}

/// A call its caller may not make: names the capability and the
/// namespace missing.
#[derive(Debug, thiserror::Error)]
#[error("{caller} lacks {needs}{}", namespace.as_ref().map(|n| format!(" in namespace {n:?}")).unwrap_or_default())]
pub struct Denied {
    pub caller: String,
    pub needs: Needs,
    pub namespace: Option<String>,
}

/// Why an ACL change was refused.
#[derive(Debug, thiserror::Error)]
pub enum AclError {
    #[error("policy {name:?}: {source}")]
    Rules {
        name: String,
        #[source]
        source: ConfigError,
    },
    #[error(transparent)]
    Name(#[from] OutOfBounds),
    #[error("description: at most {DESCRIPTION_MAX} bytes")]
    Description,
    #[error("no ACL policy named {0:?}")]
    NoPolicy(String),
    #[error("no ACL token with accessor {0:?}")]
    NoToken(String),
    #[error("no certificate subject {0:?} is bound")]
    NoCertificate(String),
    #[error("certificate subject {0:?}: 1 to 256 printable characters")]
    Subject(String),
    #[error("the ACLs are bootstrapped already: make more tokens with `berth acl token create`")]
    Bootstrapped,
    #[error("a token holds at least one policy, or is a management token")]
    NoGrant,
    #[error("{what}: at most {most}")]
    TooMany { what: &'static str, most: usize },
    #[error(transparent)]
    Store(#[from] StoreError),
}

struct Policy {
    record: AclPolicyRecord,
    rules: Rules,
}

#[derive(Default)]
pub(crate) struct State {
    tokens: HashMap<String, AclTokenRecord>,
    policies: BTreeMap<String, Policy>,
    /// Certificate subjects bound to policies, by subject.
    pub(crate) certificates: BTreeMap<String, AclCertificateRecord>,
}

/// The ACLs of one term.
pub struct Acl {
    pub(crate) store: Arc<dyn Store>,
    state: RwLock<State>,
    /// Held across a change's store write, so changes apply in order.
    pub(crate) changing: tokio::sync::Mutex<()>,
}

impl Acl {
    /// The ACLs as stored. A stored policy whose rules no longer read
    /// (written by a newer release) grants nothing, and says so.
    pub fn load(store: Arc<dyn Store>) -> Result<Acl, StoreError> {
        let mut state = State::default();
        for record in store.load_acl()? {
            match record {
                AclRecord::Token(t) => {
                    state.tokens.insert(t.accessor.clone(), t);
                }
                // The manager's: it enforces them.
                AclRecord::Quota(_) => {}
                AclRecord::Certificate(c) => {
                    state.certificates.insert(c.subject.clone(), c);
                }
                AclRecord::Policy(p) => {
                    let rules = Rules::parse(&p.rules).unwrap_or_else(|e| {
                        tracing::warn!(policy = %p.name, error = %e, "a stored ACL policy does not read: it grants nothing");
                        Rules::default()
                    });
                    state.policies.insert(p.name.clone(), Policy { record: p, rules });
                }
            }
        }
        Ok(Acl {
            store,
            state: RwLock::new(state),
            changing: tokio::sync::Mutex::new(()),
        })
    }

    pub(crate) fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The caller a bearer token stands for.
    pub fn authenticate(&self, token: Option<&str>) -> Result<Caller, Unauthenticated> {
        let text = token.ok_or(Unauthenticated::NoToken)?;
        let bearer = bearer::read(text).ok_or(Unauthenticated::NotAToken)?;
        let state = self.read();
        let record = state
            .tokens
            .get(bearer.accessor)
            .filter(|t| bearer::secret_is(bearer.secret, &t.secret_sha256))
            .ok_or(Unauthenticated::Unknown)?;
        if record.expires_ms.is_some_and(|at| now_ms() >= at) {
            return Err(Unauthenticated::Expired {
                accessor: record.accessor.clone(),
            });
        }
        Ok(Caller::Token {
            accessor: record.accessor.clone(),
            name: record.name.clone(),
        })
    }

    /// Whether `caller` may do what `needs` says (in `namespace`, for a
    /// capability on volumes).
    pub fn allows(&self, caller: &Caller, needs: Needs, namespace: &str) -> bool {
        let state = self.read();
        let held = match caller {
            Caller::Management => return true,
            Caller::Token { accessor, .. } => match state.tokens.get(accessor) {
                Some(token) if token.management => return true,
                Some(token) => &token.policies,
                None => return false,
            },
            Caller::Certificate { subject } => match state.certificates.get(subject) {
                Some(bound) => &bound.policies,
                None => return false,
            },
        };
        let policies = held.iter().filter_map(|p| state.policies.get(p));
        match needs {
            Needs::Caller => true,
            Needs::Volumes(cap) => combine(policies.map(|p| p.rules.volumes(namespace, cap))),
            Needs::Area(area, level) => combine(policies.map(|p| p.rules.area(area, level))),
        }
    }

    /// The policies `caller` holds (none for the management identity; a
    /// management token's, if it names any).
    pub fn policies_of(&self, caller: &Caller) -> Vec<String> {
        let state = self.read();
        match caller {
            Caller::Management => Vec::new(),
            Caller::Token { accessor, .. } => state
                .tokens
                .get(accessor)
                .map(|t| t.policies.clone())
                .unwrap_or_default(),
            Caller::Certificate { subject } => state
                .certificates
                .get(subject)
                .map(|c| c.policies.clone())
                .unwrap_or_default(),
        }
    }

    /// [`allows`](Self::allows), refused with what was missing.
    pub fn check(&self, caller: &Caller, needs: Needs, namespace: &str) -> Result<(), Denied> {
        if self.allows(caller, needs, namespace) {
            return Ok(());
        }
        Err(Denied {
            caller: caller.to_string(),
            needs,
            namespace: matches!(needs, Needs::Volumes(_)).then(|| namespace.to_string()),
        })
    }

    /// Whether `caller` may list `namespace` (what a list of every
    /// namespace shows it).
    pub fn may_list(&self, caller: &Caller, namespace: &str) -> bool {
        self.allows(caller, Needs::Volumes(VolumeCap::List), namespace)
    }

    /// The first management token, made once: while no token exists.
    pub async fn bootstrap(&self) -> Result<(AclTokenRecord, String), AclError> {
        let _changing = self.changing.lock().await;
        if !self.read().tokens.is_empty() {
            return Err(AclError::Bootstrapped);
        }
        self.mint(_changing, "bootstrap".into(), Vec::new(), true, None)
            .await
    }

    /// A new token holding `policies` (each must exist), or a management
    /// token; it expires after `ttl` if given.
    pub async fn create_token(
        &self,
        name: String,
        policies: Vec<String>,
        management: bool,
        ttl: Option<Duration>,
    ) -> Result<(AclTokenRecord, String), AclError> {
        berth_model::bounds::name(&name)?;
        if policies.is_empty() && !management {
            return Err(AclError::NoGrant);
        }
        if policies.len() > MAX_TOKEN_POLICIES {
            return Err(AclError::TooMany {
                what: "policies of one token",
                most: MAX_TOKEN_POLICIES,
            });
        }
        let changing = self.changing.lock().await;
        {
            if let Some(missing) = self.missing_policy(&policies) {
                return Err(AclError::NoPolicy(missing.clone()));
            }
            if self.read().tokens.len() >= MAX_TOKENS {
                return Err(AclError::TooMany {
                    what: "live ACL tokens",
                    most: MAX_TOKENS,
                });
            }
        }
        self.mint(changing, name, policies, management, ttl).await
    }

    async fn mint(
        &self,
        _changing: tokio::sync::MutexGuard<'_, ()>,
        name: String,
        mut policies: Vec<String>,
        management: bool,
        ttl: Option<Duration>,
    ) -> Result<(AclTokenRecord, String), AclError> {
        policies.sort();
        policies.dedup();
        let Minted {
            accessor,
            text,
            secret_sha256,
        } = bearer::mint();
        let now = now_ms();
        let record = AclTokenRecord {
            accessor,
            name,
            policies,
            management,
            secret_sha256,
            created_ms: now,
            expires_ms: ttl.map(|t| now.saturating_add(t.as_millis() as u64)),
        };
        self.store.put_acl(&AclRecord::Token(record.clone())).await?;
        self.write()
            .tokens
            .insert(record.accessor.clone(), record.clone());
        Ok((record, text))
    }

    /// Every token, without secrets (they have none to show), by name.
    pub fn tokens(&self) -> Vec<AclTokenRecord> {
        let mut all: Vec<AclTokenRecord> = self.read().tokens.values().cloned().collect();
        all.sort_by(|a, b| (&a.name, &a.accessor).cmp(&(&b.name, &b.accessor)));
        all
    }

    pub fn token(&self, accessor: &str) -> Option<AclTokenRecord> {
        self.read().tokens.get(accessor).cloned()
    }

    /// Revokes a token: refused from the next call on.
    pub async fn revoke(&self, accessor: &str) -> Result<AclTokenRecord, AclError> {
        let _changing = self.changing.lock().await;
        let record = self
            .token(accessor)
            .ok_or_else(|| AclError::NoToken(accessor.to_string()))?;
        let key = AclRecord::Token(record.clone()).key();
        self.store.remove_acl(&key).await?;
        self.write().tokens.remove(accessor);
        Ok(record)
    }

    /// Makes or replaces a policy; tokens holding it get its new rules at once.
    pub async fn apply_policy(
        &self,
        name: String,
        description: String,
        rules: String,
    ) -> Result<AclPolicyRecord, AclError> {
        berth_model::bounds::name(&name)?;
        if description.len() > DESCRIPTION_MAX || description.chars().any(char::is_control) {
            return Err(AclError::Description);
        }
        let parsed = Rules::parse(&rules).map_err(|source| AclError::Rules {
            name: name.clone(),
            source,
        })?;
        let _changing = self.changing.lock().await;
        {
            let state = self.read();
            if !state.policies.contains_key(&name) && state.policies.len() >= MAX_POLICIES {
                return Err(AclError::TooMany {
                    what: "ACL policies",
                    most: MAX_POLICIES,
                });
            }
        }
        let record = AclPolicyRecord {
            name,
            description,
            rules,
            modified_ms: now_ms(),
        };
        self.store.put_acl(&AclRecord::Policy(record.clone())).await?;
        self.write().policies.insert(
            record.name.clone(),
            Policy {
                record: record.clone(),
                rules: parsed,
            },
        );
        Ok(record)
    }

    pub fn policies(&self) -> Vec<AclPolicyRecord> {
        self.read().policies.values().map(|p| p.record.clone()).collect()
    }

    pub fn policy(&self, name: &str) -> Option<AclPolicyRecord> {
        self.read().policies.get(name).map(|p| p.record.clone())
    }

    /// Whether every one of `names` is a policy; the first that is not.
    pub(crate) fn missing_policy<'a>(&self, names: &'a [String]) -> Option<&'a String> {
        let state = self.read();
        names.iter().find(|p| !state.policies.contains_key(*p))
    }

    /// Deletes a policy: the tokens naming it lose what it granted.
    pub async fn delete_policy(&self, name: &str) -> Result<AclPolicyRecord, AclError> {
        let _changing = self.changing.lock().await;
        let record = self
            .policy(name)
            .ok_or_else(|| AclError::NoPolicy(name.to_string()))?;
        self.store
            .remove_acl(&AclRecord::Policy(record.clone()).key())
            .await?;
        self.write().policies.remove(name);
        Ok(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capability::{Area, Level};

    fn store(dir: &std::path::Path) -> Arc<dyn Store> {
        Arc::new(berth_store::RedbStore::open(&dir.join("state.redb")).unwrap())
    }

    #[tokio::test]
    async fn tokens_and_policies_hold_across_a_restart_and_revocation_is_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let acl = Acl::load(store(dir.path())).unwrap();
        let (_, root) = acl.bootstrap().await.unwrap();
        assert!(matches!(acl.bootstrap().await, Err(AclError::Bootstrapped)));
        let root = acl.authenticate(Some(&root)).unwrap();
        assert!(acl.allows(&root, Needs::Area(Area::Operator, Level::Write), ""));

        let rules = "[namespace.team-a]\ncapabilities = [\"list\", \"read\", \"write\"]\n".to_string();
        acl.apply_policy("team-a".into(), "team A".into(), rules)
            .await
            .unwrap();
        assert!(matches!(
            acl.create_token("ci".into(), vec!["nope".into()], false, None)
                .await,
            Err(AclError::NoPolicy(_))
        ));
        let (record, text) = acl
            .create_token("ci".into(), vec!["team-a".into()], false, None)
            .await
            .unwrap();
        let ci = acl.authenticate(Some(&text)).unwrap();
        assert!(acl.allows(&ci, Needs::Volumes(VolumeCap::Write), "team-a"));
        assert!(!acl.allows(&ci, Needs::Volumes(VolumeCap::Mount), "team-a"));
        let denied = acl
            .check(&ci, Needs::Volumes(VolumeCap::Read), "team-b")
            .unwrap_err();
        assert_eq!(
            denied.to_string(),
            format!(
                "token \"ci\" (accessor {}) lacks namespace capability \"read\" in namespace \"team-b\"",
                record.accessor
            )
        );
        assert!(!acl.allows(&ci, Needs::Area(Area::Node, Level::Read), ""));
        assert!(acl.allows(&Caller::Management, Needs::Area(Area::Node, Level::Write), ""));

        // A restart reads the same tokens and policies back; no secret is stored.
        drop(acl);
        let bytes = std::fs::read(dir.path().join("state.redb")).unwrap();
        assert!(!bytes.windows(text.len()).any(|w| w == text.as_bytes()));
        let acl = Acl::load(store(dir.path())).unwrap();
        let ci = acl.authenticate(Some(&text)).unwrap();
        assert!(acl.allows(&ci, Needs::Volumes(VolumeCap::List), "team-a"));

        // A policy deleted grants nothing; a token revoked is refused at once.
        acl.delete_policy("team-a").await.unwrap();
        assert!(!acl.allows(&ci, Needs::Volumes(VolumeCap::List), "team-a"));
        acl.revoke(&record.accessor).await.unwrap();
        assert!(matches!(
            acl.authenticate(Some(&text)),
            Err(Unauthenticated::Unknown)
        ));
        assert!(!acl.allows(&ci, Needs::Caller, ""));
    }

    #[tokio::test]
    async fn an_expired_a_forged_or_a_missing_token_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let acl = Acl::load(store(dir.path())).unwrap();
        let (_, text) = acl
            .create_token("brief".into(), vec![], true, Some(Duration::ZERO))
            .await
            .unwrap();
        assert!(matches!(
            acl.authenticate(Some(&text)),
            Err(Unauthenticated::Expired { .. })
        ));
        let (_, good) = acl.create_token("root".into(), vec![], true, None).await.unwrap();
        let forged = format!(
            "{}{}",
            &good[..good.len() - 1],
            if good.ends_with('0') { '1' } else { '0' }
        );
        assert!(matches!(
            acl.authenticate(Some(&forged)),
            Err(Unauthenticated::Unknown)
        ));
        assert!(matches!(
            acl.authenticate(Some(&good[..20])),
            Err(Unauthenticated::NotAToken)
        ));
        assert!(matches!(acl.authenticate(None), Err(Unauthenticated::NoToken)));
        assert!(matches!(
            acl.create_token("nothing".into(), vec![], false, None).await,
            Err(AclError::NoGrant)
        ));
    }
}
