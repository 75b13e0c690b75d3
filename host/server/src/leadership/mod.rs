//! Several `berth serve` on one etcd prefix: exactly one leads (runs the
//! reconciler, the node sessions and the API), the others follow and pass
//! API calls on to it.
//!
//! Each server holds an etcd lease, kept alive every third of its TTL, and
//! a key `<prefix>/servers/<name>` on it. The leader is whoever created
//! `<prefix>/leader` (on its lease): the key's create revision is the
//! leader's fence, compared by every write it makes. A leader steps down
//! when its key is no longer the one it created, when etcd says its lease
//! is gone, or when its own clock says the lease may have run out (no
//! keep-alive answered for a TTL): it never acts on a lease it cannot vouch for.

pub mod forward;
mod shared_ca;

pub use shared_ca::{SharedCaError, shared_ca};

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use berth_proto::etcd::etcdserverpb as pb;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;

use crate::store::{EtcdError, EtcdSettings, Fence, Members, StoreError, range_all, unavailable};

/// How a server is reached, as it announces itself in etcd.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ServerInfo {
    pub name: String,
    /// Its API socket, on its own machine.
    pub api: String,
    /// Its TLS cluster endpoint (`host:port`), where followers forward API calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward: Option<String>,
    /// The policy set it has prepared: its version (0: its own tables, none
    /// stored), or why it cannot (bounded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_set: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_error: Option<String>,
}

/// What this server is now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// Following `leader` (none known while an election is under way).
    Follower { leader: Option<ServerInfo> },
    /// Leading; every write compares this fence.
    Leader { fence: Fence },
}

/// One server's part in the election; it campaigns until dropped.
pub struct Election {
    settings: EtcdSettings,
    kv: Members,
    me: ServerInfo,
    role: watch::Sender<Role>,
    /// The lease held now (0: none), for resigning.
    lease: Mutex<i64>,
    /// Until when (ms after `epoch`) this server can vouch for its lease.
    valid_until: AtomicU64,
    epoch: Instant,
    /// Whether this server may take the lead: not while it cannot put the
    /// cluster's policy set in service (it follows, and says why).
    eligible: std::sync::atomic::AtomicBool,
    /// What this server says of its policy set in its key, beside `me`.
    prepared: Mutex<(Option<u64>, Option<String>)>,
}

/// A lease held, with its keep-alive stream; how long it is good for, by
/// this server's clock, is the election's `valid_until`.
struct Held {
    id: i64,
    keepalive: Option<KeepAlive>,
    next_keepalive: Instant,
}

/// An open keep-alive stream with the member it went to.
struct KeepAlive {
    send: mpsc::Sender<pb::LeaseKeepAliveRequest>,
    answers: tonic::Streaming<pb::LeaseKeepAliveResponse>,
}

impl Election {
    /// Takes part in the election as `me`. Fails only when etcd cannot be reached at all.
    pub async fn join(
        settings: EtcdSettings,
        me: ServerInfo,
    ) -> Result<std::sync::Arc<Election>, StoreError> {
        Election::join_as(settings, me, true).await
    }

    /// [`Election::join`], standing for the lead only once `set_eligible`
    /// says so when `eligible` is false.
    pub async fn join_as(
        settings: EtcdSettings,
        me: ServerInfo,
        eligible: bool,
    ) -> Result<std::sync::Arc<Election>, StoreError> {
        let kv = Members::new(&settings)?;
        let (role, _) = watch::channel(Role::Follower { leader: None });
        let election = std::sync::Arc::new(Election {
            settings,
            kv,
            me,
            role,
            lease: Mutex::new(0),
            valid_until: AtomicU64::new(0),
            epoch: Instant::now(),
            eligible: std::sync::atomic::AtomicBool::new(eligible),
            prepared: Mutex::new((None, None)),
        });
        let first = election
            .grant()
            .await
            .map_err(|e| unavailable(&election.settings, e))?;
        // The loop holds a weak reference: dropping the election ends it.
        let weak = std::sync::Arc::downgrade(&election);
        tokio::spawn(watchdog(weak.clone()));
        tokio::spawn(async move { campaign(weak, first).await });
        Ok(election)
    }

