//! Making a volume's directory visible at a staging or target path: a bind
//! mount where this process may mount, a symlink otherwise.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::config::MountMode;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Bind,
    Symlink,
}

pub struct Mounter {
    method: Method,
}

impl Mounter {
    /// Resolves `auto` by trying a bind mount inside the state directory.
    pub fn new(mode: MountMode, state_dir: &Path) -> anyhow::Result<Self> {
        let method = match mode {
            MountMode::Bind => Method::Bind,
            MountMode::Symlink => Method::Symlink,
            MountMode::Auto => probe_bind(state_dir),
        };
        Ok(Mounter { method })
    }

    pub fn mode(&self) -> Method {
        self.method
    }

    /// Whether `target` already shows `source` (same directory, by device and inode).
    pub fn shows(&self, source: &Path, target: &Path) -> bool {
        match (std::fs::metadata(source), std::fs::metadata(target)) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        }
    }

    /// Makes `source` visible at `target`. Idempotent: attaching the same
    /// source again succeeds; a target showing something else is an error.
    pub fn attach(&self, source: &Path, target: &Path, readonly: bool) -> io::Result<()> {
        if self.shows(source, target) {
            return Ok(());
        }
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        match self.method {
            Method::Bind => {
                std::fs::create_dir_all(target)?;
                if std::fs::read_dir(target)?.next().is_some() || is_mountpoint(target)? {
                    return Err(occupied(target));
                }
                mount(Some(source), target, libc::MS_BIND)?;
                if readonly {
                    mount(None, target, libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY)?;
                }
                Ok(())
            }
            Method::Symlink => {
                match std::fs::symlink_metadata(target) {
                    Ok(m) if m.is_dir() => std::fs::remove_dir(target).map_err(|_| occupied(target))?,
                    Ok(_) => return Err(occupied(target)),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
                std::os::unix::fs::symlink(source, target)
            }
        }
    }

    /// Undoes `attach` and removes what it created. A missing target is already detached.
    pub fn detach(&self, target: &Path) -> io::Result<()> {
        let meta = match std::fs::symlink_metadata(target) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        if meta.file_type().is_symlink() {
            return std::fs::remove_file(target);
        }
        if meta.is_dir() {
            if is_mountpoint(target)? {
                umount(target)?;
            }
            return match std::fs::remove_dir(target) {
                Err(e) if e.kind() == io::ErrorKind::DirectoryNotEmpty => Ok(()),
                other => other,
            };
        }
        Err(occupied(target))
    }
}

fn occupied(target: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!("{} already holds something else", target.display()),
    )
}

fn cstr(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::other("path contains NUL"))
}

fn mount(source: Option<&Path>, target: &Path, flags: libc::c_ulong) -> io::Result<()> {
    let src = source.map(cstr).transpose()?;
    let tgt = cstr(target)?;
    // SAFETY: every pointer is a valid NUL-terminated string or null, as mount(2) expects.
    let rc = unsafe {
        libc::mount(
            src.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            tgt.as_ptr(),
            std::ptr::null(),
            flags,
            std::ptr::null(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn umount(target: &Path) -> io::Result<()> {
    let tgt = cstr(target)?;
    // SAFETY: a valid NUL-terminated path.
    let rc = unsafe { libc::umount2(tgt.as_ptr(), 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Reads /proc/self/mountinfo: a bind mount of a directory on the same file
/// system keeps the device number, so stat cannot tell.
fn is_mountpoint(path: &Path) -> io::Result<bool> {
    let path = path.canonicalize()?;
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    Ok(info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|mp| Path::new(&unescape(mp)) == path))
}

/// mountinfo escapes space, tab, newline and backslash as \ooo.
fn unescape(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn probe_bind(state_dir: &Path) -> Method {
    // Per process: plugins sharing a state directory probe at once, and one
    // removing another's probe while it is mounted would leave the mount behind.
    let base = state_dir.join(format!(".mount-probe-{}", std::process::id()));
    let (a, b) = (base.join("source"), base.join("target"));
    let outcome = std::fs::create_dir_all(&a)
        .and_then(|_| std::fs::create_dir_all(&b))
        .and_then(|_| mount(Some(&a), &b, libc::MS_BIND))
        .and_then(|_| {
            umount(&b).inspect_err(|_| {
                // Never leave the probe mounted: detach it lazily.
                // SAFETY: a valid NUL-terminated path.
                let _ = cstr(&b).map(|t| unsafe { libc::umount2(t.as_ptr(), libc::MNT_DETACH) });
            })
        });
    let _ = std::fs::remove_dir_all(&base);
    match outcome {
        Ok(()) => Method::Bind,
        Err(e) => {
            tracing::info!(error = %e, "bind mounts not permitted here; using symlinks");
            Method::Symlink
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_decoded() {
        assert_eq!(unescape(r"/mnt/with\040space"), "/mnt/with space");
        assert_eq!(unescape(r"/plain"), "/plain");
        assert_eq!(unescape(r"/trailing\04"), r"/trailing\04");
    }

    #[test]
    fn symlink_attach_and_detach_are_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("data");
        std::fs::create_dir(&src).unwrap();
        let target = dir.path().join("pods/p1/mount");
        let m = Mounter {
            method: Method::Symlink,
        };
        m.attach(&src, &target, false).unwrap();
        m.attach(&src, &target, false).unwrap();
        assert!(m.shows(&src, &target));
        let other = dir.path().join("other");
        std::fs::create_dir(&other).unwrap();
        assert_eq!(
            m.attach(&other, &target, false).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        m.detach(&target).unwrap();
        m.detach(&target).unwrap();
        assert!(!target.exists());
    }
}
