//! Where Berth's state lives in etcd, and the fence a leader's writes carry.

use std::time::Duration;

use berth_proto::etcd::etcdserverpb as pb;

/// How long a leader's lease lives without a keep-alive, unless configured.
const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(5);

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
        Ok(EtcdSettings {
            endpoints,
            prefix,
            name: host_name(),
            lease_ttl: DEFAULT_LEASE_TTL,
        })
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

    pub(crate) fn key(&self, rest: &str) -> Vec<u8> {
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
    pub(crate) fn compare(&self) -> pb::Compare {
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
