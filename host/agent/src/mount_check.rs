//! On start, the node record against what the node shows.
//!
//! A volume whose target or staging path no longer shows it (a reboot, an
//! operator's `umount`, a mount made in a mount namespace this process does
//! not see) may still be held by its plugin: a mount elsewhere, a device
//! attached, the plugin's own bookkeeping. The server takes a lower level
//! from a node as the node having let go, and may then bring a single-node
//! volume up on another node. So the plugin is asked to let go first
//! (NodeUnpublishVolume, NodeUnstageVolume: both idempotent), and the record
//! is lowered only to what it confirms, step by step.
//!
//! A plugin that does not answer leaves the volume as recorded (an upper
//! bound: the server sees it held, and a move waits) and the volume
//! unconfirmed; it is asked again while the agent runs, and a volume then
//! lowered is told to the server by registering again.

use std::collections::BTreeMap;

use berth_csi::{CsiError, Failure};

use crate::OpenError;
use crate::calls::{self, Paths};
use crate::failures::{gone_is_done, recording};
use crate::mounts::MountTable;
use crate::plugins::NodePlugins;
use crate::record::{Held, Level, NodeRecord};

/// Whether the node shows `held` as the record has it: the target path of
/// a published volume, the staging path of a staged one.
pub fn shown(paths: &Paths, mounts: &MountTable, id: &str, held: &Held) -> bool {
    let shows = |path: Result<std::path::PathBuf, _>| path.is_ok_and(|p| mounts.shows_volume(&p));
    let target = held.level < Level::Published || shows(paths.target(id));
    let staging = held.level != Level::Staged || shows(paths.staging(id));
    target && staging
}

/// Asks the plugin to let go of what the node does not show of `id`,
/// recording each step it confirms. Stops at the first refusal, with the
/// record at the level reached; answers whether anything was lowered.
pub async fn let_go(
    record: &NodeRecord,
    plugins: &NodePlugins,
    paths: &Paths,
    mounts: &MountTable,
    id: &str,
    held: &mut Held,
) -> Result<bool, CsiError> {
    let was = held.level;
    let shows = |path: Result<std::path::PathBuf, _>| path.is_ok_and(|p| mounts.shows_volume(&p));
    let client = plugins.client(&held.plugin).ok_or_else(|| CsiError {
        plugin: held.plugin.to_string(),
        call: "NodeUnpublishVolume",
        failure: Failure::Unreachable(format!("the agent has no node plugin {:?}", held.plugin)),
    })?;
    if held.level == Level::Published && !shows(paths.target(id)) {
        gone_is_done(id, calls::unpublish(&client, paths, id, &held.volume_id).await)?;
        held.level = if held.staged { Level::Staged } else { Level::Absent };
        record.put(id, held).await.map_err(recording)?;
    }
    if held.level == Level::Staged && !shows(paths.staging(id)) {
        gone_is_done(id, calls::unstage(&client, paths, id, &held.volume_id).await)?;
        held.level = Level::Absent;
        record.put(id, held).await.map_err(recording)?;
    }
    if held.level != was {
        tracing::warn!(volume = %id, ?was, now = ?held.level, "the node did not show what the record says; its plugin let go, recorded lower");
    }
    Ok(held.level != was)
}

