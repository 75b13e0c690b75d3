//! `berth serve` on etcd, beside other servers: follow (passing API calls
//! on to the leader) until elected, then lead for one term, then follow
//! again. A term runs on a runtime of its own, so stepping down stops every
//! worker, call and session of the term at once, wherever it was.

use std::future::Future;
use std::os::unix::net::UnixListener as StdUnixListener;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_stream::wrappers::UnixListenerStream;

use super::ServeError;
use super::term::{Term, TermSocket, lead};
use crate::api;
use crate::api::access::Entrance;
use crate::cluster::pki::ClusterCa;
use crate::config::Config;
use crate::leadership::forward::{Forward, ForwardTls, TermApi};
use crate::leadership::{Election, Role, ServerInfo, shared_ca};
use crate::store::{EtcdSettings, EtcdStore, Fence, Mirror, Warm};

/// How this server's TLS endpoint is reached from other machines: the
/// address's own IP when it is one the certificate names, else the first
/// name that is not a loopback one.
fn advertised(config: &Config) -> Option<String> {
    let address = config.cluster_address?;
    let ip = address.ip().to_string();
    let host = if !address.ip().is_unspecified() && config.cluster_names.contains(&ip) {
        ip
    } else {
        config
            .cluster_names
            .iter()
            .find(|n| !matches!(n.as_str(), "localhost" | "127.0.0.1" | "::1"))
            .or(config.cluster_names.first())
            .cloned()
            .unwrap_or_else(|| "localhost".into())
    };
    Some(match host.contains(':') {
        true => format!("[{host}]:{}", address.port()),
        false => format!("{host}:{}", address.port()),
    })
}

