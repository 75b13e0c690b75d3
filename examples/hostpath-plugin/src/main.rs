//! hostpath-plugin: a sample CSI plugin whose volumes are directories.

mod answers;
mod call_log;
mod config;
mod controller;
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
use clap::Parser;
use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;

use config::Config;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::parse();
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
    let listener = bind(&socket)?;
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

/// Binds the socket, replacing a stale one left by a crashed run.
fn bind(path: &std::path::Path) -> anyhow::Result<UnixListener> {
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
    let listener = UnixListener::bind(path).with_context(|| format!("binding {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("installing SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
