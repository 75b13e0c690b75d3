//! A real `dockerd` (Debian's docker.io) for the tests: its own data root,
//! exec root and API socket, the vfs storage driver, no bridge and no
//! iptables; a busybox image imported from Debian's static busybox, so no
//! registry is needed. Containers run with `--network none`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::texts;

#[path = "../../xtask/src/dockerd.rs"]
mod dockerd;

/// The image every test container runs: a static busybox, `sh` included.
pub const IMAGE: &str = "berth-test/busybox:1";

/// Where Docker looks for volume plugins' sockets.
pub const PLUGIN_DIR: &str = "/run/docker/plugins";

pub struct Dockerd {
    dir: tempfile::TempDir,
    child: Option<Child>,
    pub socket: PathBuf,
}

impl Dockerd {
    /// Starts dockerd and imports [`IMAGE`]; panics with its log when it does not come up.
    pub fn start() -> Dockerd {
        let dir = tempfile::Builder::new()
            .prefix("berth-dk-")
            .tempdir_in("/tmp")
            .expect("a directory for dockerd");
        let socket = dir.path().join("docker.sock");
        let log = std::fs::File::create(dir.path().join("dockerd.log")).unwrap();
        let child = dockerd::command(dir.path(), &socket)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting dockerd (Debian's docker.io; `cargo xtask test` installs it)");
        let d = Dockerd {
            dir,
            child: Some(child),
            socket,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !d.docker(&["info"]).status.success() {
            assert!(Instant::now() < deadline, "dockerd did not start:\n{}", d.log());
            std::thread::sleep(Duration::from_millis(200));
        }
        d.import_image();
        d
    }

    fn import_image(&self) {
        let tarball = image_tarball(self.dir.path());
        let out = self
            .command(&["import", &tarball.display().to_string(), IMAGE])
            .output()
            .unwrap();
        assert!(out.status.success(), "importing the image: {:?}", texts(&out));
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("docker");
        cmd.args(args)
            .env("DOCKER_HOST", format!("unix://{}", self.socket.display()));
        cmd
    }

    /// Runs the docker CLI against this daemon.
    pub fn docker(&self, args: &[&str]) -> Output {
        self.command(args)
            .stdin(Stdio::null())
            .output()
            .expect("running docker")
    }

    /// Runs the docker CLI, which must succeed; its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.docker(args);
        let (stdout, stderr) = texts(&out);
        assert!(
            out.status.success(),
            "docker {args:?} failed: {stdout}{stderr}\ndockerd:\n{}",
            self.log()
        );
        stdout
    }

    pub fn log(&self) -> String {
        let text = std::fs::read_to_string(self.dir.path().join("dockerd.log")).unwrap_or_default();
        let start = text.len().saturating_sub(8000);
        text[text.floor_char_boundary(start)..].to_string()
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Dockerd {
    fn drop(&mut self) {
        // Containers first, so none is left running without its daemon.
        let ids = self.docker(&["ps", "-aq"]);
        for id in String::from_utf8_lossy(&ids.stdout).split_whitespace() {
            let _ = self.docker(&["rm", "-f", id]);
        }
        if let Some(mut child) = self.child.take() {
            unsafe {
                libc::kill(child.id() as i32, libc::SIGTERM);
            }
            let deadline = Instant::now() + Duration::from_secs(15);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        // vfs layers are plain directories; mounts under the exec root are gone with the daemon.
        let _ = std::fs::remove_dir_all(self.dir.path().join("data"));
    }
}

/// [`IMAGE`]'s contents as a tarball in `dir`: Debian's static busybox and
/// the tools the tests call through it.
fn image_tarball(dir: &Path) -> PathBuf {
    let root = dir.join("rootfs");
    std::fs::create_dir_all(root.join("bin")).unwrap();
    std::fs::copy("/bin/busybox", root.join("bin/busybox"))
        .expect("/bin/busybox (Debian's busybox-static; `cargo xtask test` installs it)");
    for tool in ["sh", "cat", "echo", "sleep", "ls", "test", "date"] {
        std::os::unix::fs::symlink("busybox", root.join("bin").join(tool)).unwrap();
    }
    let tarball = dir.join("rootfs.tar");
    let tar = Command::new("tar")
        .arg("-C")
        .arg(&root)
        .arg("-cf")
        .arg(&tarball)
        .arg(".")
        .status()
        .unwrap();
    assert!(tar.success(), "packing the image");
    tarball
}

/// A volume plugin name no other test uses, and its socket where Docker
/// looks; the socket is removed with it (a server killed leaves it).
pub struct PluginSocket {
    pub name: String,
    pub path: PathBuf,
}

impl PluginSocket {
    pub fn new() -> PluginSocket {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "berth-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        );
        let path = Path::new(PLUGIN_DIR).join(format!("{name}.sock"));
        PluginSocket { name, path }
    }
}

impl PluginSocket {
    /// One request of the volume plugin protocol, as Docker sends it; the
    /// JSON answer.
    pub fn post(&self, path: &str, body: &str) -> serde_json::Value {
        use std::io::{Read, Write};
        let mut stream = std::os::unix::net::UnixStream::connect(&self.path)
            .unwrap_or_else(|e| panic!("connecting to {}: {e}", self.path.display()));
        stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        write!(
            stream,
            "POST {path} HTTP/1.1\r\nHost: plugin\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        let (_, json) = answer
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("not an HTTP answer: {answer}"));
        serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"))
    }
}

impl Default for PluginSocket {
    fn default() -> Self {
        PluginSocket::new()
    }
}

impl Drop for PluginSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The OCI runtime podman is to use on a host whose cgroup file system is
/// at `cgroup_root`: runc where cgroup v1 hierarchies are mounted beside a
/// unified one that has controllers (as dockerd's init script leaves a host),
/// which crun refuses ("cgroups in hybrid mode not supported"), even with
/// `--cgroups=disabled`; podman's own choice elsewhere.
pub fn podman_runtime(cgroup_root: &Path) -> &'static [&'static str] {
    match std::fs::read_to_string(cgroup_root.join("unified/cgroup.controllers")) {
        Ok(controllers) if !controllers.trim().is_empty() => &["--runtime", "runc"],
        _ => &[],
    }
}

/// Podman (Debian's podman), rootful, with its own storage and run roots
/// and a containers.conf naming Berth's socket as a volume plugin.
pub struct Podman {
    dir: tempfile::TempDir,
}

impl Podman {
    /// Podman set up to use the volume plugin `driver` at `socket`, with [`IMAGE`] imported.
    pub fn start(driver: &str, socket: &Path) -> Podman {
        let dir = tempfile::Builder::new()
            .prefix("berth-pd-")
            .tempdir_in("/tmp")
            .expect("a directory for podman");
        std::fs::write(
            dir.path().join("containers.conf"),
            format!("[engine.volume_plugins]\n{driver} = \"{}\"\n", socket.display()),
        )
        .unwrap();
        let p = Podman { dir };
        let tarball = image_tarball(p.dir.path());
        p.ok(&["import", &tarball.display().to_string(), IMAGE]);
        p
    }

    fn command(&self, args: &[&str]) -> Command {
        let d = self.dir.path();
        let mut cmd = Command::new("podman");
        cmd.args(podman_runtime(Path::new("/sys/fs/cgroup")))
            .arg("--root")
            .arg(d.join("root"))
            .arg("--runroot")
            .arg(d.join("run"))
            .args([
                "--storage-driver",
                "vfs",
                "--cgroup-manager",
                "cgroupfs",
                "--events-backend",
                "file",
            ])
            .args(args)
            .env("CONTAINERS_CONF", d.join("containers.conf"))
            .stdin(Stdio::null());
        cmd
    }

    pub fn podman(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("running podman")
    }

    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.podman(args);
        let (stdout, stderr) = texts(&out);
        assert!(out.status.success(), "podman {args:?} failed: {stdout}{stderr}");
        stdout
    }

    /// `podman run` options every test container takes: no network, and
    /// file limits within the test's own (podman's defaults may exceed them).
    pub const RUN: [&'static str; 7] = [
        "--rm",
        "--network",
        "none",
        "--ulimit",
        "nofile=1024:1024",
        "--ulimit",
        "nproc=1024:1024",
    ];
}

impl Drop for Podman {
    fn drop(&mut self) {
        // Containers gone, nothing stays mounted: vfs layers are plain directories.
        let _ = self.podman(&["rm", "-a", "-f"]);
    }
}

#[cfg(test)]
mod tests {
    use super::podman_runtime;

    #[test]
    fn podman_runs_runc_where_v1_hierarchies_sit_beside_a_unified_one_with_controllers() {
        let root = tempfile::tempdir().unwrap();
        // cgroup v2 alone (no `unified` below the root), or v1 alone.
        assert!(podman_runtime(root.path()).is_empty());
        let unified = root.path().join("unified");
        std::fs::create_dir(&unified).unwrap();
        // Hybrid, its unified hierarchy without controllers: crun runs there.
        std::fs::write(unified.join("cgroup.controllers"), "\n").unwrap();
        assert!(podman_runtime(root.path()).is_empty());
        // As dockerd's init script leaves a host: crun refuses it.
        std::fs::write(unified.join("cgroup.controllers"), "hugetlb\n").unwrap();
        assert_eq!(podman_runtime(root.path()), ["--runtime", "runc"]);
    }
}
