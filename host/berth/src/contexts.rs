//! Named contexts: how to reach a server's TLS API, kept in a file so that
//! `--context NAME` (or the file's `current`) stands for BERTH_ADDR,
//! BERTH_CACERT, BERTH_NAMESPACE and the token, as kubectl's and nomad's
//! users expect. Flags and the environment still win over a context.
//!
//! ```toml
//! current = "prod"
//!
//! [context.prod]
//! addr = "https://berth.example:7444"
//! cacert = "prod-ca.pem"            # relative to this file
//! namespace = "team-a"
//! token_file = "prod.token"         # mode 0600: the token is never in this file
//! # or, instead of a token, a client certificate of the API's client CA:
//! # client_cert = "alice.pem"
//! # client_key = "alice.key"        # mode 0600
//! ```
//!
//! The file is `BERTH_CONTEXTS`, else `$XDG_CONFIG_HOME/berth/contexts.toml`,
//! else `~/.config/berth/contexts.toml`.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    current: Option<String>,
    #[serde(default)]
    context: BTreeMap<String, Context>,
}

/// One named context; what it leaves out, the flags and environment say.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Context {
    pub addr: Option<String>,
    pub cacert: Option<PathBuf>,
    pub namespace: Option<String>,
    pub token_file: Option<PathBuf>,
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
}

/// Where the contexts file is.
fn path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("BERTH_CONTEXTS") {
        return Some(PathBuf::from(p));
    }
    let config = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(config.join("berth/contexts.toml"))
}

/// The context `named`, or the file's `current` one; none when neither is
/// (no file, or no `current`). A context named that is not there is an
/// error, as is a file that does not read.
pub fn chosen(named: Option<&str>) -> anyhow::Result<Option<Context>> {
    let Some(path) = path() else {
        return match named {
            Some(name) => anyhow::bail!("--context {name}: no contexts file (set BERTH_CONTEXTS or HOME)"),
            None => Ok(None),
        };
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && named.is_none() => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading the contexts file {}", path.display())),
    };
    let file: File =
        toml::from_str(&text).with_context(|| format!("the contexts file {}", path.display()))?;
    let Some(name) = named.map(str::to_string).or(file.current) else {
        return Ok(None);
    };
    let Some(mut context) = file.context.get(&name).cloned() else {
        let known: Vec<&String> = file.context.keys().collect();
        anyhow::bail!("no context {name:?} in {} (it has {known:?})", path.display());
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    context.cacert = context.cacert.map(|p| dir.join(p));
    context.token_file = context.token_file.map(|p| dir.join(p));
    context.client_cert = context.client_cert.map(|p| dir.join(p));
    context.client_key = context.client_key.map(|p| dir.join(p));
    if context.client_cert.is_some() != context.client_key.is_some() {
        anyhow::bail!("context {name:?}: client_cert and client_key go together");
    }
    Ok(Some(context))
}

/// What a file only its owner may read holds (a token, a private key).
pub fn private_text(path: &Path) -> anyhow::Result<String> {
    let meta = std::fs::metadata(path).with_context(|| format!("the private file {}", path.display()))?;
    if meta.permissions().mode() & 0o077 != 0 {
        anyhow::bail!(
            "{} may be read by others: chmod 600 it (a token or a key is a password)",
            path.display()
        );
    }
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text.trim().to_string())
}