    pub fn me(&self) -> &ServerInfo {
        &self.me
    }

    /// This server as its key says: `me`, with its policy set.
    fn info(&self) -> ServerInfo {
        let (policy_set, policy_error) = self.prepared.lock().unwrap_or_else(|p| p.into_inner()).clone();
        ServerInfo {
            policy_set,
            policy_error,
            ..self.me.clone()
        }
    }

    /// Says in this server's key which policy set it has prepared (or why
    /// it cannot), for `berth policy status`; best effort.
    pub async fn publish_prepared(&self, version: Option<u64>, error: Option<String>) {
        let error = error.map(|e| crate::model::cut(e, 512));
        *self.prepared.lock().unwrap_or_else(|p| p.into_inner()) = (version, error);
        let lease = *self.lease.lock().unwrap_or_else(|p| p.into_inner());
        let Ok(value) = serde_json::to_vec(&self.info()) else {
            return;
        };
        if lease == 0 {
            return;
        }
        let put = pb::PutRequest {
            key: self.settings.key(&format!("servers/{}", self.me.name)),
            value,
            lease,
            ..Default::default()
        };
        let _ = self
            .kv
            .call(|mut c| {
                let put = put.clone();
                async move { c.put(put).await }
            })
            .await;
    }

    /// Lets this server take the lead, or keeps it following.
    pub fn set_eligible(&self, eligible: bool) {
        self.eligible.store(eligible, Ordering::SeqCst);
    }

    fn eligible(&self) -> bool {
        self.eligible.load(Ordering::SeqCst)
    }

    /// The cluster's policy set as stored now, read from etcd.
    pub async fn policy_set(&self) -> Result<Option<crate::store::PolicySetRecord>, EtcdError> {
        let found = range_all(&self.kv, &self.settings.key("policy/set")).await?;
        Ok(found
            .into_iter()
            .next()
            .and_then(|(_, value)| serde_json::from_slice(&value).ok()))
    }

    /// Who leads, without standing: for a server that may not lead now.
    async fn leader_now(&self) -> Result<Role, EtcdError> {
        let found = range_all(&self.kv, &self.settings.key("leader")).await?;
        let leader = found
            .into_iter()
            .next()
            .and_then(|(_, value)| serde_json::from_slice::<ServerInfo>(&value).ok())
            .filter(|l| l.name != self.me.name);
        Ok(Role::Follower { leader })
    }

    pub fn settings(&self) -> &EtcdSettings {
        &self.settings
    }

    /// Follows every change of role.
    pub fn role(&self) -> watch::Receiver<Role> {
        self.role.subscribe()
    }

    /// The servers taking part now (their keys live on their leases).
    pub async fn members(&self) -> Result<Vec<ServerInfo>, EtcdError> {
        let found = range_all(&self.kv, &self.settings.key("servers/")).await?;
        Ok(found
            .into_iter()
            .filter_map(|(_, value)| serde_json::from_slice(&value).ok())
            .collect())
    }

    /// Gives the lease back (on shutdown): a leader's key goes with it, so
    /// a follower takes over at once instead of after the TTL.
    pub async fn resign(&self) {
        let id = std::mem::take(&mut *self.lease.lock().unwrap_or_else(|p| p.into_inner()));
        self.set(Role::Follower { leader: None });
        if id != 0 {
            let _ = self
                .kv
                .lease(|mut c| async move { c.lease_revoke(pb::LeaseRevokeRequest { id }).await })
                .await;
        }
    }

    /// Whether this server's lease is still good by its own clock: a leader
    /// checks it before each call to a plugin, so one woken from a pause
    /// past its lease sends nothing before it steps down.
    pub fn vouches(&self) -> bool {
        let since = Instant::now().saturating_duration_since(self.epoch);
        (since.as_millis() as u64) < self.valid_until.load(Ordering::Acquire)
    }

    /// How long this server can still vouch for its lease (zero: no longer).
    fn vouched_for(&self) -> Duration {
        let until = self.epoch + Duration::from_millis(self.valid_until.load(Ordering::Acquire));
        until.saturating_duration_since(Instant::now())
    }

