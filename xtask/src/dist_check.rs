//! `cargo xtask dist-check`: what `cargo xtask dist` made, installed and run
//! as an operator would (as root, on this machine):
//!
//! 1. the three packages installed with dpkg; the binaries, man pages,
//!    completions, the monitoring files (the alert rules through
//!    `promtool`), the berth user and the packaged config checked;
//! 2. the units checked with `systemd-analyze verify`; the sample plugin
//!    started as its unit starts it and the server as the `berth` user with
//!    the packaged config, which must find the plugin healthy;
//! 3. every walk of the README and the book run with the installed
//!    binaries (nothing of `target/` on the PATH);
//! 4. the image loaded into podman: its binaries run, and a server in a
//!    container creates and publishes a volume through the sample plugin;
//! 5. the packages purged: the store and the berth user stay.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};

use crate::VERSION;
use crate::dist::out_dir;
use crate::dist_image::{Podman, TAG};
use crate::run;

const PACKAGES: [&str; 3] = ["berth", "berth-agent", "berth-hostpath-plugin"];
const DASHBOARD: &str = "/usr/share/berth/grafana/berth-dashboard.json";
const RULES: &str = "/usr/share/berth/prometheus/berth-rules.yml";
const UNITS: [&str; 3] = [
    "/usr/lib/systemd/system/berth-serve.service",
    "/usr/lib/systemd/system/berth-agent.service",
    "/usr/lib/systemd/system/berth-hostpath-plugin.service",
];

pub fn dist_check() -> anyhow::Result<()> {
    ensure!(
        crate::found_root(),
        "dist-check installs packages: run it as root"
    );
    dist_help()?;
    let out = out_dir();
    let debs: Vec<PathBuf> = PACKAGES
        .iter()
        .map(|p| out.join(format!("{p}_{VERSION}_{}.deb", crate::dist::architecture())))
        .collect();
    for deb in &debs {
        ensure!(
            deb.exists(),
            "{} is missing: run `cargo xtask dist` first",
            deb.display()
        );
    }
    let mut install = Command::new("dpkg");
    install.arg("--install").args(&debs);
    run(install)?;
    let checked = installed()
        .and_then(|()| units())
        .and_then(|()| packaged_server())
        .and_then(|()| crate::docs::walks_installed());
    let imaged = checked.and_then(|()| image(&out));
    let purged = purge();
    imaged?;
    purged?;
    println!(
        "xtask: dist-check passed: packages installed, units verified, walks and image run, packages purged"
    );
    Ok(())
}

/// `cargo xtask dist --help` answers, and says what the build costs and
/// what it may install on the machine (podman and its runtimes, with
/// apt-get), before anybody runs it.
fn dist_help() -> anyhow::Result<()> {
    let xtask = std::env::current_exe().context("the xtask binary")?;
    let help = output(&xtask.display().to_string(), &["dist", "--help"])?;
    for said in ["--profile", "codegen unit", "apt-get", "--no-image"] {
        ensure!(
            help.contains(said),
            "cargo xtask dist --help does not say {said:?}:\n{help}"
        );
    }
    Ok(())
}

fn output(program: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {program}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(
        out.status.success(),
        "{program} {} failed: {text}",
        args.join(" ")
    );
    Ok(text)
}

fn installed() -> anyhow::Result<()> {
    for bin in ["/usr/bin/berth", "/usr/bin/berth-agent"] {
        let v = output(bin, &["--version"])?;
        ensure!(v.contains(VERSION), "{bin} --version says {v}");
    }
    output("/usr/bin/hostpath-plugin", &["--help"])?;
    for file in [
        "/usr/share/man/man1/berth.1.gz",
        "/usr/share/man/man1/berth-volume-create.1.gz",
        "/usr/share/man/man1/berth-agent.1.gz",
        "/usr/share/man/man1/hostpath-plugin.1.gz",
        "/usr/share/man/man5/berth.toml.5.gz",
        "/usr/share/man/man5/agent.toml.5.gz",
        "/usr/share/bash-completion/completions/berth",
        "/usr/share/zsh/vendor-completions/_berth-agent",
        "/usr/share/fish/vendor_completions.d/berth.fish",
        "/usr/lib/docker/plugins/berth.spec",
        DASHBOARD,
        RULES,
    ] {
        ensure!(Path::new(file).exists(), "the packages did not install {file}");
    }
    // The alert rules as installed load in Prometheus's own checker.
    crate::ensure_promtool()?;
    output("promtool", &["check", "rules", RULES])?;
    output("getent", &["passwd", "berth"]).context("the berth user")?;
    output(
        "/usr/bin/berth",
        &["serve", "--check", "--config", "/etc/berth/berth.toml"],
    )?;
    book_sizes()?;
    println!("xtask: packages installed; binaries, man pages, completions, user and config in place");
    Ok(())
}

