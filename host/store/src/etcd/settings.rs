//! Where Berth's state lives in etcd, and the fence a leader's writes carry.

use std::time::Duration;

use berth_proto::etcd::etcdserverpb as pb;

/// How long a leader's lease lives without a keep-alive, unless configured.
const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(5);
/// How often a leader compacts etcd's history, unless configured.
const DEFAULT_COMPACT_EVERY: Duration = Duration::from_secs(5 * 60);

/// Where the store lives in etcd.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdSettings {
    /// Client URLs of the etcd members (`http://host:port`).
    pub endpoints: Vec<String>,
    /// Every key Berth writes is below this; several Berth clusters can
    /// share one etcd with different prefixes.
    pub prefix: String,
    /// This server's name among the servers sharing the prefix.
    pub name: String,
    /// How long the leader's lease outlives its last keep-alive: a dead
    /// leader is replaced after about this long.
    pub lease_ttl: Duration,
    /// How often the leader compacts etcd's history (to the revision of one
    /// interval before); zero leaves compaction to etcd's own settings.
    pub compact_every: Duration,
    /// With `https://` members: the CA their certificates chain to, and
    /// this server's client certificate for etcd's `--client-cert-auth`.
    pub tls: Option<EtcdTls>,
}

/// TLS to the etcd members, read from files when the config is loaded.
#[derive(Clone, PartialEq, Eq)]
pub struct EtcdTls {
    /// PEM: the CA the members' certificates chain to.
    pub ca: String,
    /// PEM: this server's client certificate and key, when etcd asks for one.
    pub identity: Option<(String, String)>,
}

impl std::fmt::Debug for EtcdTls {
    /// Never the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdTls")
            .field("client_certificate", &self.identity.is_some())
            .finish_non_exhaustive()
    }
}

impl EtcdSettings {
    /// Client URLs are all `http://` or all `https://` (then [`EtcdSettings::tls`]
    /// must name the CA); the prefix defaults to `/berth`. An error names
    /// the `[store]` key at fault.
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
                .or_else(|| url.strip_prefix("https://"))
                .is_some_and(|rest| !rest.is_empty() && url.parse::<tonic::transport::Uri>().is_ok());
            if !ok {
                return Err((
                    "store.etcd",
                    format!("{url:?} is not an http://host:port or https://host:port URL"),
                ));
            }
        }
        let secure = endpoints.iter().filter(|u| u.starts_with("https://")).count();
        if secure != 0 && secure != endpoints.len() {
            return Err((
                "store.etcd",
                "the members' URLs are all http:// or all https://, not a mix".into(),
            ));
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
        Ok(EtcdSettings {
            endpoints,
            prefix,
            name: host_name(),
            lease_ttl: DEFAULT_LEASE_TTL,
            compact_every: DEFAULT_COMPACT_EVERY,
            tls: None,
        })
    }

    /// TLS to the members: required with `https://` URLs, refused with
    /// `http://` ones (a CA that would not be used is a mistake to report).
    pub fn tls(mut self, tls: Option<EtcdTls>) -> Result<Self, (&'static str, String)> {
        let secure = self.endpoints.iter().all(|u| u.starts_with("https://"));
        match (&tls, secure) {
            (None, true) => {
                return Err((
                    "store.ca",
                    "https:// members need the CA their certificates chain to (ca = \"etcd-ca.pem\")".into(),
                ));
            }
            (Some(_), false) => {
                return Err((
                    "store.ca",
                    "a CA is for https:// members; these are http://".into(),
                ));
            }
            _ => {}
        }
        self.tls = tls;
        Ok(self)
    }

    /// This server's name (default: the host name) and the leader lease's
    /// time to live (default 5 s; etcd counts leases in whole seconds).
    pub fn server(
        mut self,
        name: Option<String>,
        lease_ttl: Option<Duration>,
    ) -> Result<Self, (&'static str, String)> {
        if let Some(name) = name {
            let ok = !name.is_empty()
                && name.len() <= 63
                && name.bytes().all(|b| b.is_ascii_graphic() && b != b'/');
            if !ok {
                return Err((
                    "store.name",
                    format!("{name:?} must be 1 to 63 printable ASCII characters without '/'"),
                ));
            }
            self.name = name;
        }
        if let Some(ttl) = lease_ttl {
            if ttl.subsec_nanos() != 0 || ttl < Duration::from_secs(1) {
                return Err((
                    "store.lease_ttl",
                    format!(
                        "{} is not a whole number of seconds of at least 1 (etcd counts leases in seconds)",
                        humantime::format_duration(ttl)
                    ),
                ));
            }
            self.lease_ttl = ttl;
        }
        Ok(self)
    }

    /// How often the leader compacts etcd's history (default 5 min; zero:
    /// never, etcd's `--auto-compaction-retention` does it).
    pub fn compaction(mut self, every: Option<Duration>) -> Result<Self, (&'static str, String)> {
        if let Some(every) = every {
            if !every.is_zero() && every < Duration::from_secs(1) {
                return Err((
                    "store.compact_every",
                    format!(
                        "{} is too often: at least 1s, or 0s to leave compaction to etcd",
                        humantime::format_duration(every)
                    ),
                ));
            }
            self.compact_every = every;
        }
        Ok(self)
    }

    pub fn key(&self, rest: &str) -> Vec<u8> {
        format!("{}/{rest}", self.prefix).into_bytes()
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().replace('/', "-"))
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "berth".into())
}

