//! The faulty disk's filesystem: every call passed through to the backing
//! directory, by path, unless the fault in force refuses it.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner, OpenFlags,
    RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen,
    ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

use super::{DiskFault, Faults};

/// No attribute or entry is cached by the kernel: every call comes here.
const TTL: Duration = Duration::ZERO;

#[derive(Default)]
struct Tables {
    paths: HashMap<u64, PathBuf>,
    inodes: HashMap<PathBuf, u64>,
    next_ino: u64,
    files: HashMap<u64, Arc<File>>,
    next_fh: u64,
}

pub(super) struct PassThrough {
    backing: PathBuf,
    faults: Arc<Faults>,
    tables: Mutex<Tables>,
}

fn errno(e: std::io::Error) -> Errno {
    Errno::from(e)
}

impl PassThrough {
    pub(super) fn new(backing: PathBuf, faults: Arc<Faults>) -> PassThrough {
        let mut tables = Tables {
            next_ino: 2,
            next_fh: 1,
            ..Tables::default()
        };
        tables.paths.insert(1, PathBuf::new());
        tables.inodes.insert(PathBuf::new(), 1);
        PassThrough {
            backing,
            faults,
            tables: Mutex::new(tables),
        }
    }

    fn tables(&self) -> std::sync::MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The path below the backing directory of inode `ino`.
    fn relative(&self, ino: INodeNo) -> Result<PathBuf, Errno> {
        self.tables().paths.get(&ino.0).cloned().ok_or(Errno::ENOENT)
    }

    fn real(&self, relative: &Path) -> PathBuf {
        self.backing.join(relative)
    }

    fn ino_of(&self, relative: &Path) -> u64 {
        let mut t = self.tables();
        if let Some(ino) = t.inodes.get(relative) {
            return *ino;
        }
        let ino = t.next_ino;
        t.next_ino += 1;
        t.paths.insert(ino, relative.to_path_buf());
        t.inodes.insert(relative.to_path_buf(), ino);
        ino
    }

    fn attr(&self, relative: &Path) -> Result<FileAttr, Errno> {
        let m = std::fs::symlink_metadata(self.real(relative)).map_err(errno)?;
        let time = |s: i64, ns: i64| UNIX_EPOCH + Duration::new(s.max(0) as u64, ns as u32);
        Ok(FileAttr {
            ino: INodeNo(self.ino_of(relative)),
            size: m.size(),
            blocks: m.blocks(),
            atime: time(m.atime(), m.atime_nsec()),
            mtime: time(m.mtime(), m.mtime_nsec()),
            ctime: time(m.ctime(), m.ctime_nsec()),
            crtime: UNIX_EPOCH,
            kind: FileType::from_std(m.file_type()).unwrap_or(FileType::RegularFile),
            perm: (m.mode() & 0o7777) as u16,
            nlink: m.nlink() as u32,
            uid: m.uid(),
            gid: m.gid(),
            rdev: m.rdev() as u32,
            blksize: 4096,
            flags: 0,
        })
    }

    fn child(&self, parent: INodeNo, name: &OsStr) -> Result<PathBuf, Errno> {
        Ok(self.relative(parent)?.join(name))
    }

    fn file(&self, fh: FileHandle) -> Result<Arc<File>, Errno> {
        self.tables().files.get(&fh.0).cloned().ok_or(Errno::EBADF)
    }

    fn keep(&self, file: File) -> u64 {
        let mut t = self.tables();
        let fh = t.next_fh;
        t.next_fh += 1;
        t.files.insert(fh, Arc::new(file));
        fh
    }

    /// Forgets `relative` (and what was below it), or moves it to `to`.
    fn moved(&self, relative: &Path, to: Option<&Path>) {
        let mut t = self.tables();
        let affected: Vec<(PathBuf, u64)> = t
            .inodes
            .iter()
            .filter(|(p, _)| p.starts_with(relative))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        if let Some(to) = to {
            // What was at the destination is replaced.
            let replaced: Vec<PathBuf> = t.inodes.keys().filter(|p| p.starts_with(to)).cloned().collect();
            for p in replaced {
                if let Some(ino) = t.inodes.remove(&p) {
                    t.paths.remove(&ino);
                }
            }
        }
        for (path, ino) in affected {
            t.inodes.remove(&path);
            t.paths.remove(&ino);
            if let Some(to) = to {
                let rest = path.strip_prefix(relative).unwrap_or(Path::new(""));
                let new = if rest.as_os_str().is_empty() {
                    to.to_path_buf()
                } else {
                    to.join(rest)
                };
                t.paths.insert(ino, new.clone());
                t.inodes.insert(new, ino);
            }
        }
    }