pub(super) async fn run(
    config: Config,
    config_path: Option<PathBuf>,
    settings: EtcdSettings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let me = ServerInfo {
        policy_set: None,
        policy_error: None,
        name: settings.name.clone(),
        api: config.api.to_string(),
        forward: advertised(&config),
    };
    let ca = match config.cluster_address {
        Some(_) => Some(Arc::new(
            shared_ca(&settings, &crate::cluster::pki::ca_dir(&config.state))
                .await
                .map_err(|error| ServeError::SharedCa {
                    endpoints: settings.endpoints.join(","),
                    error,
                })?,
        )),
        None => None,
    };
    let api_path = config.api.path().to_path_buf();
    let listener = api::bind(&api_path, config.socket_mode)?
        .into_std()
        .map_err(ServeError::io("the API socket"))?;
    // Stands for the lead once the cluster's policy set is on this server's
    // disk, checked and compiled: a failover never runs a set it cannot load.
    let election = Election::join_as(settings.clone(), me.clone(), false).await?;
    let _preparing = tokio::spawn(keep_set_prepared(config.clone(), election.clone()));
    tracing::info!(server = %me.name, endpoints = ?settings.endpoints, prefix = %settings.prefix, lease_ttl = ?settings.lease_ttl, "taking part in the election");
    // One API server for the process's life, whatever its role: a term is
    // handed calls through `term_api`, and no connection is closed when the
    // role changes.
    let (term_api, term_rx) = watch::channel(None);
    let forward = Forward::new(
        election.role(),
        term_rx,
        me.clone(),
        ca.as_ref()
            .map(|ca| {
                ca.server_identity(&config.cluster_names)
                    .map(|(chain, key)| ForwardTls {
                        ca: ca.cert_pem().to_string(),
                        chain,
                        key,
                    })
            })
            .transpose()?,
        // Long enough for a dead leader's lease to run out and a successor to start.
        settings.lease_ttl * 2 + Duration::from_secs(1),
    );
    let roles = election.role();
    crate::metrics::readiness().set(
        "store",
        Box::new(move || match &*roles.borrow() {
            Role::Leader { fence } => Ok(format!("etcd, leading (fence {})", fence.create_revision)),
            Role::Follower { leader: Some(l) } => Ok(format!("etcd, following {}", l.name)),
            Role::Follower { leader: None } => {
                Err("no leader known: etcd unreachable, or an election under way".into())
            }
        }),
    );
    // The TLS API, for callers with tokens: passed on to the leader as the
    // socket's calls are, marked as remote so the leader asks for a token.
    let api_tls = super::api_tls::bind(&config, ca.as_deref())
        .await?
        .map(|tls| serve_api_tls(tls, forward.clone()));
    let console = match super::console::prepare(&config, ca.as_deref())? {
        Some(prepared) => Some(super::console::serve(prepared, forward.clone()).await?),
        None => None,
    };
    let serving = serve_api(&listener, forward).await?;
    let mut shutdown = std::pin::pin!(shutdown);
    let mut role = election.role();
    let mut mirror: Option<Mirror> = None;
    let result = loop {
        // While following, a warm copy of the prefix is kept for the day
        // this server leads.
        if mirror.is_none() {
            mirror = Mirror::start(settings.clone())
                .inspect_err(|e| tracing::warn!(error = %e, "no warm copy of the store: a term will read it"))
                .ok();
        }
        crate::metrics::readiness().set_ok("api", "following: calls are passed on to the leader".into());
        let fence = tokio::select! {
            _ = &mut shutdown => break Ok(()),
            fence = elected(&mut role) => fence,
        };
        // Calls wait for the term's API meanwhile.
        crate::metrics::readiness().set_failing("api", "elected: a term is starting".into());
        let warm = match mirror.take() {
            Some(m) => m.take(fence.create_revision, settings.lease_ttl).await,
            None => None,
        };
        match &warm {
            Some(w) => tracing::info!(
                server = %me.name,
                fence = fence.create_revision,
                volumes = w.volumes.len(),
                revision = w.revision,
                "elected: starting a term from the warm copy"
            ),
            None => {
                tracing::info!(server = %me.name, fence = fence.create_revision, "elected: starting a term, reading the store")
            }
        }
        match term(
            &config,
            &config_path,
            &settings,
            &term_api,
            &ca,
            &election,
            fence.clone(),
            warm,
            &mut role,
            &mut shutdown,
        )
        .await
        {
            Ended::Shutdown => break Ok(()),
            Ended::Deposed => tracing::warn!(server = %me.name, "the term ended: no longer the leader"),
            // Another server (or this one, a moment later) may fare better:
            // the lead is given up rather than the process.
            Ended::Failed(why) => {
                tracing::error!(server = %me.name, error = %why, "the term failed; giving the lead up");
                election.resign().await;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    };
    serving.abort();
    if let Some(console) = console {
        console.abort();
    }
    if let Some(api_tls) = api_tls {
        api_tls.abort();
    }
    election.resign().await;
    let _ = std::fs::remove_file(&api_path);
    if let Some(path) = config.cluster.as_ref().map(|c| c.path()) {
        let _ = std::fs::remove_file(path);
    }
    result
}

/// How often a server looks for a new policy set to prepare, or tries
/// again one it could not.
const PREPARE_EVERY: Duration = Duration::from_secs(2);

/// Keeps the stored policy set (or, while none is, this server's own
/// `[[policy]]` tables) prepared on this server; stands for the lead only
/// while it is, and says why not in `/readyz` ("policy").
async fn keep_set_prepared(config: Config, election: Arc<Election>) {
    let mut prepared: Option<Option<u64>> = None;
    let mut last_resort = LastResort::new(election.settings().lease_ttl);
    // A set that failed to prepare is tried again after a pause that grows
    // (a registry that is down, or answers junk, is not hammered); a new
    // version is tried at once.
    let mut failing = PrepareBackoff::default();
    loop {
        match election.policy_set().await {
            Ok(stored) => {
                let version = stored.as_ref().map(|s| s.version);
                // With no set stored yet, a term seeds one from its own tables
                // and fails on its own if they do not load: nothing to wait for.
                if stored.is_none() {
                    election.set_eligible(true);
                }
                if prepared != Some(version) && failing.due(version) {
                    match super::policy_set::prepare(&config, stored.as_ref()).await {
                        Ok(_) => {
                            if last_resort.standing
                                && matches!(&*election.role().borrow(), Role::Leader { .. })
                            {
                                // Leading as the last resort, acting on nothing: a
                                // new term puts the set, which verifies now, in service.
                                tracing::info!(server = %election.me().name, version = ?version, "the stored policy set verifies now: starting a new term with it");
                                election.resign().await;
                            }
                            election.set_eligible(true);
                            let what = version.map_or("this server's [[policy]] tables".to_string(), |v| {
                                format!("policy set {v}")
                            });
                            crate::metrics::readiness().set_ok("policy", format!("{what} prepared"));
                            election.publish_prepared(Some(version.unwrap_or(0)), None).await;
                            tracing::info!(server = %election.me().name, version = ?version, "policy set prepared; standing for the lead");
                            prepared = Some(version);
                            failing = PrepareBackoff::default();
                        }
                        Err(e) => {
                            last_resort.untrusted = stored.is_some() && e.is_trust_failure();
                            election.set_eligible(stored.is_none() || last_resort.standing);
                            crate::metrics::readiness()
                                .set_failing("policy", format!("cannot put the policy set in service: {e}"));
                            election.publish_prepared(None, Some(e.to_string())).await;
                            match stored {
                                Some(_) => {
                                    tracing::warn!(server = %election.me().name, error = %e, "cannot prepare the policy set; not standing for the lead")
                                }
                                None => {
                                    tracing::warn!(server = %election.me().name, error = %e, "cannot prepare this server's [[policy]] tables (no set is stored yet): a term of its would fail")
                                }
                            }
                            prepared = None;
                            failing.failed(version);
                        }
                    }
                }
            }
            Err(e) => tracing::debug!(error = %e, "reading the policy set failed"),
        }
        if prepared.is_some() {
            last_resort = LastResort::new(election.settings().lease_ttl);
        } else if last_resort.untrusted {
            last_resort.step(&election).await;
        }
        tokio::time::sleep(PREPARE_EVERY).await;
    }
}

/// A server that cannot verify the stored policy set (no key of its trusts
/// the set's signatures: keys changed, a signer revoked) stands for the lead
/// only as the last resort, once no server has led for three lease TTLs: a
/// server that can verify the set leads whenever there is one. Its term
/// serves the API, so that an operator can roll back, re-sign or apply a set
/// that verifies, and acts on no volume until one is in service (as a single
/// server does). It gives the lead up as soon as another server has the
/// stored set prepared.
struct LastResort {
    grace: Duration,
    /// The last preparation failed on trust, with a set stored.
    untrusted: bool,
    /// Since when no leader has been known.
    leaderless_since: Option<tokio::time::Instant>,
    /// Standing for the lead (or leading) as the last resort.
    standing: bool,
}

impl LastResort {
    fn new(lease_ttl: Duration) -> LastResort {
        LastResort {
            grace: lease_ttl * 3,
            untrusted: false,
            leaderless_since: None,
            standing: false,
        }
    }

    async fn step(&mut self, election: &Election) {
        let role = election.role().borrow().clone();
        match role {
            Role::Leader { .. } => {
                let stored = election.policy_set().await.ok().flatten().map(|s| s.version);
                let others = election.members().await.unwrap_or_default();
                let able = others
                    .iter()
                    .find(|m| m.name != election.me().name && stored.is_some() && m.policy_set == stored);
                if let Some(able) = able {
                    tracing::warn!(server = %election.me().name, to = %able.name, "a server that can verify the policy set is here: giving the lead to it");
                    self.standing = false;
                    election.set_eligible(false);
                    election.resign().await;
                }
            }
            Role::Follower { leader: Some(_) } => {
                self.leaderless_since = None;
                if self.standing {
                    self.standing = false;
                    election.set_eligible(false);
                }
            }
            Role::Follower { leader: None } => {
                let since = *self
                    .leaderless_since
                    .get_or_insert_with(tokio::time::Instant::now);
                if !self.standing && since.elapsed() >= self.grace {
                    tracing::warn!(server = %election.me().name, "no server can verify the stored policy set and none has led for {:?}: standing for the lead to serve the API, acting on no volume until a set that verifies is in service", self.grace);
                    self.standing = true;
                    election.set_eligible(true);
                }
            }
        }
    }
}

/// The longest pause before a set that failed to prepare is tried again
/// (an attempt reads at most a few MiB of a registry's answers).
const PREPARE_BACKOFF_MAX: Duration = Duration::from_secs(16);

/// When a policy set that failed to prepare is tried again: after
/// [`PREPARE_EVERY`], doubling with each failure up to
/// [`PREPARE_BACKOFF_MAX`]; at once for another version.
#[derive(Default)]
struct PrepareBackoff {
    /// The version that failed, how many times in a row, and when it is due.
    failed: Option<(Option<u64>, u32, tokio::time::Instant)>,
}

impl PrepareBackoff {
    fn due(&self, version: Option<u64>) -> bool {
        match self.failed {
            Some((v, _, at)) if v == version => tokio::time::Instant::now() >= at,
            _ => true,
        }
    }

    fn failed(&mut self, version: Option<u64>) {
        let times = match self.failed {
            Some((v, n, _)) if v == version => n + 1,
            _ => 1,
        };
        let pause = PREPARE_EVERY
            .saturating_mul(1 << (times - 1).min(16))
            .min(PREPARE_BACKOFF_MAX);
        self.failed = Some((version, times, tokio::time::Instant::now() + pause));
    }
}

/// Until this server leads: its fence then.
async fn elected(role: &mut watch::Receiver<Role>) -> Fence {
    loop {
        if let Role::Leader { fence } = &*role.borrow_and_update() {
            return fence.clone();
        }
        if role.changed().await.is_err() {
            // The election is gone: nothing will be won.
            std::future::pending::<()>().await;
        }
    }
}

/// Until this server no longer leads with `fence`.
async fn deposed(role: &mut watch::Receiver<Role>, fence: &Fence) {
    loop {
        match &*role.borrow_and_update() {
            Role::Leader { fence: now } if now == fence => {}
            _ => return,
        }
        if role.changed().await.is_err() {
            return;
        }
    }
}

/// Serves the API on `listener` until the process ends: `forward` answers
/// every call, from the term while this server leads.
async fn serve_api(
    listener: &StdUnixListener,
    forward: Forward,
) -> Result<tokio::task::JoinHandle<()>, ServeError> {
    let listener =
        tokio::net::UnixListener::from_std(listener.try_clone().map_err(ServeError::io("the API socket"))?)
            .map_err(ServeError::io("the API socket"))?;
    let reflection = api::introspection::reflection()?;
    let health = api::introspection::health().await;
    Ok(tokio::spawn(async move {
        let served = tonic::transport::Server::builder()
            .layer(entrance(Entrance::Local))
            .add_service(forward)
            .add_service(health)
            .add_service(reflection)
            .serve_with_incoming(UnixListenerStream::new(listener))
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "the API server stopped");
        }
    }))
}

