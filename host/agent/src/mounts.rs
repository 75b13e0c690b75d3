//! The node's mount table, and whether a staging or target path still shows
//! a volume: after a node restarts, a path Berth published may be an empty
//! directory, or gone.

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};

/// Mount points of this process's mount namespace.
#[derive(Debug, Default)]
pub struct MountTable {
    points: HashSet<PathBuf>,
}

impl MountTable {
    /// Reads `/proc/self/mountinfo`.
    pub fn read() -> io::Result<MountTable> {
        Ok(MountTable::parse(&std::fs::read_to_string(
            "/proc/self/mountinfo",
        )?))
    }

    /// The mount point is the fifth field; spaces and other bytes in it are
    /// written as octal escapes (`\040`).
    pub fn parse(text: &str) -> MountTable {
        let points = text
            .lines()
            .filter_map(|line| line.split(' ').nth(4))
            .map(|field| PathBuf::from(unescape(field)))
            .collect();
        MountTable { points }
    }

    pub fn is_mount_point(&self, path: &Path) -> bool {
        self.points.contains(path)
    }

    /// Whether `path` still shows what a plugin put there: a mount point, a
    /// symlink to something that exists, a file (a block device's node), or
    /// a directory with something in it. Missing, dangling, or an empty
    /// directory that is not mounted: lost.
    pub fn shows_volume(&self, path: &Path) -> bool {
        if self.is_mount_point(path) {
            return true;
        }
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            return false;
        };
        if meta.file_type().is_symlink() {
            return std::fs::metadata(path).is_ok();
        }
        if meta.is_dir() {
            return std::fs::read_dir(path).is_ok_and(|mut d| d.next().is_some());
        }
        true
    }
}

fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match (bytes[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_mount_points_with_escapes() {
        let t = MountTable::parse(
            "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n\
             95 22 8:1 /data /var/lib/berth/publish/v\\0401 rw - ext4 /dev/sda1 rw\n",
        );
        assert!(t.is_mount_point(Path::new("/")));
        assert!(t.is_mount_point(Path::new("/var/lib/berth/publish/v 1")));
        assert!(!t.is_mount_point(Path::new("/var/lib/berth/publish")));
    }

    #[test]
    fn an_empty_unmounted_directory_or_a_dangling_link_shows_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let t = MountTable::default();
        let empty = dir.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        assert!(!t.shows_volume(&empty));
        assert!(!t.shows_volume(&dir.path().join("missing")));
        let dangling = dir.path().join("dangling");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
        assert!(!t.shows_volume(&dangling));

        let full = dir.path().join("full");
        std::fs::create_dir(&full).unwrap();
        std::fs::write(full.join("f"), "x").unwrap();
        assert!(t.shows_volume(&full));
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&full, &link).unwrap();
        assert!(t.shows_volume(&link));
        assert!(MountTable::parse("1 0 0:1 / / rw - x x rw\n").shows_volume(Path::new("/")));
    }
}