    fn vouch_until(&self, until: Instant) {
        let ms = until.saturating_duration_since(self.epoch).as_millis() as u64;
        self.valid_until.store(ms, Ordering::Release);
    }

    fn ttl(&self) -> Duration {
        self.settings.lease_ttl
    }

    fn set(&self, role: Role) {
        self.role.send_if_modified(|now| {
            let changed = *now != role;
            if changed {
                if matches!(now, Role::Leader { .. }) {
                    tracing::warn!(server = %self.me.name, "stepped down");
                }
                match &role {
                    Role::Leader { fence } => {
                        tracing::info!(server = %self.me.name, fence = fence.create_revision, "leading")
                    }
                    Role::Follower { leader: Some(l) } => {
                        tracing::info!(server = %self.me.name, leader = %l.name, "following")
                    }
                    Role::Follower { leader: None } => {}
                }
                *now = role;
            }
            changed
        });
    }

    fn leading(&self) -> Option<Fence> {
        match &*self.role.borrow() {
            Role::Leader { fence } => Some(fence.clone()),
            Role::Follower { .. } => None,
        }
    }

    /// A new lease, with this server's key on it.
    async fn grant(&self) -> Result<Held, ElectionError> {
        let ttl = self.ttl().as_secs() as i64;
        let sent = Instant::now();
        let granted = self
            .kv
            .lease(|mut c| async move { c.lease_grant(pb::LeaseGrantRequest { ttl, id: 0 }).await })
            .await?;
        if !granted.error.is_empty() {
            return Err(ElectionError::Lease(granted.error));
        }
        let put = pb::PutRequest {
            key: self.settings.key(&format!("servers/{}", self.me.name)),
            value: serde_json::to_vec(&self.info())?,
            lease: granted.id,
            ..Default::default()
        };
        self.kv
            .call(|mut c| {
                let put = put.clone();
                async move { c.put(put).await }
            })
            .await?;
        *self.lease.lock().unwrap_or_else(|p| p.into_inner()) = granted.id;
        self.vouch_until(sent + Duration::from_secs(granted.ttl.max(0) as u64));
        Ok(Held {
            id: granted.id,
            keepalive: None,
            next_keepalive: sent + self.ttl() / 3,
        })
    }

    /// One keep-alive on the lease's stream (opened on the current member
    /// first): its new deadline, or why it could not be kept.
    async fn keep_alive(&self, held: &mut Held) -> Result<(), KeepAliveError> {
        let sent = Instant::now();
        let request = pb::LeaseKeepAliveRequest { id: held.id };
        let answer = async {
            match &mut held.keepalive {
                Some(stream) => stream
                    .send
                    .send(request)
                    .await
                    .map_err(|_| "the keep-alive stream closed".to_string())?,
                None => {
                    // The first request goes in before the stream opens: etcd
                    // answers the opening only with its first keep-alive.
                    let (send, rx) = mpsc::channel(4);
                    send.try_send(request).expect("room for the first request");
                    let mut client = pb::lease_client::LeaseClient::new(self.kv.current());
                    let answers = client
                        .lease_keep_alive(ReceiverStream::new(rx))
                        .await
                        .map_err(|s| s.message().to_string())?
                        .into_inner();
                    held.keepalive = Some(KeepAlive { send, answers });
                }
            }
            let stream = held.keepalive.as_mut().expect("opened above");
            match stream.answers.message().await {
                Ok(Some(a)) => Ok(a),
                Ok(None) => Err("the keep-alive stream ended".to_string()),
                Err(s) => Err(s.message().to_string()),
            }
        };
        match tokio::time::timeout(self.ttl() / 3, answer).await {
            Ok(Ok(a)) if a.ttl > 0 => {
                self.vouch_until(sent + Duration::from_secs(a.ttl as u64));
                Ok(())
            }
            Ok(Ok(_)) => Err(KeepAliveError::Expired),
            Ok(Err(e)) => Err(KeepAliveError::Away(e)),
            Err(_) => Err(KeepAliveError::Away("no keep-alive answer".into())),
        }
    }

