//! `[console]`: the web console, on an address of its own, over TLS with a
//! certificate from the same CA as the API's (so `api-ca.pem` is what a
//! browser is told to trust), or with a certificate and key of the
//! operator's own (one the browsers already trust). Off unless `address`
//! is set.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::{ConfigError, server_names};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConsole {
    address: Option<String>,
    #[serde(default)]
    names: Vec<String>,
    certificate: Option<PathBuf>,
    key: Option<PathBuf>,
}

/// Where the console listens and what its certificate names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsoleConfig {
    pub address: std::net::SocketAddr,
    /// The names and addresses in its certificate.
    pub names: Vec<String>,
    /// A certificate chain and its key (PEM files) to serve with instead of
    /// one from the API's CA.
    pub identity: Option<ConsoleIdentity>,
}

/// The operator's own certificate for the console.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsoleIdentity {
    /// The certificate chain, the console's own first.
    pub certificate: PathBuf,
    /// Its private key; it may not be readable by every user.
    pub key: PathBuf,
}

/// `[console]`; `resolve` takes a relative path from the config's directory.
pub(super) fn console(
    raw: Option<RawConsole>,
    resolve: &dyn Fn(&Path) -> PathBuf,
) -> Result<Option<ConsoleConfig>, ConfigError> {
    let Some(raw) = raw else { return Ok(None) };
    let Some(address) = server_names::address("console.address", raw.address.as_deref(), "127.0.0.1:7445")?
    else {
        return Err(crate::invalid(
            "console",
            "needs address: where the console listens (\"127.0.0.1:7445\")",
        ));
    };
    let names = server_names::server_names("console.names", raw.address.as_deref(), raw.names)?;
    let identity = match (raw.certificate, raw.key) {
        (None, None) => None,
        (Some(certificate), Some(key)) => Some(ConsoleIdentity {
            certificate: resolve(&certificate),
            key: resolve(&key),
        }),
        (Some(_), None) | (None, Some(_)) => {
            return Err(crate::invalid(
                "console",
                "certificate and key go together: both PEM files, or neither for one from the API's CA",
            ));
        }
    };
    Ok(Some(ConsoleConfig {
        address,
        names,
        identity,
    }))
}
