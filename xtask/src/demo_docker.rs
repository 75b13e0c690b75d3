//! `cargo xtask demo-docker`: Berth as a plain Docker engine's volume
//! plugin. A container writes and is removed, the next reads the same data,
//! two containers share a volume, the volume is removed and nothing is left
//! on the plugin; and what a `-v` adds to `docker run`, measured.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use anyhow::{Context, bail};

use super::demo::{Demo, config, wait_for_socket};
use super::{ensure_docker, run};

const IMAGE: &str = "berth-demo/busybox:1";

/// A dockerd of the demo's own: its roots under the demo's directory, vfs,
/// no bridge, no iptables.
struct Dockerd {
    child: Child,
    host: String,
}

impl Dockerd {
    fn start(dir: &Path) -> anyhow::Result<Dockerd> {
        let socket = dir.join("docker.sock");
        let log = std::fs::File::create(dir.join("dockerd.log"))?;
        let child = crate::dockerd::command(dir, &socket)
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting dockerd")?;
        wait_for_socket(&socket)?;
        let d = Dockerd {
            child,
            host: format!("unix://{}", socket.display()),
        };
        // A static busybox as the only image: no registry needed.
        let root = dir.join("rootfs/bin");
        std::fs::create_dir_all(&root)?;
        std::fs::copy("/bin/busybox", root.join("busybox"))?;
        for tool in ["sh", "cat", "echo", "sleep", "true"] {
            std::os::unix::fs::symlink("busybox", root.join(tool))?;
        }
        let tarball = dir.join("rootfs.tar");
        let mut tar = Command::new("tar");
        tar.arg("-C")
            .arg(dir.join("rootfs"))
            .arg("-cf")
            .arg(&tarball)
            .arg(".");
        run(tar)?;
        d.docker(&["import", &tarball.display().to_string(), IMAGE], false)?;
        Ok(d)
    }

    /// `docker ARGS`, shown when `show`; its output.
    fn docker(&self, args: &[&str], show: bool) -> anyhow::Result<String> {
        if show {
            println!("\n$ docker {}", args.join(" "));
        }
        let out = Command::new("docker")
            .args(args)
            .env("DOCKER_HOST", &self.host)
            .stdin(Stdio::null())
            .output()?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if show {
            print!("{stdout}");
        }
        if !out.status.success() {
            bail!("docker {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(stdout)
    }
}

impl Drop for Dockerd {
    fn drop(&mut self) {
        if let Ok(ids) = self.docker(&["ps", "-aq"], false) {
            for id in ids.split_whitespace() {
                let _ = self.docker(&["rm", "-f", id], false);
            }
        }
        // SIGTERM, so the daemon takes its containerd down with it.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// The median of `rounds` runs of `docker ARGS`, in milliseconds.
fn median_ms(d: &Dockerd, args: &[&str], rounds: usize) -> anyhow::Result<f64> {
    let mut times = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let started = Instant::now();
        d.docker(args, false)?;
        times.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

pub fn demo_docker() -> anyhow::Result<()> {
    ensure_docker()?;
    let mut d = Demo::new()?;
    d.plugins()?;
    let driver = format!("berth-demo-{}", std::process::id());
    let socket = PathBuf::from(format!("/run/docker/plugins/{driver}.sock"));
    let nodes = format!(
        "\n[[node]]\nname = \"node-a\"\ndir = \"nodes/node-a\"\nplugins = {{ hostpath = \"{}\" }}\n\n[docker]\nnode = \"node-a\"\nsocket = \"{}\"\ncreate_volumes = true\nplugin = \"hostpath\"\n",
        d.socket("node-a"),
        socket.display()
    );
    config(&d, "", &nodes)?;
    println!(
        "==> berth serve, Docker's volume plugin `{driver}` on {}",
        socket.display()
    );
    d.serve()?;
    wait_for_socket(&socket)?;
    let dockerd_dir = d.work().join("docker");
    std::fs::create_dir_all(&dockerd_dir)?;
    println!("==> dockerd of its own (vfs, no bridge, no iptables), a busybox image");
    let docker = Dockerd::start(&dockerd_dir)?;
    let run_with = |script: &str| docker.docker(&run_args("--rm", true, &["sh", "-c", script]), true);

    docker.docker(
        &[
            "volume",
            "create",
            "-d",
            &driver,
            "-o",
            "size=64MiB",
            "-o",
            "label.app=demo",
            "notes",
        ],
        true,
    )?;
    d.berth(&["volume", "get", "notes"])?;
    println!("\n==> a container writes and is removed; the next reads what it wrote");
    run_with("echo 'hello from the first container' > /data/greeting")?;
    let read = run_with("cat /data/greeting")?;
    if !read.contains("hello from the first container") {
        bail!("the second container read {read:?}");
    }

    println!("\n==> two containers on one volume: published while either holds it");
    let holder = docker.docker(&run_args("-d", true, &["sleep", "300"]), false)?;
    run_with("cat /data/greeting")?;
    d.berth(&["volume", "get", "notes"])?;
    docker.docker(&["rm", "-f", holder.trim()], true)?;

    println!(
        "\n==> what a volume adds to `docker run` (median of 5, publish and unpublish on the sample plugin)"
    );
    let plain = median_ms(&docker, &run_args("--rm", false, &["true"]), 5)?;
    let with_volume = median_ms(&docker, &run_args("--rm", true, &["true"]), 5)?;
    println!(
        "docker run: {plain:.0} ms; with -v notes:/data: {with_volume:.0} ms ({:+.0} ms)",
        with_volume - plain
    );

    docker.docker(&["volume", "rm", "notes"], true)?;
    let left = d.volumes_left()?;
    println!("\n==> volumes left on the plugin: {left}");
    if left != 0 {
        bail!("{left} volumes were left on the plugin");
    }
    drop(docker);
    let _ = std::fs::remove_file(&socket);
    Ok(())
}

/// `docker run MODE` (`--rm` or `-d`) of `command` in the busybox image,
/// without a network, with the demo's volume at /data when `volume`.
fn run_args<'a>(mode: &'a str, volume: bool, command: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["run", mode, "--network", "none"];
    if volume {
        args.extend(["-v", "notes:/data"]);
    }
    args.push(IMAGE);
    args.extend(command);
    args
}
