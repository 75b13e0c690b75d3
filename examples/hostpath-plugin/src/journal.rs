//! `--journal FILE`: one JSON line per call that changed something and
//! answered OK, with the wall-clock time it finished, for a checker that
//! reads what several plugin processes did (a single-writer volume mounted
//! on two nodes at once, a backend volume made twice). Lines are appended
//! with one write each, so processes may share the file.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde::Serialize;

/// What the journal keeps of one call.
#[derive(Debug, Default, Serialize)]
pub struct Entry<'a> {
    /// The call's CSI name, e.g. `NodePublishVolume`.
    pub call: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub volume: &'a str,
    /// CreateVolume's name.
    #[serde(skip_serializing_if = "str::is_empty")]
    pub name: &'a str,
    /// The node: the request's for the controller's calls, this process's for the node's.
    #[serde(skip_serializing_if = "str::is_empty")]
    pub node: &'a str,
    /// The staging or target path.
    #[serde(skip_serializing_if = "str::is_empty")]
    pub path: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub snapshot: &'a str,
    /// The access mode asked for (NodePublishVolume).
    #[serde(skip_serializing_if = "str::is_empty")]
    pub mode: &'a str,
    /// CreateVolume and CreateSnapshot: whether this call made it (false:
    /// it existed, and was answered again).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created: Option<bool>,
    /// Answered OK without doing the work (`--lie-rate`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub lied: bool,
}

#[derive(Clone, Default)]
pub struct Journal {
    file: Option<Arc<Mutex<File>>>,
}

impl Journal {
    pub fn open(path: Option<&Path>) -> anyhow::Result<Self> {
        Ok(Journal {
            file: crate::call_log::shared_append(path)?,
        })
    }

    pub fn note(&self, entry: Entry<'_>) {
        let Some(file) = &self.file else { return };
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let mut line = match serde_json::to_value(&entry) {
            Ok(serde_json::Value::Object(mut map)) => {
                map.insert("ms".into(), ms.into());
                map.insert("pid".into(), std::process::id().into());
                serde_json::Value::Object(map).to_string()
            }
            _ => return,
        };
        line.push('\n');
        let mut f = file.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = f.write_all(line.as_bytes()) {
            tracing::warn!(error = %e, "writing the journal");
        }
    }
}