/// Checks every held volume against the mount table: a volume path in use
/// that the record does not name is an error (the record was lost or
/// damaged, and taking the node as holding nothing would let the server
/// believe its mounts undone); a volume the node does not show is let go
/// through its plugin. Answers the volumes whose plugin did not confirm.
pub async fn check(
    record: &NodeRecord,
    plugins: &NodePlugins,
    paths: &Paths,
    record_place: &str,
    held: &mut BTreeMap<String, Held>,
) -> Result<Vec<String>, OpenError> {
    // Two paths a volume to look at, each a few system calls: off the
    // runtime's threads, which a server's `[[node]]` agents share with its API.
    let scan = Scan {
        paths: paths.clone(),
        held: std::mem::take(held),
    };
    let scanned = tokio::task::spawn_blocking(move || scan.run()).await;
    let (mounts, unknown, lost) = match scanned {
        Ok(scanned) => {
            *held = scanned.held;
            match scanned.found {
                Some(found) => found,
                None => return Ok(Vec::new()),
            }
        }
        // The scan fails only by a panic (which took the held list with it),
        // or is dropped as the runtime shuts down, the store with it.
        Err(e) => match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(_) => return Err(berth_store::StoreError::Closed.into()),
        },
    };
    if !unknown.is_empty() {
        let shown: Vec<String> = unknown.iter().take(5).map(|p| p.display().to_string()).collect();
        return Err(OpenError::UnknownMounts {
            record: record_place.to_string(),
            count: unknown.len(),
            shown: format!(
                "{}{}",
                shown.join(", "),
                if unknown.len() > shown.len() { ", ..." } else { "" }
            ),
        });
    }
    let mut unconfirmed = Vec::new();
    // A plugin that failed once is not asked again at start: a hung one
    // would otherwise hold the agent's registration a deadline per volume.
    let mut failed = std::collections::BTreeSet::new();
    for id in lost {
        let Some(h) = held.get_mut(&id) else {
            continue;
        };
        if failed.contains(&h.plugin) {
            unconfirmed.push(id.clone());
            continue;
        }
        if let Err(e) = let_go(record, plugins, paths, &mounts, &id, h).await {
            tracing::warn!(volume = %id, level = ?h.level, error = %e, "the node does not show what the record says, and its plugin did not confirm it let go: kept as recorded, asked again while the agent runs");
            failed.insert(h.plugin.clone());
            unconfirmed.push(id.clone());
        }
    }
    Ok(unconfirmed)
}

/// Threads a start's scan uses at most, whatever the machine has.
const SCAN_THREADS_MAX: usize = 4;

/// A scan thread's answer; its panic goes on in the caller.
fn join<T>(handle: std::thread::ScopedJoinHandle<'_, T>) -> T {
    handle
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// The file system's side of [`check`], run where blocking is allowed.
struct Scan {
    paths: Paths,
    held: BTreeMap<String, Held>,
}

struct Scanned {
    held: BTreeMap<String, Held>,
    /// The mount table, the volume paths in use that the record does not
    /// name, and the held volumes the node does not show; none when the
    /// mount table cannot be read (the record is taken as it is).
    found: Option<(MountTable, Vec<std::path::PathBuf>, Vec<String>)>,
}

impl Scan {
    fn run(self) -> Scanned {
        let mounts = match MountTable::read() {
            Ok(mounts) => mounts,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the mount table; the record is taken as it is");
                return Scanned {
                    held: self.held,
                    found: None,
                };
            }
        };
        // A few system calls a path, two paths a volume: on several threads,
        // the directories' walk on one of them (a restart's in-process agent
        // with 100,000 volumes spent most of its start here, on one core).
        let held: Vec<(&String, &Held)> = self.held.iter().collect();
        let (unknown, lost) = std::thread::scope(|s| {
            let unknown = s.spawn(|| unknown_volume_paths(&self.paths, &self.held, &mounts));
            let threads =
                std::thread::available_parallelism().map_or(1, |n| n.get().clamp(1, SCAN_THREADS_MAX));
            let parts: Vec<_> = held
                .chunks(held.len().div_ceil(threads).max(1))
                .map(|part| {
                    let (paths, mounts) = (&self.paths, &mounts);
                    s.spawn(move || {
                        part.iter()
                            .filter(|(id, h)| !shown(paths, mounts, id, h))
                            .map(|(id, _)| (*id).clone())
                            .collect::<Vec<String>>()
                    })
                })
                .collect();
            let lost: Vec<String> = parts.into_iter().flat_map(join).collect();
            (join(unknown), lost)
        });
        Scanned {
            held: self.held,
            found: Some((mounts, unknown, lost)),
        }
    }
}

/// Volume paths in use below the agent's directories that `held` does not name.
fn unknown_volume_paths(
    paths: &Paths,
    held: &BTreeMap<String, Held>,
    mounts: &MountTable,
) -> Vec<std::path::PathBuf> {
    // Hashed once: two lookups a volume in an ordered map of a million
    // ids were seconds of string comparisons.
    let named: std::collections::HashSet<&str> = held.keys().map(String::as_str).collect();
    let mut unknown = Vec::new();
    for dir in [&paths.staging_dir, &paths.publish_dir] {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in entries.flatten() {
            let known = e.file_name().to_str().is_some_and(|name| named.contains(name));
            if !known && mounts.shows_volume(&e.path()) {
                unknown.push(e.path());
            }
        }
    }
    unknown.sort();
    unknown
}
