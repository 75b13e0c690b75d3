//! hostpath-plugin: a sample CSI plugin whose volumes are directories.

mod answers;
mod call_log;
mod config;
mod controller;
mod disk;
mod faults;
mod identity;
mod journal;
mod mounts;
mod node;
mod snapshots;
mod targets;
mod volumes;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use berth_proto::csi::v1::controller_server::ControllerServer;
use berth_proto::csi::v1::group_controller_server::GroupControllerServer;
use berth_proto::csi::v1::identity_server::IdentityServer;
use berth_proto::csi::v1::node_server::NodeServer;
use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;

use config::Config;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::from_args();
    // As `berth`: the book's examples are checked by reading them alone.
    if std::env::var_os("BERTH_CHECK_ARGS").is_some() {
        return Ok(());
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("HOSTPATH_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();

    let socket = socket_path(&config.endpoint)?;
    let volumes = Arc::new(volumes::Volumes::open(
        &config.state_dir,
        config.capacity,
        config.fsync,
    )?);
    let mounter = mounts::Mounter::new(config.mount_mode, &config.state_dir)?;
    let faults = Arc::new(faults::Faults::new(&config));
    let config = Arc::new(config);

    let mount_mode = mounter.mode();

    let identity = identity::Identity::new(config.clone(), faults.clone(), mount_mode);
    let calls = call_log::CallLog::open(config.call_log.as_deref())?;
    let journal = journal::Journal::open(config.journal.as_deref())?;
    let mut router = tonic::transport::Server::builder()
        .layer(calls)
        .add_service(IdentityServer::new(identity));
    if config.serves_controller() {
        let snapshots = snapshots::Snapshots::open(&config.state_dir, config.fsync)?;
        let svc = Arc::new(controller::Controller::new(
            config.clone(),
            volumes.clone(),
            snapshots,
            faults.clone(),
            journal.clone(),
        ));
        router = router
            .add_service(ControllerServer::from_arc(svc.clone()))
            .add_service(GroupControllerServer::from_arc(svc));
    }
    if config.serves_node() {
        let svc = node::Node::new(config.clone(), volumes.clone(), mounter, faults.clone(), journal);
        router = router.add_service(NodeServer::new(svc));
    }
    // The socket last: once it is there, the node is registered (the
    // controller reads that on ControllerPublish) and every service is ready.
    let listener = bind(&socket, config.socket_mode, config.socket_group.as_deref())?;
    tracing::info!(socket = %socket.display(), name = %config.name, node_id = %config.node_id, mount = ?mount_mode, "serving");
    let result = router
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown_signal())
        .await;
    let _ = std::fs::remove_file(&socket);
    result.context("serving gRPC")?;
    tracing::info!("stopped");
    Ok(())
}

fn socket_path(endpoint: &str) -> anyhow::Result<PathBuf> {
    let path = endpoint
        .strip_prefix("unix://")
        .or_else(|| endpoint.strip_prefix("unix:"))
        .unwrap_or(endpoint);
    anyhow::ensure!(!path.is_empty(), "--endpoint names no socket path");
    Ok(PathBuf::from(path))
}

/// Binds the socket with `mode` and `group`, replacing a stale one left by
/// a crashed run.
fn bind(path: &std::path::Path, mode: u32, group: Option<&str>) -> anyhow::Result<UnixListener> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        anyhow::ensure!(
            meta.file_type().is_socket(),
            "{} exists and is not a socket; refusing to replace it",
            path.display()
        );
        std::fs::remove_file(path).with_context(|| format!("removing stale socket {}", path.display()))?;
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    let gid = group.map(group_id).transpose()?;
    // Bound owner-only; the group and the mode are set before anyone is told
    // the socket is there.
    let old = unsafe { libc::umask(0o177) };
    let bound = UnixListener::bind(path);
    unsafe { libc::umask(old) };
    let listener = bound.with_context(|| format!("binding {}", path.display()))?;
    if let Some(gid) = gid {
        std::os::unix::fs::chown(path, None, Some(gid))
            .with_context(|| format!("giving {} to group {}", path.display(), group.unwrap_or_default()))?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(listener)
}

/// A group's id, from its name or its number.
fn group_id(group: &str) -> anyhow::Result<u32> {
    if let Ok(gid) = group.parse::<u32>() {
        return Ok(gid);
    }
    let name = std::ffi::CString::new(group).context("a group name with a NUL byte")?;
    let mut entry: libc::group = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::group = std::ptr::null_mut();
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: every pointer is to a live local of the right size; the entry's
    // strings point into `buf`, which outlives the call, and only the gid is read.
    let rc = unsafe { libc::getgrnam_r(name.as_ptr(), &mut entry, buf.as_mut_ptr(), buf.len(), &mut found) };
    anyhow::ensure!(
        rc == 0 && !found.is_null(),
        "--socket-group {group}: no such group on this machine"
    );
    Ok(entry.gr_gid)
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("installing SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
