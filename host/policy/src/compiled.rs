//! Compiled components kept on disk, so a restart or a takeover does not
//! compile a module again (a Python component takes seconds). Each is keyed
//! by the module's SHA-256 and a digest of what makes compiled code fit an
//! engine (wasmtime's version, the target, every code-generation setting,
//! Berth's own engine settings): an engine set up otherwise finds no entry
//! and compiles afresh. Beside the code, a record of its SHA-256 and of the
//! file as it was written (size, inode, modification time). Code is mapped
//! only when it is that very file, or when it matches the SHA-256 in full:
//! only what this cache wrote, whole, is ever used.

use std::hash::Hash;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A `Hasher` that feeds SHA-256, for wasmtime's compatibility hash.
/// The SHA-256 of a module's bytes, as hex: its name in the cache and its digest.
pub fn sha256_hex(wasm: &[u8]) -> String {
    hex(&Sha256::digest(wasm)[..])
}

struct Feed(Sha256);

impl std::hash::Hasher for Feed {
    fn finish(&self) -> u64 {
        0
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

/// Where compiled components are kept for one engine.
pub(crate) struct CompiledCache {
    dir: PathBuf,
    /// What compiled code must have been made for, as hex.
    engine: String,
}

impl CompiledCache {
    /// `settings` names Berth's own engine settings, kept apart even where
    /// wasmtime would take the code.
    pub fn new(dir: &Path, engine: &Engine, settings: &str) -> CompiledCache {
        let mut feed = Feed(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut feed);
        std::hash::Hasher::write(&mut feed, settings.as_bytes());
        CompiledCache {
            dir: dir.to_path_buf(),
            engine: hex(&feed.0.finalize()[..16]),
        }
    }

    fn paths(&self, sha256: &str) -> (PathBuf, PathBuf) {
        let stem = format!("{sha256}-{}", self.engine);
        (
            self.dir.join(format!("{stem}.cwasm")),
            self.dir.join(format!("{stem}.json")),
        )
    }

    /// The component compiled before from the bytes with this SHA-256 (hex), if this cache holds it whole.
    pub fn get(&self, engine: &Engine, sha256: &str) -> Option<Component> {
        let (code, record) = self.paths(sha256);
        let record: Record = serde_json::from_slice(&std::fs::read(&record).ok()?).ok()?;
        let meta = std::fs::metadata(&code).ok()?;
        let whole = record.is(&meta) || {
            // Not the file written: only its contents can vouch for it.
            let bytes = std::fs::read(&code).ok()?;
            hex(&Sha256::digest(&bytes)) == record.sha256
        };
        if !whole {
            tracing::warn!(path = %code.display(), "a compiled component does not match its checksum; compiling again");
            return None;
        }
        // SAFETY: the file is what `put` wrote with this engine's
        // compatibility digest in its name, checked against its record (as
        // that very file, or by its SHA-256); wasmtime checks the engine again.
        match unsafe { Component::deserialize_file(engine, &code) } {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!(path = %code.display(), error = %e, "a compiled component does not load; compiling again");
                None
            }
        }
    }

    /// Keeps `component`, compiled from the bytes with this SHA-256; a failure to write costs
    /// only the next start's compile.
    pub fn put(&self, sha256: &str, component: &Component) {
        let (code, record) = self.paths(sha256);
        let written = (|| -> std::io::Result<()> {
            std::fs::create_dir_all(&self.dir)?;
            let bytes = component.serialize().map_err(std::io::Error::other)?;
            // The code first, synced: a record never names code that is not there whole.
            let meta = write(&code, &bytes)?;
            let r = Record::of(hex(&Sha256::digest(&bytes)), &meta);
            write(&record, &serde_json::to_vec(&r).map_err(std::io::Error::other)?).map(drop)
        })();
        if let Err(e) = written {
            tracing::warn!(dir = %self.dir.display(), error = %e, "could not keep a compiled component");
        }
    }
}

/// Writes `data` to `path` whole (a new file, synced, renamed into place).
/// The new file's name is this write's own: two compiles of one module at
/// once (a follower preparing the set while a term starts) never share it.
fn write(path: &Path, data: &[u8]) -> std::io::Result<std::fs::Metadata> {
    use std::io::Write;
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = path.with_extension(format!("{}-{n}.partial", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)?;
    f.write_all(data)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    std::fs::metadata(path)
}

/// What the cache knows of compiled code it wrote.
#[derive(Serialize, Deserialize)]
struct Record {
    sha256: String,
    size: u64,
    inode: u64,
    modified_ns: i64,
}

impl Record {
    fn of(sha256: String, meta: &std::fs::Metadata) -> Record {
        Record {
            sha256,
            size: meta.len(),
            inode: meta.ino(),
            modified_ns: meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
        }
    }

    /// Whether `meta` is of the very file this record was written for.
    fn is(&self, meta: &std::fs::Metadata) -> bool {
        let now = Record::of(String::new(), meta);
        (now.size, now.inode, now.modified_ns) == (self.size, self.inode, self.modified_ns)
    }
}

#[cfg(test)]
mod tests {
    use crate::{EngineOptions, PolicyEngine};
    use std::os::unix::fs::MetadataExt;
    use std::time::{Duration, SystemTime};

    fn engine(dir: &std::path::Path, max_memory: usize) -> PolicyEngine {
        PolicyEngine::new(EngineOptions {
            concurrency: 1,
            max_module_memory: max_memory,
            compiled_dir: Some(dir.to_path_buf()),
            ..EngineOptions::default()
        })
        .unwrap()
    }

    /// The compiled files, by name, with their inodes.
    fn kept(dir: &std::path::Path) -> Vec<(String, u64)> {
        let mut files: Vec<(String, u64)> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".cwasm"))
            .map(|e| {
                (
                    e.file_name().to_string_lossy().into_owned(),
                    e.metadata().unwrap().ino(),
                )
            })
            .collect();
        files.sort();
        files
    }

