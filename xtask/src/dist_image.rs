//! Berth's OCI image, built from scratch: no base image is pulled. The root
//! file system is made here (the binaries, the shared libraries `ldd` says
//! they load, the CA bundle), podman puts it in one layer
//! (`packaging/image/Containerfile`) and saves it as an OCI archive.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use anyhow::{Context, bail};

use crate::VERSION;

pub const TAG: &str = "localhost/berth";

/// The CA bundle registries' certificates are checked against, if the
/// build machine has one.
const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// Podman with its own storage under `target/dist/podman` (vfs, no
/// systemd): nothing of the machine's own images or containers is touched.
pub struct Podman {
    dir: PathBuf,
}

impl Podman {
    pub fn new(dir: PathBuf) -> Podman {
        Podman { dir }
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("podman");
        if cgroups_hybrid() {
            // crun refuses such a host, even with --cgroups=disabled.
            cmd.args(["--runtime", "runc"]);
        }
        cmd.arg("--root")
            .arg(self.dir.join("root"))
            .arg("--runroot")
            .arg(self.dir.join("run"))
            .args([
                "--storage-driver",
                "vfs",
                "--cgroup-manager",
                "cgroupfs",
                "--events-backend",
                "file",
            ])
            .args(args)
            .stdin(Stdio::null());
        cmd
    }

    /// `podman run` options every container here takes: no network, and
    /// file limits within this process's own (podman's defaults may exceed them).
    pub const RUN: [&'static str; 7] = [
        "--network",
        "none",
        "--ulimit",
        "nofile=1024:1024",
        "--ulimit",
        "nproc=1024:1024",
        "--pull=never",
    ];

    pub fn output(&self, args: &[&str]) -> anyhow::Result<Output> {
        self.command(args).output().context("running podman")
    }

    /// Runs podman; its stdout, or an error with what it printed.
    pub fn ok(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = self.output(args)?;
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        if !out.status.success() {
            bail!(
                "podman {} failed: {stdout}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(stdout)
    }
}

/// Whether cgroup v1 hierarchies are mounted beside a unified one that has
/// controllers, as dockerd's init script leaves a host (the book's Install
/// page: such a host runs the image with `--runtime runc`).
pub fn cgroups_hybrid() -> bool {
    std::fs::read_to_string("/sys/fs/cgroup/unified/cgroup.controllers").is_ok_and(|c| !c.trim().is_empty())
}

/// Builds the image from the stripped binaries in `bins`; returns the
/// archive's path (`berth-image-<version>.tar` in `out`).
pub fn build(bins: &Path, out: &Path) -> anyhow::Result<PathBuf> {
    crate::ensure_podman()?;
    let context = out.join("image");
    let rootfs = context.join("rootfs");
    let usr_bin = rootfs.join("usr/bin");
    std::fs::create_dir_all(&usr_bin)?;
    let mut libraries = Vec::new();
    for bin in ["berth", "berth-agent"] {
        let from = bins.join(bin);
        std::fs::copy(&from, usr_bin.join(bin))?;
        libraries.extend(shared_libraries(&from)?);
    }
    libraries.sort();
    libraries.dedup();
    for lib in &libraries {
        copy_into(&rootfs, lib)?;
    }
    if Path::new(CA_BUNDLE).exists() {
        copy_into(&rootfs, Path::new(CA_BUNDLE))?;
    }
    // Where the mounts go, and a /tmp for what the binaries write there.
    for dir in ["tmp", "etc/berth", "var/lib/berth", "run"] {
        std::fs::create_dir_all(rootfs.join(dir))?;
    }
    std::fs::copy(
        crate::root().join("packaging/image/Containerfile"),
        context.join("Containerfile"),
    )?;
    let podman = Podman::new(out.join("podman"));
    let tag = format!("{TAG}:{VERSION}");
    let context_arg = context.display().to_string();
    podman.ok(&["build", "--timestamp", "0", "--tag", &tag, &context_arg])?;
    let archive = out.join(format!("berth-image-{VERSION}.tar"));
    let archive_arg = archive.display().to_string();
    podman.ok(&["save", "--format", "oci-archive", "--output", &archive_arg, &tag])?;
    Ok(archive)
}

/// The shared libraries `binary` loads, its interpreter among them.
fn shared_libraries(binary: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let out = Command::new("ldd").arg(binary).output().context("running ldd")?;
    if !out.status.success() {
        bail!("ldd {} failed", binary.display());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let libraries = text
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let path = match l.split_once("=>") {
                Some((_, right)) => right.split_whitespace().next()?,
                None => l.split_whitespace().next()?,
            };
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect();
    Ok(libraries)
}

/// Copies `file` (its content, through symbolic links) to the same path below `rootfs`.
fn copy_into(rootfs: &Path, file: &Path) -> anyhow::Result<()> {
    let to = rootfs.join(file.strip_prefix("/").unwrap_or(file));
    std::fs::create_dir_all(to.parent().context("a file with no directory")?)?;
    std::fs::copy(file, &to).with_context(|| format!("copying {}", file.display()))?;
    Ok(())
}
