//! What a run that did not converge or drain leaves to read: each volume
//! Berth still has that is not where it should be (its state, failure,
//! retry and latest events), what the plugins still hold of it, and the
//! plugin calls journaled for it. Printed with the violation, so a failed
//! run on a machine whose files are gone still says why.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::api;

use crate::{block_on, client, list};

/// Volumes shown at most: one stuck volume is usually the story.
const SHOWN: usize = 5;
/// Events and journal lines shown per volume.
const LINES: usize = 12;

/// The volumes Berth has that are failed, retrying or waiting (if none
/// is, every one it has), described.
pub fn berth_side(apis: &[PathBuf]) -> String {
    let Some(volumes) = list(apis) else {
        return "  (no server answered ListVolumes)\n".into();
    };
    let mut stuck: Vec<&api::Volume> = volumes
        .iter()
        .filter(|v| !v.failure.is_empty() || !v.retrying.is_empty() || !v.waiting.is_empty())
        .collect();
    if stuck.is_empty() {
        // Between a delete and its give-up a volume is none of these: what
        // is left is shown whatever its state.
        stuck = volumes.iter().collect();
    }
    let mut out = String::new();
    for v in stuck.iter().take(SHOWN) {
        let name = v.spec.as_ref().map(|s| s.name.clone()).unwrap_or_default();
        let full = get(apis, &name).unwrap_or_else(|| (*v).clone());
        out.push_str(&format!(
            "  volume {name} (id {}, plugin volume {}): {}\n",
            full.id, full.volume_id, full.state
        ));
        for (what, text) in [
            ("failure", &full.failure),
            ("retrying", &full.retrying),
            ("waiting", &full.waiting),
        ] {
            if !text.is_empty() {
                out.push_str(&format!("    {what}: {text}\n"));
            }
        }
        for p in &full.publications {
            out.push_str(&format!("    publication: {p:?}\n"));
        }
        let skip = full.events.len().saturating_sub(LINES);
        for e in &full.events[skip..] {
            out.push_str(&format!(
                "    event {} {} {}: {}\n",
                e.at_ms, e.step, e.code, e.message
            ));
        }
    }
    if stuck.len() > SHOWN {
        out.push_str(&format!("  ... and {} more\n", stuck.len() - SHOWN));
    }
    out
}

/// The plugin's records left under its state directory, and the calls the
/// journal has for each.
pub fn plugin_side(plugin_state: &Path, journal: &[serde_json::Value]) -> String {
    let mut out = String::new();
    let dir = plugin_state.join("volumes");
    let left: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    for path in left.iter().take(SHOWN) {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        // On one line, as the journal's are.
        let text = serde_json::from_str::<serde_json::Value>(&text).map_or(text, |v| v.to_string());
        out.push_str(&format!("  plugin record {}: {}\n", path.display(), text.trim()));
        let Some(id) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        let calls: Vec<&serde_json::Value> = journal
            .iter()
            .filter(|e| e.get("volume").and_then(|v| v.as_str()) == Some(id))
            .collect();
        let skip = calls.len().saturating_sub(LINES);
        for c in &calls[skip..] {
            out.push_str(&format!("    journaled: {c}\n"));
        }
    }
    out
}

fn get(apis: &[PathBuf], name: &str) -> Option<api::Volume> {
    apis.iter().find_map(|socket| {
        block_on(async {
            let mut cl = client(socket);
            tokio::time::timeout(
                Duration::from_secs(5),
                cl.get_volume(api::GetVolumeRequest {
                    name: name.to_string(),
                }),
            )
            .await
        })
        .ok()?
        .ok()
        .map(tonic::Response::into_inner)
    })
}
