//! `cargo xtask demo` and `demo-cluster`: Berth with the sample plugin and
//! guests, as an operator would run it, checked to leave nothing behind.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::bail;

use super::{build_bins, guest_dir, guests, root, run};

/// A demo's processes and files; everything is killed and removed at the end.
pub(super) struct Demo {
    bin: PathBuf,
    work: PathBuf,
    children: Vec<(String, Child)>,
}

impl Demo {
    pub(super) fn new() -> anyhow::Result<Demo> {
        guests()?;
        build_bins()?;
        let work = std::env::temp_dir().join(format!("berth-demo-{}", std::process::id()));
        std::fs::create_dir_all(&work)?;
        Ok(Demo {
            bin: root().join("target/debug"),
            work,
            children: Vec::new(),
        })
    }

    /// Starts `bin args...` as `name`, its output in `name.log`.
    fn spawn(&mut self, name: &str, bin: &str, args: &[&str]) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.work.join(format!("{name}.log")))?;
        let child = Command::new(self.bin.join(bin))
            .args(args)
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        self.children.push((name.to_string(), child));
        Ok(())
    }

    /// SIGKILL, as in a crash.
    fn kill(&mut self, name: &str) -> anyhow::Result<()> {
        if let Some(i) = self.children.iter().position(|(n, _)| n == name) {
            let (_, mut c) = self.children.remove(i);
            c.kill()?;
            c.wait()?;
        }
        Ok(())
    }

    /// A sample plugin process with its socket at `name.sock`.
    fn plugin(&mut self, name: &str, args: &[&str]) -> anyhow::Result<()> {
        let socket = self.work.join(format!("{name}.sock")).display().to_string();
        let state = self.work.join("hostpath").display().to_string();
        let mut all = vec!["--endpoint", socket.as_str(), "--state-dir", state.as_str()];
        all.extend_from_slice(args);
        self.spawn(name, "hostpath-plugin", &all)
    }

    /// The node plugins of nodes a (zone-1), b and c (zone-2), and the controller.
    pub(super) fn plugins(&mut self) -> anyhow::Result<()> {
        println!("==> the sample CSI plugin: a controller, and nodes a (zone-1), b and c (zone-2)");
        self.plugin("controller", &["--node", "false", "--topology", "zone=zone-1"])?;
        for (node, zone) in NODES {
            let topology = format!("zone={zone}");
            self.plugin(
                node,
                &[
                    "--controller",
                    "false",
                    "--node-id",
                    node,
                    "--topology",
                    &topology,
                    "--max-volumes",
                    "8",
                ],
            )?;
        }
        Ok(())
    }

    pub(super) fn socket(&self, name: &str) -> String {
        format!("unix://{}", self.work.join(format!("{name}.sock")).display())
    }

    pub(super) fn work(&self) -> &Path {
        &self.work
    }

    fn api(&self) -> PathBuf {
        self.work.join("state/berth.sock")
    }

    pub(super) fn serve(&mut self) -> anyhow::Result<()> {
        let config = self.work.join("berth.toml").display().to_string();
        self.spawn("serve", "berth", &["serve", "--config", &config])?;
        wait_for_socket(&self.api())
    }

    pub(super) fn berth(&self, args: &[&str]) -> anyhow::Result<()> {
        println!("\n$ berth {}", args.join(" "));
        let mut cmd = Command::new(self.bin.join("berth"));
        cmd.args(args).env("BERTH_API", self.api());
        run(cmd)
    }

    fn berth_output(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new(self.bin.join("berth"))
            .args(args)
            .env("BERTH_API", self.api())
            .output()?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    pub(super) fn volumes_left(&self) -> anyhow::Result<usize> {
        Ok(std::fs::read_dir(self.work.join("hostpath/volumes"))?.count())
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        for (_, c) in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.work);
    }
}

const NODES: [(&str, &str); 3] = [("node-a", "zone-1"), ("node-b", "zone-2"), ("node-c", "zone-2")];
const DISKS: [&str; 3] = ["ssd", "ssd", "hdd"];