fn units() -> anyhow::Result<()> {
    crate::ensure_package("systemd-analyze", "systemd")?;
    // verify reads the units' Documentation= man pages with man.
    crate::ensure_package("man", "man-db")?;
    let text = output("systemd-analyze", &[&["verify"][..], &UNITS[..]].concat())?;
    // verify prints what it finds wrong and may still exit 0 for some of it.
    let complaints: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("berth"))
        .filter(|l| !l.trim().is_empty())
        .collect();
    ensure!(
        complaints.is_empty(),
        "systemd-analyze verify: {}",
        complaints.join("\n")
    );
    // The server warns at every start on a state directory others may
    // open (the store is for its owner): the units must not make one.
    for unit in UNITS {
        let text = std::fs::read_to_string(unit).with_context(|| format!("reading {unit}"))?;
        for mode in text.lines().filter_map(|l| l.strip_prefix("StateDirectoryMode=")) {
            let bits = u32::from_str_radix(mode.trim(), 8).with_context(|| format!("{unit}: {mode}"))?;
            ensure!(
                bits & 0o077 == 0,
                "{unit}: StateDirectoryMode={mode} lets others into the state directory, \
                 which berth warns about at every start"
            );
        }
    }
    println!("xtask: systemd-analyze verify passes the units; their state directories are private");
    Ok(())
}