    /// Replaces the file at `path` by `bytes` with modification time `at`.
    fn replace(path: &std::path::Path, bytes: &[u8], at: SystemTime) {
        let copy = path.with_extension("copy");
        std::fs::write(&copy, bytes).unwrap();
        std::fs::rename(&copy, path).unwrap();
        std::fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(at)
            .unwrap();
    }

    #[test]
    fn compiled_code_is_reused_only_by_an_engine_set_up_alike_and_only_whole() {
        let dir = tempfile::tempdir().unwrap();
        let wasm = wat::parse_str("(component (core module (func (export \"f\"))))").unwrap();
        engine(dir.path(), 64 << 20).compile(&wasm).unwrap();
        let first = kept(dir.path());
        assert_eq!(first.len(), 1);

        // A restart: the same code is mapped, not written again.
        engine(dir.path(), 64 << 20).compile(&wasm).unwrap();
        assert_eq!(kept(dir.path()), first, "reused, not compiled and written again");

        // Other settings: compiled afresh, kept apart.
        engine(dir.path(), 128 << 20).compile(&wasm).unwrap();
        assert_eq!(kept(dir.path()).len(), 2);

        // Damaged code is never mapped, even with its modification time put
        // back: the file is not the one written, so its contents are checked.
        let path = dir.path().join(&first[0].0);
        let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
        let good = std::fs::read(&path).unwrap();
        let mut bad = good.clone();
        let middle = bad.len() / 2;
        bad[middle] ^= 0xff;
        replace(&path, &bad, mtime);
        engine(dir.path(), 64 << 20).compile(&wasm).unwrap();
        assert_eq!(
            std::fs::read(&path).unwrap(),
            good,
            "compiled again and rewritten"
        );

        // A copy of the right bytes (a restored backup) is checked in full and used.
        replace(&path, &good, SystemTime::now() + Duration::from_secs(5));
        let restored = std::fs::metadata(&path).unwrap().ino();
        engine(dir.path(), 64 << 20).compile(&wasm).unwrap();
        let entry = kept(dir.path())
            .into_iter()
            .find(|(name, _)| *name == first[0].0)
            .unwrap();
        assert_eq!(
            entry.1, restored,
            "its contents vouched for it: not compiled again"
        );
    }
}
