//! What the operator configures for one policy module: its file, name,
//! settings, limits and what a failure does, and what was checked of it
//! (its digest, the key that signed it).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What to do when a module fails to decide.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnError {
    /// The decision fails; the operation waits and is retried later.
    #[default]
    Fail,
    /// Berth decides with its built-in policy instead.
    Builtin,
}

/// Hard limits on one module's decisions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Linear memory a decision may use.
    pub memory_bytes: usize,
    /// Wall-clock time a decision may take, instantiation included.
    pub deadline: Duration,
    /// Size of an answer (strings and lists, in bytes).
    pub max_answer_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_bytes: 32 << 20,
            deadline: Duration::from_millis(100),
            max_answer_bytes: 1 << 20,
        }
    }
}

/// Everything the operator configures for one module.
#[derive(Clone, Debug, Default)]
pub struct ModuleConfig {
    /// The operator's name for the module (logs, errors, metrics).
    pub name: String,
    pub path: PathBuf,
    /// Settings passed to the guest with every decision.
    pub settings: BTreeMap<String, String>,
    pub limits: Limits,
    pub on_error: OnError,
    /// The SHA-256 (hex) the file's bytes must have (a module pinned by a
    /// policy set, or fetched by digest): the bytes compiled are the bytes
    /// read and hashed once, never a file swapped in after a check.
    pub sha256: Option<String>,
    /// The trusted public key (its file) whose signature the module passed,
    /// when `[policy_trust]` had one checked.
    pub signed_by: Option<PathBuf>,
}

impl ModuleConfig {
    /// A module with default limits, named after its file.
    pub fn from_path(path: &Path) -> Self {
        ModuleConfig {
            name: path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "module".into()),
            path: path.to_path_buf(),
            ..Default::default()
        }
    }
}