/// Marks every call as the entrance it came in by, for the leader's guard.
fn entrance(
    entrance: Entrance,
) -> tower::util::MapRequestLayer<
    impl Fn(http::Request<tonic::body::Body>) -> http::Request<tonic::body::Body> + Clone,
> {
    use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
    tower::util::MapRequestLayer::new(move |mut request: http::Request<tonic::body::Body>| {
        let subject = request
            .extensions()
            .get::<TlsConnectInfo<TcpConnectInfo>>()
            .and_then(|tls| tls.peer_certs())
            .and_then(|chain| api::access::PeerSubject::of(&chain));
        if let Some(subject) = subject {
            request.extensions_mut().insert(subject);
        }
        entrance.mark(&mut request);
        request
    })
}

/// Serves the TLS API: every call passed on as `forward` passes the
/// socket's, the server's own health service beside it.
fn serve_api_tls(tls: super::api_tls::ApiTls, forward: Forward) -> tokio::task::JoinHandle<()> {
    tracing::info!(api_address = %tls.address, ca = %tls.ca_file.display(), "serving the API over TLS to callers with ACL tokens");
    tokio::spawn(async move {
        let served = tonic::transport::Server::builder()
            .layer(entrance(Entrance::Remote))
            .add_service(forward)
            .serve_with_incoming(tls.incoming())
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "the TLS API stopped");
        }
    })
}

