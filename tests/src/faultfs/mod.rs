//! A disk that fails on command: a FUSE filesystem passing every call
//! through to a directory beside its mount point, whose writes, fsyncs and
//! space can be made to fail while a real Berth process uses it (root only:
//! it mounts). Failing calls answer what a real disk's would: EIO for a
//! write or fsync that did not reach the medium, ENOSPC for a full one,
//! EROFS for one remounted read-only. Reads never fail.

mod passthrough;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use fuser::Errno;

use passthrough::PassThrough;

/// What the disk does wrong, from now on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum DiskFault {
    /// Nothing: every call passes through.
    None = 0,
    /// Every fsync (and fdatasync) fails with EIO; writes still land.
    FailFsync = 1,
    /// Every write, truncate and allocation fails with EIO.
    FailWrites = 2,
    /// Every call that needs space fails with ENOSPC.
    Full = 3,
    /// Every call that changes anything fails with EROFS.
    ReadOnly = 4,
}

impl DiskFault {
    fn of(n: u8) -> DiskFault {
        match n {
            1 => DiskFault::FailFsync,
            2 => DiskFault::FailWrites,
            3 => DiskFault::Full,
            4 => DiskFault::ReadOnly,
            _ => DiskFault::None,
        }
    }
}

/// The fault in force and what it refused, shared with the mount's thread.
#[derive(Default)]
pub struct Faults {
    now: AtomicU8,
    /// Calls answered with an error since the start.
    pub refused: AtomicU64,
    /// fsyncs passed through since the start.
    pub fsyncs: AtomicU64,
}

impl Faults {
    pub(crate) fn fault(&self) -> DiskFault {
        DiskFault::of(self.now.load(Ordering::SeqCst))
    }

    /// A change's error under the fault in force (`grows`: it needs space).
    pub(crate) fn change(&self, grows: bool) -> Result<(), Errno> {
        let refused = match self.fault() {
            DiskFault::ReadOnly => Some(Errno::EROFS),
            DiskFault::FailWrites if grows => Some(Errno::EIO),
            DiskFault::Full if grows => Some(Errno::ENOSPC),
            _ => None,
        };
        match refused {
            Some(e) => {
                self.refused.fetch_add(1, Ordering::SeqCst);
                Err(e)
            }
            None => Ok(()),
        }
    }

    pub(crate) fn sync(&self) -> Result<(), Errno> {
        match self.fault() {
            DiskFault::FailFsync | DiskFault::FailWrites => {
                self.refused.fetch_add(1, Ordering::SeqCst);
                Err(Errno::EIO)
            }
            DiskFault::ReadOnly => {
                self.refused.fetch_add(1, Ordering::SeqCst);
                Err(Errno::EROFS)
            }
            _ => {
                self.fsyncs.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        }
    }
}

/// A mounted faulty disk; unmounted (and its files moved back) when dropped.
pub struct FaultDisk {
    session: Option<fuser::BackgroundSession>,
    pub faults: Arc<Faults>,
    mountpoint: PathBuf,
    backing: PathBuf,
}

impl FaultDisk {
    /// Mounts the disk over `dir` (which must exist), its files kept as they
    /// were; `None` when this process may not mount (not root, or a kernel
    /// without FUSE).
    pub fn over(dir: &Path) -> Option<FaultDisk> {
        if unsafe { libc::geteuid() } != 0 || !Path::new("/dev/fuse").exists() {
            return None;
        }
        let backing = dir.with_extension("faultfs-backing");
        std::fs::create_dir_all(&backing).expect("the backing directory");
        // The mount's root shows the backing directory's owner and mode: the directory's own.
        let mode = std::fs::metadata(dir)
            .expect("the directory to mount over")
            .permissions();
        std::fs::set_permissions(&backing, mode).expect("the backing directory's mode");
        for entry in std::fs::read_dir(dir)
            .expect("the directory to mount over")
            .flatten()
        {
            std::fs::rename(entry.path(), backing.join(entry.file_name())).expect("moving a file aside");
        }
        let faults = Arc::new(Faults::default());
        let fs = PassThrough::new(backing.clone(), faults.clone());
        let mut config = fuser::Config::default();
        config.mount_options = vec![fuser::MountOption::FSName("berth-faultfs".into())];
        config.acl = fuser::SessionACL::All;
        config.n_threads = Some(4);
        let session = fuser::spawn_mount(fs, dir, &config).expect("mounting the faulty disk");
        Some(FaultDisk {
            session: Some(session),
            faults,
            mountpoint: dir.to_path_buf(),
            backing,
        })
    }

    /// From now on, the disk does `fault` (`DiskFault::None`: nothing wrong).
    pub fn set(&self, fault: DiskFault) {
        self.faults.now.store(fault as u8, Ordering::SeqCst);
    }

    /// Calls refused so far.
    pub fn refused(&self) -> u64 {
        self.faults.refused.load(Ordering::SeqCst)
    }
}

impl Drop for FaultDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.mountpoint)
            .status();
        if let Some(s) = self.session.take() {
            drop(s);
        }
        if let Ok(entries) = std::fs::read_dir(&self.backing) {
            for entry in entries.flatten() {
                let _ = std::fs::rename(entry.path(), self.mountpoint.join(entry.file_name()));
            }
        }
        let _ = std::fs::remove_dir(&self.backing);
    }
}