/// What makes a write a leader's: the leader key's create revision when
/// this server won. Every transaction compares it, so a deposed leader's
/// late write fails instead of overwriting its successor's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence {
    pub key: Vec<u8>,
    pub create_revision: i64,
}

impl Fence {
    pub fn compare(&self) -> pb::Compare {
        use pb::compare::{CompareResult, CompareTarget, TargetUnion};
        pb::Compare {
            result: CompareResult::Equal as i32,
            target: CompareTarget::Create as i32,
            key: self.key.clone(),
            target_union: Some(TargetUnion::CreateRevision(self.create_revision)),
            range_end: Vec::new(),
        }
    }
}

/// The answer to a fenced write whose fence no longer holds.
pub const DEPOSED: &str = "this server is no longer the leader: its write was refused";

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
                urls(&["https://e:2379", "http://f:2379"]),
                None,
                "store.etcd",
                "not a mix",
            ),
            (
                urls(&["e:2379"]),
                None,
                "store.etcd",
                "is not an http://host:port or https://host:port URL",
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
    fn https_members_need_their_ca_and_http_ones_refuse_one() {
        let tls = EtcdTls {
            ca: "ca".into(),
            identity: None,
        };
        let secure = || EtcdSettings::new(vec!["https://e:2379".into()], None).unwrap();
        let plain = || EtcdSettings::new(vec!["http://e:2379".into()], None).unwrap();
        assert_eq!(secure().tls(None).unwrap_err().0, "store.ca");
        assert_eq!(plain().tls(Some(tls.clone())).unwrap_err().0, "store.ca");
        assert!(secure().tls(Some(tls)).unwrap().tls.is_some());
        assert!(plain().tls(None).unwrap().tls.is_none());
    }

    #[test]
    fn a_lease_counts_whole_seconds_and_a_name_is_one_key_segment() {
        let base = || EtcdSettings::new(vec!["http://e:2379".into()], None).unwrap();
        for (name, ttl, key) in [
            (Some("a/b"), None, "store.name"),
            (Some(""), None, "store.name"),
            (None, Some(Duration::from_millis(1500)), "store.lease_ttl"),
            (None, Some(Duration::from_millis(500)), "store.lease_ttl"),
        ] {
            let (k, message) = base().server(name.map(Into::into), ttl).unwrap_err();
            assert_eq!(k, key, "{message}");
        }
        let s = base()
            .server(Some("server-b".into()), Some(Duration::from_secs(2)))
            .unwrap();
        assert_eq!(
            (s.name.as_str(), s.lease_ttl),
            ("server-b", Duration::from_secs(2))
        );
        assert_eq!(s.key("leader"), b"/berth/leader");
    }
}