    /// Creates the leader key on `lease` unless it exists; either way,
    /// what this server is now.
    async fn campaign_once(&self, lease: i64) -> Result<Role, ElectionError> {
        let key = self.settings.key("leader");
        let me = serde_json::to_vec(&self.me)?;
        Ok(match create_or_read(&self.kv, &key, me, lease).await? {
            Created(create_revision) => Role::Leader {
                fence: Fence { key, create_revision },
            },
            Found(kv) if kv.lease == lease => Role::Leader {
                fence: Fence {
                    key,
                    create_revision: kv.create_revision,
                },
            },
            Found(kv) => {
                let leader: Option<ServerInfo> = serde_json::from_slice(&kv.value).ok();
                if leader.as_ref().is_some_and(|l| l.name == self.me.name) {
                    // An earlier run of this server (names are unique), gone
                    // without giving its lease back: ending that lease now
                    // spares waiting out its TTL after a restart.
                    tracing::info!(server = %self.me.name, "the leader key is an earlier run's; ending its lease");
                    let id = kv.lease;
                    self.kv
                        .lease(|mut c| async move { c.lease_revoke(pb::LeaseRevokeRequest { id }).await })
                        .await?;
                    return Ok(Role::Follower { leader: None });
                }
                Role::Follower { leader }
            }
            // Gone between the compare and the read: the next round decides.
            Vanished => Role::Follower { leader: None },
        })
    }
}

/// What [`create_or_read`] found.
enum Made {
    /// The key was created, at this revision.
    Created(i64),
    /// The key was there already.
    Found(berth_proto::etcd::mvccpb::KeyValue),
    /// The key was there for the comparison and gone for the read.
    Vanished,
}
use Made::{Created, Found, Vanished};

/// One transaction: `key` set to `value` (on `lease`, unless 0) if it does
/// not exist, else read.
async fn create_or_read(kv: &Members, key: &[u8], value: Vec<u8>, lease: i64) -> Result<Made, EtcdError> {
    use pb::compare::{CompareResult, CompareTarget, TargetUnion};
    use pb::request_op::Request;
    let txn = pb::TxnRequest {
        compare: vec![pb::Compare {
            result: CompareResult::Equal as i32,
            target: CompareTarget::Create as i32,
            key: key.to_vec(),
            target_union: Some(TargetUnion::CreateRevision(0)),
            range_end: Vec::new(),
        }],
        success: vec![pb::RequestOp {
            request: Some(Request::RequestPut(pb::PutRequest {
                key: key.to_vec(),
                value,
                lease,
                ..Default::default()
            })),
        }],
        failure: vec![pb::RequestOp {
            request: Some(Request::RequestRange(pb::RangeRequest {
                key: key.to_vec(),
                ..Default::default()
            })),
        }],
    };
    let answer = kv
        .call(|mut c| {
            let txn = txn.clone();
            async move { c.txn(txn).await }
        })
        .await?;
    if answer.succeeded {
        return Ok(Created(answer.header.map_or(0, |h| h.revision)));
    }
    let found = answer.responses.into_iter().find_map(|r| match r.response {
        Some(pb::response_op::Response::ResponseRange(range)) => range.kvs.into_iter().next(),
        _ => None,
    });
    Ok(found.map_or(Vanished, Found))
}