/// The sample plugin as its unit runs it (root, the socket for the berth
/// group) and `berth serve` as its unit runs it (the berth user, the
/// packaged config, the directories systemd would make): `berth status
/// --check` finds nothing unhealthy. (A root-only plugin socket made every
/// call fail with "Permission denied" while `berth status` said nothing.)
fn packaged_server() -> anyhow::Result<()> {
    let _plugin = unit_plugin()?;
    for (dir, mode) in [("/var/lib/berth", "0700"), ("/run/berth", "0750")] {
        std::fs::create_dir_all(dir)?;
        output("chown", &["berth:berth", dir])?;
        output("chmod", &[mode, dir])?;
    }
    let _server = Reaped(
        // setpriv execs (runuser would stay as the parent, and a kill of
        // it leave the server running).
        Command::new("setpriv")
            .args(["--reuid", "berth", "--regid", "berth", "--init-groups", "--"])
            .args(["/usr/bin/berth", "serve", "--config", "/etc/berth/berth.toml"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting berth serve as the berth user")?,
    );
    healthy_through(PACKAGED_API, "the packaged server")?;
    println!("xtask: the packaged server, as the berth user, reaches the packaged plugin");
    Ok(())
}

/// The API socket the packaged config names.
const PACKAGED_API: &str = "/run/berth/berth.sock";

/// The sample plugin as its unit starts it (root; the socket for the
/// berth group), stopped when dropped.
fn unit_plugin() -> anyhow::Result<Reaped> {
    let unit = std::fs::read_to_string(UNITS[2])?;
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .context("the plugin's unit has no ExecStart")?;
    let mut words = exec.split_whitespace();
    let program = words.next().context("an empty ExecStart")?;
    Ok(Reaped(
        Command::new(program)
            .args(words)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting the sample plugin as its unit does")?,
    ))
}

/// Waits for a server answering on `api`, then for its plugin to be
/// fingerprinted; `berth status --check` must then find nothing wrong.
fn healthy_through(api: &str, what: &str) -> anyhow::Result<()> {
    let api = ["--api", api];
    let status = |check: bool| {
        let mut args = vec!["status"];
        args.extend(check.then_some("--check"));
        output("/usr/bin/berth", &[&args[..], &api[..]].concat())
    };
    wait_until(&format!("{what} answering"), Duration::from_secs(60), || {
        status(false).is_ok()
    })?;
    // Fingerprinting is under way at first; the verdict once it is done.
    wait_until(
        &format!("{what}'s plugin fingerprinted"),
        Duration::from_secs(30),
        || {
            output("/usr/bin/berth", &[&["plugin", "status"][..], &api[..]].concat())
                .is_ok_and(|s| !s.contains("unknown"))
        },
    )?;
    let said = status(true).with_context(|| format!("berth status --check, {what}"))?;
    ensure!(said.contains("problems  none"), "berth status, {what}: {said}");
    Ok(())
}

/// The Install page's sizes of the binaries are those installed, within
/// 10 %: the figures are not left to go stale.
fn book_sizes() -> anyhow::Result<()> {
    let page = std::fs::read_to_string(crate::root().join("docs/src/install.md"))?;
    for (name, bin) in [
        ("berth", "/usr/bin/berth"),
        ("berth-agent", "/usr/bin/berth-agent"),
    ] {
        let said = format!("`{name}` is ");
        // The first "`NAME` is N MB" (the page says "`NAME` is" of other things too).
        let said = page
            .replace('\n', " ")
            .split(&said)
            .skip(1)
            .find_map(|rest| {
                rest.split(" MB")
                    .next()
                    .and_then(|n| n.trim().parse::<f64>().ok())
            })
            .with_context(|| format!("the Install page says no size for {name} (\"{said}N MB\")"))?;
        let size = std::fs::metadata(bin)?.len() as f64 / 1e6;
        ensure!(
            (size - said).abs() <= size * 0.1,
            "the Install page says {name} is {said} MB; {bin} is {size:.1} MB: say so"
        );
    }
    Ok(())
}

/// The Install page's shell command that starts with `start`, its
/// continued lines joined, as words.
fn book_command(start: &str) -> anyhow::Result<Vec<String>> {
    let page = crate::root().join("docs/src/install.md");
    let book = std::fs::read_to_string(&page)?;
    let mut command = String::new();
    for line in book.lines().skip_while(|l| !l.starts_with(start)) {
        let (text, more) = match line.trim_end().strip_suffix('\\') {
            Some(text) => (text, true),
            None => (line, false),
        };
        command.push_str(text);
        command.push(' ');
        if !more {
            break;
        }
    }
    ensure!(!command.is_empty(), "{} shows no `{start} …`", page.display());
    Ok(command.split_whitespace().map(String::from).collect())
}

fn purge() -> anyhow::Result<()> {
    let mut purge = Command::new("dpkg");
    purge.arg("--purge").args(PACKAGES);
    run(purge)?;
    output("getent", &["passwd", "berth"]).context("the berth user is gone after a purge")?;
    Ok(())
}

/// Kills and reaps a process when dropped.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) -> anyhow::Result<()> {
    let started = Instant::now();
    while !done() {
        if started.elapsed() > timeout {
            bail!("{what}: not within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}

/// The Install page's server container, as written, on the packaged config
/// and the sample plugin its unit starts: `berth status --check` through
/// the socket it serves finds nothing wrong.
fn book_server(podman: &Podman) -> anyhow::Result<()> {
    const NAME: &str = "berth-serve";
    let line = book_command(&format!("podman run -d --name {NAME} "))?;
    let args: Vec<&str> = line.iter().skip(1).map(String::as_str).collect();
    let _plugin = unit_plugin()?;
    let _ = podman.output(&["rm", "--force", NAME]);
    let result = podman
        .ok(&args)
        .and_then(|_| healthy_through(PACKAGED_API, "the Install page's server container"));
    let logs = podman.output(&["logs", NAME]);
    let _ = podman.output(&["rm", "--force", "--time", "5", NAME]);
    // The container ran as root: what it wrote goes back to the berth user.
    output("chown", &["-R", "berth:berth", "/var/lib/berth", "/run/berth"])?;
    if let (Err(_), Ok(l)) = (&result, logs) {
        eprintln!("{}", String::from_utf8_lossy(&l.stderr));
    }
    result?;
    println!("xtask: the Install page's server container serves the packaged config");
    Ok(())
}

/// The image's binaries run, and `berth serve` in a container, its state
/// on a mounted directory, creates and publishes a volume through the
/// sample plugin (installed on this machine) for the installed CLI.
fn image(out: &Path) -> anyhow::Result<()> {
    let podman = Podman::new(out.join("podman-check"));
    let archive = out.join(format!("berth-image-{VERSION}.tar"));
    let loaded = podman.ok(&["load", "--input", &archive.display().to_string()])?;
    let image = format!("{TAG}:{VERSION}");
    ensure!(loaded.contains(&image), "podman load: {loaded}");
    let v = podman.ok(&[
        &["run", "--rm"][..],
        &Podman::RUN,
        &[&image, "berth", "--version"],
    ]
    .concat())?;
    ensure!(v.contains(VERSION), "berth in the image says {v}");
    // The Install page's own commands, as written (this check's storage
    // flags, and the runtime the host's cgroup layout takes, aside).
    let line = book_command("podman run --rm ")?;
    let args: Vec<&str> = line.iter().skip(1).map(String::as_str).collect();
    let v = podman
        .ok(&args)
        .with_context(|| format!("the Install page's {line:?}"))?;
    ensure!(v.contains(VERSION), "the Install page's {line:?} says {v}");
    book_server(&podman)?;
    let dir = out.join("image-check");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let plugin = Reaped(
        Command::new("/usr/bin/hostpath-plugin")
            .args(["--endpoint", "csi.sock", "--state-dir", "volumes"])
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting the sample plugin")?,
    );
    std::fs::write(
        dir.join("berth.toml"),
        "state = \"state/berth.redb\"\n\n[[plugin]]\nname = \"hostpath\"\ncontroller = \"csi.sock\"\n\n\
         [[node]]\nname = \"node-a\"\ndir = \"node-a\"\nplugins = { hostpath = \"csi.sock\" }\n",
    )?;
    // The same path inside as outside: the plugin, outside, is handed the
    // node's paths the server chose inside.
    let mount = format!("{0}:{0}", dir.display());
    let config = dir.join("berth.toml").display().to_string();
    let name = "berth-dist-check";
    let _ = podman.output(&["rm", "--force", name]);
    let serve = [&image, "berth", "serve", "--config", &config];
    podman.ok(&[
        &["run", "--detach", "--name", name, "--volume", &mount][..],
        &Podman::RUN,
        &serve,
    ]
    .concat())?;
    let api = dir.join("state/berth.sock").display().to_string();
    let berth = |args: &[&str]| output("/usr/bin/berth", &[args, &["--api", &api][..]].concat());
    let result = wait_until(
        "the server in the container answering",
        Duration::from_secs(60),
        || berth(&["status"]).is_ok(),
    )
    .and_then(|()| {
        berth(&[
            "volume", "create", "smoke", "--plugin", "hostpath", "--size", "1MiB", "--wait",
        ])
    })
    .and_then(|_| berth(&["volume", "publish", "smoke", "--wait"]))
    .and_then(|_| berth(&["volume", "get", "smoke"]))
    .and_then(|get| {
        ensure!(get.contains("published"), "the volume is not published: {get}");
        berth(&["volume", "unpublish", "smoke", "--wait"])?;
        berth(&["volume", "delete", "smoke", "--wait"])
    });
    let logs = podman.output(&["logs", name]);
    let _ = podman.output(&["rm", "--force", "--time", "5", name]);
    drop(plugin);
    let _ = podman.output(&["rmi", "--all", "--force"]);
    match result {
        Ok(_) => {
            println!("xtask: the image's berth serve created, published and deleted a volume");
            Ok(())
        }
        Err(e) => {
            if let Ok(l) = logs {
                eprintln!("{}", String::from_utf8_lossy(&l.stderr));
            }
            Err(e)
        }
    }
}
