//! The audit log: one JSON line for every call that changed something or
//! was refused for who asked, saying who (the management identity or a
//! token's accessor, never a secret), the call, the namespace, what it
//! named, how it ended and when. Lines go to a file of the server's (mode
//! 0600), renamed to `.1` past [`MAX_BYTES`] with [`KEPT`] older files
//! kept, and each is counted in `berth_api_requests_total`.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::Serialize;

/// A file grows to this, then is renamed `.1`.
pub const MAX_BYTES: u64 = 64 << 20;
/// Older files kept (`.1` to `.3`).
pub const KEPT: usize = 3;

/// One line of the audit log.
#[derive(Debug, Serialize)]
pub struct Entry<'a> {
    pub at_ms: u64,
    pub identity: &'a str,
    pub call: &'a str,
    pub namespace: &'a str,
    /// What the call named (a volume, a node, a policy, a token's
    /// accessor), when it names one.
    #[serde(skip_serializing_if = "str::is_empty")]
    pub target: &'a str,
    /// The gRPC code it ended with (`OK` when it did what was asked).
    #[serde(serialize_with = "code_name")]
    pub code: tonic::Code,
    /// Why it was refused, for a refusal.
    #[serde(skip_serializing_if = "str::is_empty")]
    pub message: &'a str,
}

fn code_name<S: serde::Serializer>(code: &tonic::Code, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(berth_proto::code::name(*code))
}

struct Sink {
    path: PathBuf,
    file: std::fs::File,
    written: u64,
    max: u64,
    failures: u64,
}

/// Where audit lines go.
pub struct Audit {
    sink: Mutex<Option<Sink>>,
}

fn open(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

impl Audit {
    /// The log at `path`, appended to.
    pub fn open(path: &Path) -> std::io::Result<Audit> {
        Audit::open_turning_at(path, MAX_BYTES)
    }

    fn open_turning_at(path: &Path, max: u64) -> std::io::Result<Audit> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let file = open(path)?;
        let written = file.metadata()?.len();
        Ok(Audit {
            sink: Mutex::new(Some(Sink {
                path: path.to_path_buf(),
                file,
                written,
                max,
                failures: 0,
            })),
        })
    }

    /// Counted, not written (tests of the API alone).
    pub fn counted_only() -> Audit {
        Audit {
            sink: Mutex::new(None),
        }
    }

    /// Records one call. A line that cannot be written is said in the
    /// server's log (the first, then at powers of two), never fails the call.
    pub fn record(&self, entry: &Entry<'_>) {
        crate::metrics::api_request(entry.identity, entry.code);
        let mut line = match serde_json::to_vec(entry) {
            Ok(line) => line,
            Err(_) => return,
        };
        line.push(b'\n');
        let mut sink = self.sink.lock().unwrap_or_else(|p| p.into_inner());
        let Some(sink) = sink.as_mut() else { return };
        if let Err(error) = sink.write(&line) {
            sink.failures += 1;
            if sink.failures.is_power_of_two() {
                tracing::warn!(path = %sink.path.display(), %error, failures = sink.failures, "writing the audit log");
            }
        }
    }
}

/// The most lines [`Audit::tail`] answers, and the most bytes it reads.
pub const TAIL_LINES: usize = 10_000;
const TAIL_BYTES: u64 = 4 << 20;

impl Audit {
    /// The last `lines` lines of the current file (at most [`TAIL_LINES`],
    /// from at most its last 4 MiB), oldest first.
    pub fn tail(&self, lines: usize) -> std::io::Result<Vec<String>> {
        use std::io::{Read, Seek, SeekFrom};
        let path = match self.sink.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            Some(sink) => sink.path.clone(),
            None => return Ok(Vec::new()),
        };
        let mut file = std::fs::File::open(&path)?;
        let len = file.metadata()?.len();
        let from = len.saturating_sub(TAIL_BYTES);
        file.seek(SeekFrom::Start(from))?;
        let mut text = String::new();
        file.take(TAIL_BYTES).read_to_string(&mut text)?;
        let mut all: Vec<&str> = text.lines().collect();
        if from > 0 && !all.is_empty() {
            // The first line read may be cut.
            all.remove(0);
        }
        let keep = lines.min(TAIL_LINES);
        Ok(all[all.len().saturating_sub(keep)..]
            .iter()
            .map(|l| l.to_string())
            .collect())
    }
}

impl Sink {
    fn write(&mut self, line: &[u8]) -> std::io::Result<()> {
        if self.written > 0 && self.written + line.len() as u64 > self.max {
            self.rotate()?;
        }
        self.file.write_all(line)?;
        self.written += line.len() as u64;
        Ok(())
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        let numbered = |n: usize| {
            let mut name = self.path.clone().into_os_string();
            name.push(format!(".{n}"));
            PathBuf::from(name)
        };
        for n in (1..KEPT).rev() {
            let _ = std::fs::rename(numbered(n), numbered(n + 1));
        }
        std::fs::rename(&self.path, numbered(1))?;
        self.file = open(&self.path)?;
        self.written = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(target: &str) -> Entry<'_> {
        Entry {
            at_ms: 1,
            identity: "token:0123456789abcdef",
            call: "DeleteVolume",
            namespace: "team-a",
            target,
            code: tonic::Code::Ok,
            message: "",
        }
    }

    #[test]
    fn lines_are_json_and_the_file_turns_over_keeping_three() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let audit = Audit::open_turning_at(&path, 4096).unwrap();
        audit.record(&entry("data"));
        let text = std::fs::read_to_string(&path).unwrap();
        let line: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(line["target"], "data");
        assert_eq!(line["code"], "OK");
        assert!(line.get("message").is_none());
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );

        // Past the size, the file turns over; never more than three old ones.
        let big = "x".repeat(1000);
        for _ in 0..40 {
            audit.record(&entry(&big));
        }
        for n in 1..=KEPT {
            assert!(dir.path().join(format!("audit.log.{n}")).exists(), "{n}");
        }
        assert!(!dir.path().join(format!("audit.log.{}", KEPT + 1)).exists());
        assert!(std::fs::metadata(&path).unwrap().len() <= 4096);
        let kept = std::fs::read_to_string(dir.path().join("audit.log.1")).unwrap();
        assert!(
            kept.lines()
                .all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok())
        );
    }
}