/// Why a round of the election failed; the next round tries again.
#[derive(Debug, thiserror::Error)]
enum ElectionError {
    #[error(transparent)]
    Etcd(#[from] EtcdError),
    /// etcd's own reason in a LeaseGrant answer.
    #[error("granting a lease: {0}")]
    Lease(String),
    #[error("encoding this server's key: {0}")]
    Encode(#[from] serde_json::Error),
}

enum KeepAliveError {
    /// etcd says the lease is gone.
    Expired,
    /// No member answered in time.
    Away(String),
}

/// How often a server looks at the leader key: a follower takes over this
/// long after the lease of a dead leader ran out, at most.
fn poll_interval(ttl: Duration) -> Duration {
    (ttl / 20).clamp(Duration::from_millis(50), Duration::from_millis(500))
}

/// Steps a leader down the moment its lease may have run out, by its own
/// clock, whatever the election loop is waiting on: an etcd call to a member
/// cut off by a partition answers only when its own deadline passes, long
/// after the lease (the nemesis saw a leader lead on 2 s past its lease).
async fn watchdog(election: std::sync::Weak<Election>) {
    loop {
        let Some(e) = election.upgrade() else { return };
        let left = e.vouched_for();
        if left.is_zero() && e.leading().is_some() {
            tracing::warn!(server = %e.me.name, "the leader lease may have expired; stepping down");
            e.set(Role::Follower { leader: None });
        }
        let wait = if left.is_zero() {
            poll_interval(e.ttl())
        } else {
            left
        };
        drop(e);
        tokio::time::sleep(wait).await;
    }
}

/// The election loop: keep the lease alive, step down the moment it may be
/// gone, and campaign for the leader key.
async fn campaign(election: std::sync::Weak<Election>, first: Held) {
    let mut held = Some(first);
    loop {
        let Some(e) = election.upgrade() else { return };
        let poll = poll_interval(e.ttl());
        // First of all: a leader whose lease may have run out (a long pause,
        // etcd away) steps down before anything else runs on its behalf.
        if let Some(h) = &held
            && !e.vouches()
        {
            if e.leading().is_some() {
                tracing::warn!(server = %e.me.name, "the leader lease may have expired; stepping down");
            }
            e.set(Role::Follower { leader: None });
            // Should it still be alive, the leader key goes with it.
            let id = h.id;
            let kv = e.kv.clone();
            tokio::spawn(async move {
                let _ = kv
                    .lease(|mut c| async move { c.lease_revoke(pb::LeaseRevokeRequest { id }).await })
                    .await;
            });
            held = None;
        }
        let h = match held.take() {
            Some(h) => h,
            None => match e.grant().await {
                Ok(h) => h,
                Err(error) => {
                    tracing::warn!(server = %e.me.name, %error, "no etcd lease; retrying");
                    drop(e);
                    tokio::time::sleep(poll).await;
                    continue;
                }
            },
        };
        let mut h = h;
        if Instant::now() >= h.next_keepalive {
            h.next_keepalive = Instant::now() + e.ttl() / 3;
            match e.keep_alive(&mut h).await {
                Ok(()) => {}
                Err(KeepAliveError::Expired) => {
                    tracing::warn!(server = %e.me.name, "etcd let this server's lease expire");
                    e.set(Role::Follower { leader: None });
                    drop(e);
                    continue;
                }
                Err(KeepAliveError::Away(why)) => {
                    tracing::warn!(server = %e.me.name, %why, "lease keep-alive failed; trying another member");
                    e.kv.pass_over();
                    h.keepalive = None;
                    // Soon again, well before the lease could run out.
                    h.next_keepalive = Instant::now() + poll;
                }
            }
        }
        if !e.vouches() {
            // Woken late (a pause): the check at the top steps down first.
            held = Some(h);
            continue;
        }
        if !e.eligible() && e.leading().is_none() {
            match e.leader_now().await {
                Ok(role) => e.set(role),
                Err(error) => tracing::debug!(server = %e.me.name, %error, "reading the leader key failed"),
            }
            held = Some(h);
            drop(e);
            tokio::time::sleep(poll).await;
            continue;
        }
        match e.campaign_once(h.id).await {
            // Answered after the lease may have run out: the watchdog has
            // stepped down, or will; the top of the loop takes it from there.
            Ok(Role::Leader { .. }) if !e.vouches() => {}
            Ok(Role::Leader { fence }) => match e.leading() {
                // The key was remade on this lease: a new term, so the old
                // one ends first.
                Some(old) if old != fence => {
                    e.set(Role::Follower { leader: None });
                    e.set(Role::Leader { fence });
                }
                _ => e.set(Role::Leader { fence }),
            },
            Ok(follower) => e.set(follower),
            Err(error) => tracing::debug!(server = %e.me.name, %error, "reading the leader key failed"),
        }
        held = Some(h);
        drop(e);
        tokio::time::sleep(poll).await;
    }
}
