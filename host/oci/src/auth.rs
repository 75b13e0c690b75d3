//! Registry credentials from the Docker config file the ecosystem shares
//! (`docker login`, `oras login`, `cosign login` all write it): the
//! `auths` entry of a registry, as `auth` (base64 of USER:PASSWORD) or as
//! `username` and `password`. Credential helpers are not run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::Deserialize;

use crate::OciError;

/// A user and password for one registry. Never printed: `Debug` hides them.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Credentials {{ username: {:?}, password: <hidden> }}",
            self.username
        )
    }
}

impl Credentials {
    /// The `Authorization` value for HTTP basic authentication.
    pub(crate) fn basic(&self) -> String {
        let raw = format!("{}:{}", self.username, self.password);
        format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(raw))
    }
}

#[derive(Deserialize)]
struct ConfigFile {
    /// Each registry's entry, read only when asked for: one malformed entry
    /// (for another registry) must not break every pull.
    #[serde(default)]
    auths: BTreeMap<String, serde_json::Value>,
    /// The credential helper for every registry (`docker-credential-NAME`).
    #[serde(default, rename = "credsStore")]
    creds_store: Option<String>,
    /// Credential helpers by registry.
    #[serde(default, rename = "credHelpers")]
    cred_helpers: BTreeMap<String, String>,
}

/// The credential helper `path` names for `registry`, if it names one; a
/// file that does not read names none (its errors are `credentials_for`'s).
pub fn helper_for(path: &Path, registry: &str) -> Option<String> {
    let text = std::fs::read_to_string(path)
        .ok()
        .filter(|t| t.len() <= 1 << 20)?;
    let config: ConfigFile = serde_json::from_str(&text).ok()?;
    let helper = config
        .cred_helpers
        .iter()
        .find(|(key, _)| same_registry(key, registry))
        .map(|(_, h)| h.clone())
        .or(config.creds_store)?;
    // A name, not a path or a command line: shown, never run.
    let plain = !helper.is_empty()
        && helper.len() <= 64
        && helper
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    plain.then_some(helper)
}

/// Whether a config's key (`host`, `host:port` or a URL of it) is `registry`.
fn same_registry(key: &str, registry: &str) -> bool {
    let key = key
        .trim_start_matches("https://")
        .trim_start_matches("http://")
        .trim_end_matches('/');
    key.strip_suffix("/v2").unwrap_or(key) == registry
}

#[derive(Deserialize)]
struct Entry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

/// Where the Docker config file is: `$DOCKER_CONFIG/config.json`, else
/// `~/.docker/config.json`.
pub fn docker_config_path() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("DOCKER_CONFIG") {
        return Some(PathBuf::from(dir).join("config.json"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".docker/config.json"))
}

