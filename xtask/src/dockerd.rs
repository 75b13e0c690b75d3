//! How Berth starts a dockerd of its own, for the demo and the tests alike
//! (the tests include this file): its data, exec root and API socket under
//! `dir`, the vfs storage driver, no bridge and no iptables, so it runs
//! beside any other Docker and changes nothing on the machine.

use std::path::Path;
use std::process::Command;

/// `dockerd` with its state under `dir`, serving its API on `socket`.
pub fn command(dir: &Path, socket: &Path) -> Command {
    let mut dockerd = Command::new("dockerd");
    dockerd
        .arg("--data-root")
        .arg(dir.join("data"))
        .arg("--exec-root")
        .arg(dir.join("exec"))
        .arg("--pidfile")
        .arg(dir.join("dockerd.pid"))
        .arg("-H")
        .arg(format!("unix://{}", socket.display()))
        .args([
            "--storage-driver",
            "vfs",
            "--bridge",
            "none",
            "--iptables=false",
            "--ip-forward=false",
            "--ip-masq=false",
        ]);
    dockerd
}
