//! The addresses the server's TLS endpoints listen on, and the names their
//! certificates are for.

use crate::{ConfigError, invalid};

/// The server certificate's names: those configured, else this machine's
/// loopback names, the address's own IP (unless it is a wildcard) and host name.
pub(super) fn server_names(
    key: &str,
    address: Option<&str>,
    names: Vec<String>,
) -> Result<Vec<String>, ConfigError> {
    if let Some(bad) = names
        .iter()
        .find(|n| n.is_empty() || n.contains(char::is_whitespace))
    {
        return Err(invalid(key, format!("{bad:?} is not a host name or address")));
    }
    if !names.is_empty() || address.is_none() {
        return Ok(names);
    }
    let mut out = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    if let Some(ip) = address
        .and_then(|a| a.parse::<std::net::SocketAddr>().ok())
        .map(|a| a.ip())
        .filter(|ip| !ip.is_unspecified() && !ip.is_loopback())
    {
        out.push(ip.to_string());
    }
    if let Ok(host) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        let host = host.trim();
        if !host.is_empty() {
            out.push(host.to_string());
        }
    }
    Ok(out)
}

/// A listening address: `key`'s value, if set, read like `example`.
pub(super) fn address(
    key: &str,
    value: Option<&str>,
    example: &str,
) -> Result<Option<std::net::SocketAddr>, ConfigError> {
    value
        .map(|a| {
            a.parse()
                .map_err(|_| invalid(key, format!("{a:?} is not an address like {example:?}")))
        })
        .transpose()
}
