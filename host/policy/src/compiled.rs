//! Compiled components kept on disk, so a restart or a takeover does not
//! compile a module again (a Python component takes seconds). Each is keyed
//! by the module's SHA-256 and a digest of what makes compiled code fit an
//! engine (wasmtime's version, the target, every code-generation setting,
//! Berth's own engine settings): an engine set up otherwise finds no entry
//! and compiles afresh. Beside the code, a record of its HMAC-SHA256 under a
//! key only this server reads (`policy-compiled.key` beside the cache
//! directory, mode 0600, made on first use), and of the file as it was
//! written (size, inode, modification and change times, under the same key). Code is
//! mapped only when the record vouches for that very file, or for its
//! contents in full: code this server did not write (planted in the
//! directory with a record of its own) is compiled again, never run.
//! Records written before the key existed vouch for nothing: their modules
//! are compiled once more and kept under the key.

use std::hash::Hash;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use hmac::{Hmac, Mac};
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
    /// The key records are authenticated under.
    key: [u8; 32],
}

/// The key beside the cache directory `dir`: read, or made (mode 0600,
/// created exclusively) when there is none. A key that is not this user's
/// own regular file (a link, another owner's, open to others) is refused;
/// one cut short (a crash while it was made) is made anew, and what the old
/// one vouched for is compiled again.
fn cache_key(dir: &Path) -> std::io::Result<[u8; 32]> {
    use std::io::{Read, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let mut name = dir.file_name().unwrap_or_default().to_os_string();
    name.push(".key");
    let path = dir.with_file_name(name);
    let mut key = [0u8; 32];
    let refuse = |why: &str| {
        std::io::Error::other(format!(
            "{} {why}: remove it, and a new one is made",
            path.display()
        ))
    };
    for _ in 0..2 {
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
        {
            Ok(mut f) => {
                rand::fill(&mut key);
                f.write_all(&key)?;
                f.sync_all()?;
                return Ok(key);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let mut f = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(&path)
                    .map_err(|e| match e.raw_os_error() {
                        Some(libc::ELOOP) => refuse("is a symbolic link"),
                        _ => e,
                    })?;
                let meta = f.metadata()?;
                // SAFETY: geteuid has no preconditions and cannot fail.
                let me = unsafe { libc::geteuid() };
                if !meta.is_file() || meta.uid() != me {
                    return Err(refuse("is not a file of this user's own"));
                }
                if meta.mode() & 0o077 != 0 {
                    return Err(refuse("is readable by others"));
                }
                if meta.len() < key.len() as u64 {
                    tracing::warn!(path = %path.display(), bytes = meta.len(), "the compiled-module cache's key is cut short; making a new one (cached modules are compiled again)");
                    std::fs::remove_file(&path)?;
                    continue;
                }
                f.read_exact(&mut key)?;
                return Ok(key);
            }
            Err(e) => return Err(e),
        }
    }
    Err(refuse("keeps being cut short"))
}

impl CompiledCache {
    /// `settings` names Berth's own engine settings, kept apart even where
    /// wasmtime would take the code. None when the key cannot be had (then
    /// every module is compiled, as without a cache).
    pub fn new(dir: &Path, engine: &Engine, settings: &str) -> Option<CompiledCache> {
        let key = match std::fs::create_dir_all(dir.parent().unwrap_or(dir)).and_then(|()| cache_key(dir)) {
            Ok(key) => key,
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "no key for the compiled-module cache: every module is compiled at load");
                return None;
            }
        };
        let mut feed = Feed(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut feed);
        std::hash::Hasher::write(&mut feed, settings.as_bytes());
        Some(CompiledCache {
            dir: dir.to_path_buf(),
            engine: hex(&feed.0.finalize()[..16]),
            key,
        })
    }

    fn mac(&self, parts: &[&[u8]]) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("any key length");
        for p in parts {
            mac.update(&(p.len() as u64).to_le_bytes());
            mac.update(p);
        }
        mac
    }

    /// The record of `code` (its contents' MAC) as the file `meta` is.
    fn record(&self, code_mac: Vec<u8>, meta: &std::fs::Metadata) -> Record {
        let (size, inode, modified_ns) = file_identity(meta);
        let file = self.mac(&[
            &code_mac,
            &size.to_le_bytes(),
            &inode.to_le_bytes(),
            &modified_ns.to_le_bytes(),
        ]);
        Record {
            code: hex(&code_mac),
            file: hex(&file.finalize().into_bytes()),
        }
    }

    /// Whether `record` vouches for the code file `meta` is of (the entry
    /// named `stem`), as the very file written (no read), or else for its
    /// contents read in full.
    fn vouches(&self, stem: &str, record: &Record, meta: &std::fs::Metadata, code: &Path) -> bool {
        let (size, inode, modified_ns) = file_identity(meta);
        let Ok(code_mac) = unhex(&record.code) else {
            return false;
        };
        let same_file = self
            .mac(&[
                &code_mac,
                &size.to_le_bytes(),
                &inode.to_le_bytes(),
                &modified_ns.to_le_bytes(),
            ])
            .verify_slice(&unhex(&record.file).unwrap_or_default())
            .is_ok();
        same_file
            || std::fs::read(code).is_ok_and(|bytes| {
                self.mac(&[stem.as_bytes(), &bytes])
                    .verify_slice(&code_mac)
                    .is_ok()
            })
    }

    /// An entry's name: the module's SHA-256 and the engine's digest. The
    /// MACs cover it, so one entry's files never vouch under another's name.
    fn stem(&self, sha256: &str) -> String {
        format!("{sha256}-{}", self.engine)
    }

    fn paths(&self, sha256: &str) -> (PathBuf, PathBuf) {
        let stem = self.stem(sha256);
        (
            self.dir.join(format!("{stem}.cwasm")),
            self.dir.join(format!("{stem}.json")),
        )
    }

    /// Whether an entry for the bytes with this SHA-256 (hex) is kept (not
    /// yet checked: [`CompiledCache::get`] vouches for it).
    pub fn holds(&self, sha256: &str) -> bool {
        self.paths(sha256).1.exists()
    }

    /// The component compiled before from the bytes with this SHA-256 (hex), if this cache holds it whole.
    pub fn get(&self, engine: &Engine, sha256: &str) -> Option<Component> {
        let (code, record) = self.paths(sha256);
        let record: Record = serde_json::from_slice(&std::fs::read(&record).ok()?).ok()?;
        let meta = std::fs::metadata(&code).ok()?;
        if !self.vouches(&self.stem(sha256), &record, &meta, &code) {
            tracing::warn!(path = %code.display(), "a compiled component is not what this server wrote; compiling again");
            return None;
        }
        // SAFETY: the file is what `put` wrote with this engine's
        // compatibility digest in its name, vouched for by a record under
        // this server's key (as that very file, or by its contents' MAC);
        // wasmtime checks the engine again.
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
            let stem = self.stem(sha256);
            let code_mac = self
                .mac(&[stem.as_bytes(), &bytes])
                .finalize()
                .into_bytes()
                .to_vec();
            let r = self.record(code_mac, &meta);
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

/// What the cache knows of compiled code it wrote, under its key.
#[derive(Serialize, Deserialize)]
struct Record {
    /// HMAC-SHA256 of the code's bytes (hex).
    code: String,
    /// HMAC-SHA256 of that and the file's size, inode, modification and
    /// change times (records written before the change time was counted
    /// vouch only through the contents' MAC).
    file: String,
}

/// What tells the very file written from any other: its size, its inode,
/// and its modification and change times. The change time cannot be put
/// back (a rewrite in place that restores the modification time still
/// moves it), so a file changed since it was written is read in full.
fn file_identity(meta: &std::fs::Metadata) -> (u64, u64, i64) {
    let ns = |s: i64, n: i64| s.wrapping_mul(1_000_000_000).wrapping_add(n);
    (
        meta.len(),
        meta.ino(),
        ns(meta.mtime(), meta.mtime_nsec()) ^ ns(meta.ctime(), meta.ctime_nsec()).rotate_left(32),
    )
}

fn unhex(text: &str) -> Result<Vec<u8>, ()> {
    if !text.len().is_multiple_of(2) {
        return Err(());
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2).ok_or(())?, 16).map_err(|_| ()))
        .collect()
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

    #[test]
    fn code_rewritten_in_place_with_its_times_put_back_is_compiled_again() {
        use std::io::{Seek, Write};
        let dir = tempfile::tempdir().unwrap();
        let wasm = wat::parse_str("(component (core module (func (export \"f\"))))").unwrap();
        engine(dir.path(), 64 << 20).compile(&wasm).unwrap();
        let (name, inode) = kept(dir.path()).remove(0);
        let path = dir.path().join(&name);
        let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
        let good = std::fs::read(&path).unwrap();
        // The same inode and size, a byte changed, the modification time put back.
        let mut f = std::fs::File::options().write(true).open(&path).unwrap();
        f.seek(std::io::SeekFrom::Start(good.len() as u64 / 2)).unwrap();
        f.write_all(&[good[good.len() / 2] ^ 0xff]).unwrap();
        f.set_modified(mtime).unwrap();
        drop(f);
        assert_eq!(std::fs::metadata(&path).unwrap().ino(), inode);
        engine(dir.path(), 64 << 20).compile(&wasm).unwrap();
        assert_eq!(
            std::fs::read(&path).unwrap(),
            good,
            "compiled again and rewritten"
        );
    }

    #[test]
    fn a_key_cut_short_is_made_anew_and_a_linked_key_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("policy-compiled");
        let key = dir.path().join("policy-compiled.key");
        let wasm = wat::parse_str("(component (core module (func (export \"k\"))))").unwrap();
        // An empty key (a crash as it was made): a new key, and the cache works.
        std::fs::write(&key, b"").unwrap();
        std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        engine(&cache, 64 << 20).compile(&wasm).unwrap();
        assert_eq!(std::fs::metadata(&key).unwrap().len(), 32);
        assert_eq!(kept(&cache).len(), 1, "kept under the new key");
        // A key that is a link (to a file anyone may have placed) is not used.
        let elsewhere = dir.path().join("elsewhere.key");
        std::fs::rename(&key, &elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &key).unwrap();
        let before = kept(&cache);
        engine(&cache, 32 << 20).compile(&wasm).unwrap();
        assert_eq!(kept(&cache), before, "no cache with a linked key");
    }

    #[test]
    fn code_this_server_did_not_write_is_compiled_again_never_run() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("policy-compiled");
        let a = wat::parse_str("(component (core module (func (export \"a\"))))").unwrap();
        let b = wat::parse_str("(component (core module (func (export \"b\"))))").unwrap();
        engine(&cache, 64 << 20).compile(&a).unwrap();
        engine(&cache, 64 << 20).compile(&b).unwrap();
        let key = dir.path().join("policy-compiled.key");
        assert_eq!(std::fs::metadata(&key).unwrap().mode() & 0o777, 0o600);
        let files = kept(&cache);
        let (name_a, name_b) = (&files[0].0, &files[1].0);
        let stem = |n: &str| n.trim_end_matches(".cwasm").to_string();
        // B's code and its own record planted under A's name: refused, as is
        // a record written without the key.
        for (code, record) in [
            (
                cache.join(name_b),
                std::fs::read(cache.join(format!("{}.json", stem(name_b)))).unwrap(),
            ),
            (cache.join(name_b), br#"{"code":"00","file":"00"}"#.to_vec()),
        ] {
            std::fs::copy(&code, cache.join(name_a)).unwrap();
            std::fs::write(cache.join(format!("{}.json", stem(name_a))), &record).unwrap();
            let planted = std::fs::read(cache.join(name_a)).unwrap();
            engine(&cache, 64 << 20).compile(&a).unwrap();
            assert_ne!(
                std::fs::read(cache.join(name_a)).unwrap(),
                planted,
                "compiled again and rewritten"
            );
        }
        // A key others may read is not used.
        std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
        let before = kept(&cache);
        engine(&cache, 32 << 20).compile(&a).unwrap();
        assert_eq!(kept(&cache), before, "no cache without a private key");
    }
}