enum Ended {
    Shutdown,
    Deposed,
    Failed(ServeError),
}

/// One term: its own runtime, the store connected with the term's fence,
/// and everything a leader runs, until deposed, shut down or failed.
#[allow(clippy::too_many_arguments)]
async fn term(
    config: &Config,
    config_path: &Option<PathBuf>,
    settings: &EtcdSettings,
    term_api: &watch::Sender<Option<TermApi>>,
    ca: &Option<Arc<ClusterCa>>,
    election: &Arc<Election>,
    fence: Fence,
    warm: Option<Warm>,
    role: &mut watch::Receiver<Role>,
    shutdown: &mut std::pin::Pin<&mut (impl Future<Output = ()> + Send)>,
) -> Ended {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("berth-term")
        .build()
    {
        Ok(r) => r,
        Err(e) => return Ended::Failed(ServeError::io("starting the term's runtime")(e)),
    };
    let ca = match ca {
        Some(ca) => match ClusterCa::from_pem(ca.cert_pem(), &ca.key_pem()) {
            Ok(ca) => Some(ca),
            Err(e) => return Ended::Failed(e.into()),
        },
        None => None,
    };
    let (config, config_path, settings, election, routed) = (
        config.clone(),
        config_path.clone(),
        settings.clone(),
        election.clone(),
        term_api.clone(),
    );
    let (done, outcome) = tokio::sync::oneshot::channel();
    let fenced = fence.clone();
    runtime.spawn(async move {
        let result = async {
            // Read after winning: everything the last leader committed is there.
            let store = EtcdStore::connect_warm(settings, Some(fenced), warm).await?;
            lead(
                Term {
                    config,
                    config_path,
                    store: Arc::new(store),
                    api: TermSocket::Routed(routed),
                    ca,
                    election: Some(election),
                    node_records: None,
                },
                std::future::pending(),
            )
            .await
        }
        .await;
        let _ = done.send(result);
    });
    let ended = tokio::select! {
        _ = shutdown.as_mut() => Ended::Shutdown,
        _ = deposed(role, &fence) => Ended::Deposed,
        result = outcome => match result {
            Ok(Err(e)) => Ended::Failed(e),
            Ok(Ok(())) | Err(_) => Ended::Failed(ServeError::TermStopped),
        },
    };
    // Every task of the term stops at its next await; nothing it does
    // after this reaches etcd unfenced.
    runtime.shutdown_background();
    // Its calls fail over to the next leader, this server included.
    term_api.send_replace(None);
    crate::metrics::set_leader(false);
    ended
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_set_that_fails_to_prepare_is_tried_again_less_and_less_often() {
        let mut b = PrepareBackoff::default();
        assert!(b.due(Some(3)));
        let mut pauses = Vec::new();
        for _ in 0..8 {
            b.failed(Some(3));
            let start = tokio::time::Instant::now();
            while !b.due(Some(3)) {
                assert!(b.due(Some(4)), "another version is tried at once");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            pauses.push(start.elapsed().as_secs());
        }
        assert_eq!(pauses, [2, 4, 8, 16, 16, 16, 16, 16]);
    }
}