/// The credentials `path` holds for `registry` (`host[:port]`); none when
/// the file does not exist or has no entry for it.
pub fn credentials_for(path: &Path, registry: &str) -> Result<Option<Credentials>, OciError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(OciError::file(path, e)),
    };
    if text.len() > 1 << 20 {
        return Err(OciError::file(path, "larger than 1 MiB"));
    }
    // serde's messages quote the values they met: where, and what kind of
    // fault, only (a password must not reach a log).
    let config: ConfigFile = serde_json::from_str(&text).map_err(|e| {
        let kind = match e.classify() {
            serde_json::error::Category::Syntax | serde_json::error::Category::Eof => "not JSON",
            _ => "a value of the wrong kind",
        };
        OciError::file(
            path,
            format!(
                "not a Docker config file: {kind} at line {}, column {}",
                e.line(),
                e.column()
            ),
        )
    })?;
    // Keys are written as `host`, `host:port` or a URL of it. Another
    // registry's entry that does not read is passed over, named.
    let mut found = None;
    for (key, value) in &config.auths {
        match (Entry::deserialize(value), same_registry(key, registry)) {
            (Ok(entry), true) => {
                found = Some(entry);
                break;
            }
            (Err(_), true) => {
                return Err(OciError::file(
                    path,
                    format!(
                        "the entry of {key:?} is not an auth entry (auth, or username and password, as text)"
                    ),
                ));
            }
            (Err(_), false) => tracing::warn!(
                file = %path.display(),
                entry = %key,
                "an entry of the Docker config file is not an auth entry; passed over"
            ),
            (Ok(_), false) => {}
        }
    }
    let Some(entry) = found else {
        return Ok(None);
    };
    let decoded = match (&entry.auth, &entry.username, &entry.password) {
        (Some(auth), _, _) if !auth.is_empty() => {
            let raw = base64::engine::general_purpose::STANDARD
                .decode(auth.trim())
                .map_err(|_| OciError::file(path, format!("the auth of {registry:?} is not base64")))?;
            let text = String::from_utf8(raw)
                .map_err(|_| OciError::file(path, format!("the auth of {registry:?} is not text")))?;
            let (u, p) = text.split_once(':').ok_or_else(|| {
                OciError::file(path, format!("the auth of {registry:?} is not USER:PASSWORD"))
            })?;
            Credentials {
                username: u.to_string(),
                password: p.to_string(),
            }
        }
        (_, Some(u), Some(p)) => Credentials {
            username: u.clone(),
            password: p.clone(),
        },
        _ => return Ok(None),
    };
    Ok(Some(decoded))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_come_from_the_registrys_entry_and_are_never_printed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        // "berth:s3cret" and a URL-style key, as `docker login` writes for some registries.
        std::fs::write(
            &path,
            r#"{"auths": {"127.0.0.1:5000": {"auth": "YmVydGg6czNjcmV0"},
                          "https://r.example.com/v2/": {"username": "u", "password": "p"}}}"#,
        )
        .unwrap();
        let c = credentials_for(&path, "127.0.0.1:5000").unwrap().unwrap();
        assert_eq!((c.username.as_str(), c.password.as_str()), ("berth", "s3cret"));
        assert!(!format!("{c:?}").contains("s3cret"));
        assert_eq!(c.basic(), "Basic YmVydGg6czNjcmV0");
        assert_eq!(
            credentials_for(&path, "r.example.com").unwrap().unwrap().username,
            "u"
        );
        assert_eq!(credentials_for(&path, "other.io").unwrap(), None);
        assert_eq!(credentials_for(&dir.path().join("none.json"), "x").unwrap(), None);
        std::fs::write(&path, "{not json").unwrap();
        assert!(credentials_for(&path, "x").is_err());
        // A malformed entry is reported without what it holds.
        for (bad, says) in [
            (
                r#"{"auths": {"r.io": {"username": "u", "password": ["s3cret-pw"]}}}"#,
                "the entry of \"r.io\"",
            ),
            (
                r#"{"auths": {"r.io": "berth:s3cret-pw"}}"#,
                "the entry of \"r.io\"",
            ),
            (r#"{"auths": "YmVydGg6czNjcmV0LXB3", "s3cret": 1}"#, "line 1"),
            (
                r#"{"auths": {"r.io": {"password": "s3cret-pw", "username": 7}}}"#,
                "the entry of \"r.io\"",
            ),
        ] {
            std::fs::write(&path, bad).unwrap();
            let err = credentials_for(&path, "r.io").unwrap_err().to_string();
            assert!(!err.contains("s3cret") && !err.contains("YmVydGg6"), "{err}");
            assert!(err.contains(says), "{err}");
        }
    }

    #[test]
    fn another_registrys_malformed_entry_is_passed_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(
            &path,
            r#"{"auths": {"broken.io": {"username": 7, "password": ["x"]},
                          "ok.io": {"auth": "YmVydGg6czNjcmV0"}}}"#,
        )
        .unwrap();
        let c = credentials_for(&path, "ok.io").unwrap().unwrap();
        assert_eq!(c.username, "berth");
        assert_eq!(credentials_for(&path, "third.io").unwrap(), None);
        assert!(credentials_for(&path, "broken.io").is_err());
    }
}