pub(super) fn wait_for_socket(path: &Path) -> anyhow::Result<()> {
    let started = Instant::now();
    while std::os::unix::net::UnixStream::connect(path).is_err() {
        if started.elapsed() > Duration::from_secs(30) {
            bail!("{} did not come up", path.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// `berth.toml` with the controller and the three guests; `nodes` adds the
/// rest (the `[[node]]`s, or the cluster socket).
pub(super) fn config(d: &Demo, top: &str, nodes: &str) -> anyhow::Result<()> {
    let guests = guest_dir();
    let config = format!(
        "state = \"state/berth.redb\"\nfingerprint_interval = \"1s\"\n{top}\n[[plugin]]\nname = \"hostpath\"\ndriver = \"hostpath.csi.berth.dev\"\ncontroller = \"{}\"\n{nodes}\n[[policy]]\nmodule = \"{}\"\nsettings = {{ prefix = \"demo\" }}\n\n[[policy]]\nmodule = \"{}\"\n\n[[policy]]\nmodule = \"{}\"\non_error = \"builtin\"\nsettings = {{ base-ms = \"100\" }}\n",
        d.socket("controller"),
        guests.join("berth_naming_guest.wasm").display(),
        guests.join("berth_placement_guest.wasm").display(),
        guests.join("berth_retry_guest.wasm").display()
    );
    std::fs::write(d.work.join("berth.toml"), &config)?;
    println!("==> berth.toml\n{config}");
    Ok(())
}

/// Creates the demo's three volumes: one zone-1, one zone-2 on an ssd node, one anywhere.
fn create_volumes(d: &Demo) -> anyhow::Result<()> {
    let create = |name: &str, extra: &[&str]| {
        let mut args = vec!["volume", "create", name, "--plugin", "hostpath", "--wait"];
        args.extend_from_slice(extra);
        d.berth(&args)
    };
    create("pg-data", &["--size", "1GiB", "--requisite", "zone=zone-1"])?;
    create(
        "cache",
        &[
            "--size",
            "256MiB",
            "--requisite",
            "zone=zone-2",
            "--label",
            "node-selector/disk=ssd",
        ],
    )?;
    create("scratch", &["--preferred", "zone=zone-2"])
}

/// Deletes everything (what is still published is unpublished first:
/// `--force`) and checks the plugin holds nothing.
fn delete_all(d: &Demo) -> anyhow::Result<()> {
    for v in ["pg-data", "cache", "scratch"] {
        d.berth(&["volume", "delete", "--force", v, "--wait"])?;
    }
    d.berth(&["volume", "list"])?;
    let left = d.volumes_left()?;
    println!("\n==> volumes left on the plugin: {left}");
    if left != 0 {
        bail!("{left} volumes were left on the plugin");
    }
    Ok(())
}

/// The main job on the embedded defaults: a sample CSI plugin as a controller
/// and three nodes in two zones, `berth serve` with the three sample guests,
/// volumes through their whole life, and a crash of the host in the middle.
pub fn demo() -> anyhow::Result<()> {
    let mut d = Demo::new()?;
    d.plugins()?;
    let mut nodes = String::new();
    for ((node, _), disk) in NODES.iter().zip(DISKS) {
        nodes += &format!(
            "\n[[node]]\nname = \"{node}\"\ndir = \"nodes/{node}\"\nlabels = {{ disk = \"{disk}\" }}\nplugins = {{ hostpath = \"{}\" }}\n",
            d.socket(node)
        );
    }
    config(&d, "", &nodes)?;
    println!("==> berth serve");
    d.serve()?;
    d.berth(&["plugin", "status"])?;
    d.berth(&["node", "list"])?;
    create_volumes(&d)?;
    d.berth(&["volume", "publish", "pg-data", "--node", "node-a", "--wait"])?;
    println!("\n==> 'cache' is published where placement says: zone-2, and only on an ssd node");
    d.berth(&["volume", "publish", "cache", "--wait"])?;
    d.berth(&["volume", "publish", "scratch", "--wait"])?;
    d.berth(&["volume", "list"])?;

    println!("\n==> kill -9 berth serve, and start it again: nothing is lost");
    d.kill("serve")?;
    d.serve()?;
    d.berth(&["volume", "list"])?;
    d.berth(&["volume", "get", "cache"])?;
    d.berth(&["volume", "unpublish", "pg-data", "--node", "node-a", "--wait"])?;
    delete_all(&d)
}

/// Berth as on many machines, on loopback: `berth serve` with its TLS
/// cluster endpoint and a `berth agent` per node, each joining with a token
/// and owning its node plugin.
pub fn demo_cluster() -> anyhow::Result<()> {
    let mut d = Demo::new()?;
    d.plugins()?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    config(
        &d,
        &format!("cluster_address = \"127.0.0.1:{port}\"\nheartbeat_timeout = \"2s\"\n"),
        "",
    )?;
    println!("==> berth serve, listening for agents over TLS on 127.0.0.1:{port}");
    d.serve()?;
    println!(
        "\n==> a join token per node: each pins the cluster CA (an agent checks the server before sending\n    anything), lets that one node join once, and is kept by the server only as a hash"
    );
    for ((node, _), disk) in NODES.iter().zip(DISKS) {
        let token = d
            .berth_output(&["cluster", "token", "--node", node, "--ttl", "10m"])?
            .trim()
            .to_string();
        if *node == "node-a" {
            println!("{token}");
        }
        let text = format!(
            "node = \"{node}\"\nlabels = {{ disk = \"{disk}\" }}\nserver = \"https://127.0.0.1:{port}\"\ntoken = \"{token}\"\ndir = \"nodes/{node}\"\nheartbeat_interval = \"500ms\"\n[plugins]\nhostpath = \"{}\"\n",
            d.socket(node)
        );
        let path = d.work.join(format!("agent-{node}.toml"));
        std::fs::write(&path, &text)?;
        if *node == "node-a" {
            println!("==> agent-{node}.toml\n{text}");
        }
        let path = path.display().to_string();
        d.spawn(&format!("agent-{node}"), "berth", &["agent", "--config", &path])?;
    }
    wait_until(&d, "every node ready", |list| {
        list.matches(" ready ").count() >= 3
    })?;
    d.berth(&["node", "list"])?;
    println!("\n==> every token was used once: none is left to join with");
    d.berth(&["cluster", "token", "list"])?;
    create_volumes(&d)?;
    d.berth(&["volume", "publish", "pg-data", "--node", "node-a", "--wait"])?;
    d.berth(&["volume", "publish", "cache", "--wait"])?;
    d.berth(&["volume", "publish", "scratch", "--node", "node-c", "--wait"])?;
    d.berth(&["volume", "list"])?;

    println!("\n==> kill -9 node-a's agent: the node goes down, its volume stays as it is");
    d.kill("agent-node-a")?;
    wait_until(&d, "node-a down", |list| {
        list.lines()
            .any(|l| l.starts_with("node-a") && l.contains(" down "))
    })?;
    d.berth(&["node", "list"])?;
    println!("\n==> the agent comes back: its record and the mount table agree, nothing is published twice");
    let config = d.work.join("agent-node-a.toml").display().to_string();
    d.spawn("agent-node-a", "berth", &["agent", "--config", &config])?;
    wait_until(&d, "node-a ready", |list| {
        list.lines()
            .any(|l| l.starts_with("node-a") && l.contains(" ready "))
    })?;
    d.berth(&["volume", "get", "pg-data"])?;

    println!("\n==> drain node-c: everything there is unpublished, placement keeps away");
    d.berth(&["node", "drain", "node-c"])?;
    d.berth(&["node", "list"])?;
    delete_all(&d)
}

fn wait_until(d: &Demo, what: &str, ok: impl Fn(&str) -> bool) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let list = d.berth_output(&["node", "list"])?;
        if ok(&list) {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(30) {
            bail!("{what}: not after 30s:\n{list}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