    /// Removes `name` from `parent` with `remove` (a file's or a directory's).
    fn remove(
        &self,
        parent: INodeNo,
        name: &OsStr,
        remove: fn(&Path) -> std::io::Result<()>,
    ) -> Result<(), Errno> {
        self.faults.change(false)?;
        let relative = self.child(parent, name)?;
        remove(&self.real(&relative)).map_err(errno)?;
        self.moved(&relative, None);
        Ok(())
    }

    /// The entry of `relative` (made or found), or why there is none.
    fn entry(&self, relative: Result<PathBuf, Errno>, reply: ReplyEntry) {
        match relative.and_then(|p| self.attr(&p)) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }
}

/// An answer from a result: `ok` with its value, else the error.
macro_rules! answer {
    ($reply:ident, $result:expr, $ok:expr) => {
        match $result {
            Ok(v) => $ok(v),
            Err(e) => $reply.error(e),
        }
    };
}

impl Filesystem for PassThrough {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.entry(self.child(parent, name), reply)
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        answer!(reply, self.relative(ino).and_then(|p| self.attr(&p)), |a| reply
            .attr(&TTL, &a))
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<std::time::SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<std::time::SystemTime>,
        _chgtime: Option<std::time::SystemTime>,
        _bkuptime: Option<std::time::SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let done = (|| -> Result<FileAttr, Errno> {
            let relative = self.relative(ino)?;
            let real = self.real(&relative);
            if mode.is_some() || uid.is_some() || gid.is_some() || size.is_some() {
                self.faults.change(size.is_some())?;
            }
            if let Some(mode) = mode {
                std::fs::set_permissions(&real, std::fs::Permissions::from_mode(mode & 0o7777))
                    .map_err(errno)?;
            }
            if uid.is_some() || gid.is_some() {
                std::os::unix::fs::chown(&real, uid, gid).map_err(errno)?;
            }
            if let Some(size) = size {
                match fh.and_then(|fh| self.file(fh).ok()) {
                    Some(f) => f.set_len(size).map_err(errno)?,
                    None => OpenOptions::new()
                        .write(true)
                        .open(&real)
                        .and_then(|f| f.set_len(size))
                        .map_err(errno)?,
                }
            }
            self.attr(&relative)
        })();
        answer!(reply, done, |a| reply.attr(&TTL, &a))
    }

    fn mknod(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let made = (|| -> Result<PathBuf, Errno> {
            self.faults.change(true)?;
            let relative = self.child(parent, name)?;
            let path = std::ffi::CString::new(self.real(&relative).as_os_str().as_encoded_bytes())
                .map_err(|_| Errno::EINVAL)?;
            if unsafe { libc::mknod(path.as_ptr(), mode & !umask, rdev as libc::dev_t) } != 0 {
                return Err(errno(std::io::Error::last_os_error()));
            }
            Ok(relative)
        })();
        self.entry(made, reply)
    }

    fn mkdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let made = (|| -> Result<PathBuf, Errno> {
            self.faults.change(true)?;
            let relative = self.child(parent, name)?;
            let real = self.real(&relative);
            std::fs::create_dir(&real).map_err(errno)?;
            std::fs::set_permissions(&real, std::fs::Permissions::from_mode(mode & !umask & 0o7777))
                .map_err(errno)?;
            Ok(relative)
        })();
        self.entry(made, reply)
    }

    fn symlink(&self, _req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let made = (|| -> Result<PathBuf, Errno> {
            self.faults.change(true)?;
            let relative = self.child(parent, link_name)?;
            std::os::unix::fs::symlink(target, self.real(&relative)).map_err(errno)?;
            Ok(relative)
        })();
        self.entry(made, reply)
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let read = self
            .relative(ino)
            .and_then(|p| std::fs::read_link(self.real(&p)).map_err(errno));
        answer!(reply, read, |t: PathBuf| reply
            .data(t.as_os_str().as_encoded_bytes()))
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        answer!(
            reply,
            self.remove(parent, name, |p| std::fs::remove_file(p)),
            |()| reply.ok()
        )
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        answer!(
            reply,
            self.remove(parent, name, |p| std::fs::remove_dir(p)),
            |()| reply.ok()
        )
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        _flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let done = (|| -> Result<(), Errno> {
            self.faults.change(false)?;
            let from = self.child(parent, name)?;
            let to = self.child(newparent, newname)?;
            std::fs::rename(self.real(&from), self.real(&to)).map_err(errno)?;
            self.moved(&from, Some(&to));
            Ok(())
        })();
        answer!(reply, done, |()| reply.ok())
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let opened = (|| -> Result<u64, Errno> {
            let real = self.real(&self.relative(ino)?);
            let access = flags.0 & libc::O_ACCMODE;
            let writes = access != libc::O_RDONLY;
            if writes || flags.0 & libc::O_TRUNC != 0 {
                self.faults.change(false)?;
            }
            let file = OpenOptions::new()
                .read(access != libc::O_WRONLY)
                .write(writes)
                .custom_flags(flags.0 & (libc::O_APPEND | libc::O_TRUNC))
                .open(real)
                .map_err(errno)?;
            Ok(self.keep(file))
        })();
        answer!(reply, opened, |fh| reply
            .opened(FileHandle(fh), FopenFlags::empty()))
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let made = (|| -> Result<(FileAttr, u64), Errno> {
            self.faults.change(true)?;
            let relative = self.child(parent, name)?;
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .custom_flags(flags & (libc::O_EXCL | libc::O_TRUNC | libc::O_APPEND))
                .mode(mode & !umask & 0o7777)
                .open(self.real(&relative))
                .map_err(errno)?;
            let fh = self.keep(file);
            Ok((self.attr(&relative)?, fh))
        })();
        answer!(reply, made, |(attr, fh): (FileAttr, u64)| reply.created(
            &TTL,
            &attr,
            Generation(0),
            FileHandle(fh),
            FopenFlags::empty()
        ))
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let read = self.file(fh).and_then(|f| {
            let mut buf = vec![0u8; size as usize];
            let mut got = 0;
            while got < buf.len() {
                match f.read_at(&mut buf[got..], offset + got as u64) {
                    Ok(0) => break,
                    Ok(n) => got += n,
                    Err(e) => return Err(errno(e)),
                }
            }
            buf.truncate(got);
            Ok(buf)
        });
        answer!(reply, read, |b: Vec<u8>| reply.data(&b))
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let written = self
            .faults
            .change(true)
            .and_then(|()| self.file(fh))
            .and_then(|f| f.write_all_at(data, offset).map_err(errno));
        answer!(reply, written, |()| reply.written(data.len() as u32))
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok()
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.tables().files.remove(&fh.0);
        reply.ok()
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        let synced = self.faults.sync().and_then(|()| self.file(fh)).and_then(|f| {
            match datasync {
                true => f.sync_data(),
                false => f.sync_all(),
            }
            .map_err(errno)
        });
        answer!(reply, synced, |()| reply.ok())
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(0), FopenFlags::empty())
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let listed = (|| -> Result<Vec<(u64, FileType, std::ffi::OsString)>, Errno> {
            let relative = self.relative(ino)?;
            let mut entries = vec![
                (ino.0, FileType::Directory, ".".into()),
                (1, FileType::Directory, "..".into()),
            ];
            let mut children: Vec<_> = std::fs::read_dir(self.real(&relative))
                .map_err(errno)?
                .flatten()
                .collect();
            children.sort_by_key(|e| e.file_name());
            for e in children {
                let kind = e
                    .file_type()
                    .ok()
                    .and_then(FileType::from_std)
                    .unwrap_or(FileType::RegularFile);
                let child = self.ino_of(&relative.join(e.file_name()));
                entries.push((child, kind, e.file_name()));
            }
            Ok(entries)
        })();
        match listed {
            Ok(entries) => {
                for (i, (ino, kind, name)) in entries.into_iter().enumerate().skip(offset as usize) {
                    if reply.add(INodeNo(ino), (i + 1) as u64, kind, name) {
                        break;
                    }
                }
                reply.ok()
            }
            Err(e) => reply.error(e),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        reply.ok()
    }

    fn fsyncdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let synced = self
            .faults
            .sync()
            .and_then(|()| self.relative(ino))
            .and_then(|p| {
                File::open(self.real(&p))
                    .and_then(|d| d.sync_all())
                    .map_err(errno)
            });
        answer!(reply, synced, |()| reply.ok())
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let path =
            std::ffi::CString::new(self.backing.as_os_str().as_encoded_bytes()).expect("no NUL in a path");
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statvfs(path.as_ptr(), &mut s) } != 0 {
            return reply.error(errno(std::io::Error::last_os_error()));
        }
        let full = self.faults.fault() == DiskFault::Full;
        let free = if full { 0 } else { s.f_bfree };
        let avail = if full { 0 } else { s.f_bavail };
        reply.statfs(
            s.f_blocks,
            free,
            avail,
            s.f_files,
            s.f_ffree,
            s.f_bsize as u32,
            s.f_namemax as u32,
            s.f_frsize as u32,
        )
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        use std::os::fd::AsRawFd;
        let done = self
            .faults
            .change(true)
            .and_then(|()| self.file(fh))
            .and_then(|f| {
                match unsafe { libc::fallocate(f.as_raw_fd(), mode, offset as i64, length as i64) } {
                    0 => Ok(()),
                    _ => Err(errno(std::io::Error::last_os_error())),
                }
            });
        answer!(reply, done, |()| reply.ok())
    }
}
