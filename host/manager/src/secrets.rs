//! Operator-provided CSI secrets: one file per secret in a directory, with
//! `KEY=VALUE` lines, readable by its owner only. Read when a CSI call needs
//! them and dropped after; never stored, logged, printed or shown to guests.

use std::collections::HashMap;
use std::fmt;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

/// A secret's contents. `Debug` shows the keys only.
#[derive(Clone, Default)]
pub struct SecretMap(HashMap<String, String>);

impl SecretMap {
    pub fn into_inner(self) -> HashMap<String, String> {
        self.0
    }
}

impl fmt::Debug for SecretMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut keys: Vec<&String> = self.0.keys().collect();
        keys.sort();
        write!(f, "SecretMap({keys:?}, values redacted)")
    }
}

/// A secret a namespace's volumes may not name.
#[derive(Debug, thiserror::Error)]
#[error(
    "secret {secret:?} is not given to namespace {namespace:?} (namespace_secrets in the server's berth.toml lists what each namespace may name)"
)]
pub struct NotGiven {
    pub secret: String,
    pub namespace: String,
}

/// Whether a volume of `spec` may name its secret: any in the default
/// namespace (as every volume could before namespaces), else only those
/// the operator gave its namespace.
pub fn given(config: &berth_config::Config, spec: &berth_model::VolumeSpec) -> Result<(), NotGiven> {
    let Some(secret) = &spec.secret else {
        return Ok(());
    };
    let ns = &spec.namespace;
    if ns.is_default()
        || config
            .namespace_secrets
            .get(ns.as_str())
            .is_some_and(|given| given.allows(secret))
    {
        return Ok(());
    }
    Err(NotGiven {
        secret: secret.clone(),
        namespace: ns.to_string(),
    })
}

#[derive(Clone, Debug, Default)]
pub struct Secrets {
    dir: Option<PathBuf>,
}

/// Why a secret could not be read; never says what is in it.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("secret {0:?} is referenced, but no secrets_dir is configured")]
    NoDir(String),
    #[error("secret name {0:?} must be a plain file name")]
    NotPlain(String),
    #[error("secret {name:?} ({}): {source}", .path.display())]
    Read {
        name: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("secret {name:?} ({}) has mode {mode:o}; it must not be readable by group or others (chmod 600)", .path.display())]
    Open { name: String, path: PathBuf, mode: u32 },
    /// The line itself may be secret: only its number is kept.
    #[error("secret {name:?}, line {line}: expected KEY=VALUE")]
    Line { name: String, line: usize },
}

impl Secrets {
    pub fn new(dir: Option<PathBuf>) -> Self {
        Secrets { dir }
    }

    /// Reads the secret `name`. Refuses names that are not plain file names and
    /// files that group or others could read.
    pub fn get(&self, name: &str) -> Result<SecretMap, SecretError> {
        let dir = self.dir.as_ref().ok_or_else(|| SecretError::NoDir(name.into()))?;
        if name.is_empty() || name.contains('/') || name.starts_with('.') {
            return Err(SecretError::NotPlain(name.into()));
        }
        let path = dir.join(name);
        let read = |source| SecretError::Read {
            name: name.into(),
            path: path.clone(),
            source,
        };
        let meta = std::fs::metadata(&path).map_err(read)?;
        if meta.permissions().mode() & 0o077 != 0 {
            return Err(SecretError::Open {
                name: name.into(),
                path,
                mode: meta.permissions().mode() & 0o777,
            });
        }
        let text = std::fs::read_to_string(&path).map_err(read)?;
        let mut map = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            // The line itself may be secret: the error names the line number only.
            let (k, v) = line.split_once('=').ok_or_else(|| SecretError::Line {
                name: name.into(),
                line: i + 1,
            })?;
            map.insert(k.trim().to_string(), v.trim().to_string());
        }
        Ok(SecretMap(map))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_owner_only_files_and_hides_values() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("backend");
        std::fs::write(&path, "# comment\ntoken = s3cr3t\nuser=admin\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let secrets = Secrets::new(Some(dir.path().to_path_buf()));
        let map = secrets.get("backend").unwrap();
        let shown = format!("{map:?}");
        assert!(shown.contains("token") && !shown.contains("s3cr3t"), "{shown}");
        assert_eq!(map.into_inner()["token"], "s3cr3t");

        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(
            secrets
                .get("backend")
                .unwrap_err()
                .to_string()
                .contains("chmod 600")
        );
        assert!(matches!(
            secrets.get("../etc/passwd"),
            Err(SecretError::NotPlain(_))
        ));
        std::fs::write(dir.path().join("bad"), "oops-no-equals").unwrap();
        std::fs::set_permissions(dir.path().join("bad"), std::fs::Permissions::from_mode(0o600)).unwrap();
        let err = secrets.get("bad").unwrap_err().to_string();
        assert!(err.contains("line 1") && !err.contains("oops"), "{err}");
    }
}
