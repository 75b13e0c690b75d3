//! systemd's readiness protocol (`Type=notify`): once every readiness check
//! passes, `READY=1` is sent to the datagram socket named by `NOTIFY_SOCKET`,
//! and `STOPPING=1` when the process begins to stop. Without
//! `NOTIFY_SOCKET` (not under systemd) nothing is sent.
//!
//! The units Berth ships set `NotifyAccess=main`, so a child process that
//! inherits the variable cannot speak for this one.

use std::io;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use super::readiness::Readiness;

/// How often readiness is asked until it first passes.
const POLL: Duration = Duration::from_millis(200);

/// Where systemd listens: a path, or a name in the abstract namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotifySocket {
    Path(PathBuf),
    Abstract(Vec<u8>),
}

impl NotifySocket {
    /// `NOTIFY_SOCKET`'s value: an absolute path, or `@name` for the
    /// abstract namespace. Anything else is not systemd's and is ignored.
    pub fn parse(raw: &str) -> Option<NotifySocket> {
        if let Some(name) = raw.strip_prefix('@') {
            return (!name.is_empty()).then(|| NotifySocket::Abstract(name.as_bytes().to_vec()));
        }
        raw.starts_with('/')
            .then(|| NotifySocket::Path(PathBuf::from(raw)))
    }

    fn send(&self, message: &str) -> io::Result<()> {
        let socket = UnixDatagram::unbound()?;
        let address = match self {
            NotifySocket::Path(p) => SocketAddr::from_pathname(p)?,
            NotifySocket::Abstract(name) => {
                use std::os::linux::net::SocketAddrExt;
                SocketAddr::from_abstract_name(name)?
            }
        };
        socket.send_to_addr(message.as_bytes(), &address)?;
        Ok(())
    }
}

static SOCKET: OnceLock<Option<NotifySocket>> = OnceLock::new();

/// This process's notify socket, read from the environment once.
pub fn socket() -> Option<&'static NotifySocket> {
    SOCKET
        .get_or_init(|| NotifySocket::parse(&std::env::var("NOTIFY_SOCKET").ok()?))
        .as_ref()
}

/// Sends `READY=1` once every check of `readiness` passes (a task; nothing
/// when not under systemd). A send that fails is logged, never fatal.
pub fn when_ready(readiness: Readiness) -> Option<tokio::task::JoinHandle<()>> {
    let socket = socket()?;
    Some(tokio::spawn(async move {
        while !readiness.report().ready {
            tokio::time::sleep(POLL).await;
        }
        match socket.send("READY=1\nSTATUS=ready") {
            Ok(()) => tracing::debug!("told systemd: ready"),
            Err(e) => tracing::warn!(error = %e, "cannot tell systemd that this process is ready"),
        }
    }))
}

/// Sends `STOPPING=1` (nothing when not under systemd).
pub fn stopping() {
    if let Some(socket) = socket()
        && let Err(e) = socket.send("STOPPING=1")
    {
        tracing::debug!(error = %e, "cannot tell systemd that this process is stopping");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_systemds_forms_are_taken() {
        assert_eq!(
            NotifySocket::parse("/run/systemd/notify"),
            Some(NotifySocket::Path("/run/systemd/notify".into()))
        );
        assert_eq!(
            NotifySocket::parse("@sd"),
            Some(NotifySocket::Abstract(b"sd".to_vec()))
        );
        assert_eq!(NotifySocket::parse("@"), None);
        assert_eq!(NotifySocket::parse("relative/path"), None);
        assert_eq!(NotifySocket::parse(""), None);
    }

    #[test]
    fn a_message_reaches_a_path_socket() {
        let dir = std::env::temp_dir().join(format!("berth-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify");
        let _ = std::fs::remove_file(&path);
        let listener = UnixDatagram::bind(&path).unwrap();
        NotifySocket::Path(path.clone()).send("READY=1").unwrap();
        let mut buf = [0u8; 64];
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
