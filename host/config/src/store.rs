//! `[store]`: the volumes and nodes in etcd instead of the embedded file,
//! checked by the etcd store itself with the key at fault.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::{ConfigError, duration, invalid};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStore {
    #[serde(default)]
    etcd: Vec<String>,
    prefix: Option<String>,
    name: Option<String>,
    lease_ttl: Option<String>,
    compact_every: Option<String>,
    ca: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
}

/// `[store]`: checked by the etcd store itself, with the key at fault;
/// the TLS files read here, relative to the config file's directory.
pub(super) fn etcd_settings(raw: RawStore, base: &Path) -> Result<berth_store::EtcdSettings, ConfigError> {
    let ttl = match raw.lease_ttl.as_deref() {
        Some(text) => Some(duration("store.lease_ttl", Some(text), "5s")?),
        None => None,
    };
    let compact_every = match raw.compact_every.as_deref() {
        Some(text) => Some(duration("store.compact_every", Some(text), "5m")?),
        None => None,
    };
    let read = |key: &str, path: &Path| {
        let path = base.join(path);
        std::fs::read_to_string(&path).map_err(|e| invalid(key, format!("reading {}: {e}", path.display())))
    };
    let identity = match (&raw.cert, &raw.key) {
        (Some(cert), Some(key)) => Some((read("store.cert", cert)?, read("store.key", key)?)),
        (None, None) => None,
        _ => return Err(invalid("store.cert", "cert and key go together")),
    };
    let tls = match &raw.ca {
        Some(ca) => Some(berth_store::EtcdTls {
            ca: read("store.ca", ca)?,
            identity,
        }),
        None if identity.is_some() => {
            return Err(invalid(
                "store.ca",
                "a client certificate needs the members' CA too",
            ));
        }
        None => None,
    };
    berth_store::EtcdSettings::new(raw.etcd, raw.prefix)
        .and_then(|s| s.server(raw.name, ttl))
        .and_then(|s| s.compaction(compact_every))
        .and_then(|s| s.tls(tls))
        .map_err(|(key, message)| invalid(key, message))
}
