//! `cargo xtask dist`: what operators install, in `target/dist/`:
//!
//! - `berth_<version>_<arch>.deb`: `berth` (server and CLI), the
//!   `berth-serve` unit, `/etc/berth/berth.toml`, Docker's plugin spec, man
//!   pages and bash/zsh/fish completions made from the CLI's definition;
//! - `berth-agent_<version>_<arch>.deb`: `berth-agent` (no wasmtime), its
//!   unit, `/etc/berth/agent.toml`, its man page and completions;
//! - `berth-hostpath-plugin_<version>_<arch>.deb`: the sample CSI plugin,
//!   to try Berth out;
//! - `berth-image-<version>.tar`: an OCI image archive built from scratch
//!   (the two binaries, the C library they link, the CA bundle), with podman.
//!
//! `--profile P` builds with cargo profile P (default `dist`; CI passes
//! `release`, already built for the benchmarks, and the binaries are
//! stripped of debug information either way); `--no-image` skips the image.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use crate::{root, run};

use crate::VERSION;
const MAINTAINER: &str = "The Berth authors <berth@example.org>";

/// One file of a package: where it comes from, where it goes, its mode.
struct File {
    from: PathBuf,
    to: String,
    mode: u32,
}

impl File {
    fn new(from: impl Into<PathBuf>, to: impl Into<String>, mode: u32) -> File {
        File {
            from: from.into(),
            to: to.into(),
            mode,
        }
    }
}

struct Package {
    name: &'static str,
    summary: &'static str,
    description: &'static str,
    files: Vec<File>,
    /// Files under /etc that dpkg keeps the operator's edits of.
    conffiles: Vec<&'static str>,
    postinst: Option<&'static str>,
}

struct Options {
    profile: String,
    image: bool,
}

const USAGE: &str = "\
usage: cargo xtask dist [--profile P] [--no-image]

What operators install, into target/dist: the berth, berth-agent and berth-hostpath-plugin
Debian packages (binaries, units, configs, man pages, completions) and an OCI image.

  --profile P   the cargo profile to build with. The default, `dist`, is optimised with one
                codegen unit: the smallest, fastest binaries, and the slowest build (about
                15 to 20 minutes on 2 cores from nothing). `release` (16 codegen units) builds
                in about half that; CI passes it, built already for the benchmarks.
  --no-image    skip the OCI image.

The image is built with podman. Where podman, crun or runc is missing, this installs Debian's
package with apt-get (as root, or through sudo), which may also upgrade packages they depend
on; --no-image needs none of them. strip (binutils), gzip and help2man (installed the same way
when missing) make the binaries and man pages.";

fn options(args: &[String]) -> anyhow::Result<Options> {
    let mut o = Options {
        profile: "dist".into(),
        image: true,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--profile" => o.profile = it.next().context("--profile needs a cargo profile")?.clone(),
            "--no-image" => o.image = false,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("dist: unknown argument {other}\n\n{USAGE}"),
        }
    }
    Ok(o)
}

pub fn out_dir() -> PathBuf {
    root().join("target/dist")
}

pub fn dist(args: &[String]) -> anyhow::Result<()> {
    let o = options(args)?;
    println!(
        "xtask: dist with the {} profile{}",
        o.profile,
        if o.profile == "dist" {
            " (one codegen unit: the slowest build; --profile release builds in about half the time)"
        } else {
            ""
        }
    );
    crate::build_shipped(&o.profile)?;
    let profile_dir = if o.profile == "dev" { "debug" } else { &o.profile };
    let bins = root().join("target").join(profile_dir);
    let out = out_dir();
    let _ = std::fs::remove_dir_all(&out);
    let gen_dir = out.join("gen");
    std::fs::create_dir_all(&gen_dir)?;

    let stripped = gen_dir.join("bin");
    std::fs::create_dir_all(&stripped)?;
    for bin in ["berth", "berth-agent", "hostpath-plugin"] {
        strip(&bins.join(bin), &stripped.join(bin))?;
    }
    let generated = generate(&stripped, &gen_dir)?;
    let arch = architecture();
    let mut made = Vec::new();
    for package in packages(&stripped, &generated) {
        made.push(build_deb(&package, &arch, &out)?);
    }
    if o.image {
        made.push(crate::dist_image::build(&stripped, &out)?);
    }
    println!("xtask: dist ({} profile) in {}:", o.profile, out.display());
    for bin in ["berth", "berth-agent", "hostpath-plugin"] {
        println!(
            "  {:<44} {:>6.1} MB",
            format!("binary {bin}"),
            mb(&stripped.join(bin))?
        );
    }
    for path in &made {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        println!("  {name:<44} {:>6.1} MB", mb(path)?);
    }
    Ok(())
}

fn mb(path: &Path) -> anyhow::Result<f64> {
    Ok(std::fs::metadata(path)?.len() as f64 / 1e6)
}

/// A copy of `from` without debug information (symbols stay, for backtraces).
fn strip(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::copy(from, to).with_context(|| format!("copying {}", from.display()))?;
    let mut cmd = Command::new("strip");
    cmd.arg("--strip-debug").arg(to);
    run(cmd)
}

/// Man pages and completions, made by the built `berth` from its CLI's
/// definition (and berth-agent's); the sample plugin's page from its
/// `--help` (help2man, Debian's package).
struct Generated {
    man: PathBuf,
    /// berth.toml(5) and agent.toml(5), from the book's configuration reference.
    man5: PathBuf,
    completions: PathBuf,
}

fn generate(bins: &Path, dir: &Path) -> anyhow::Result<Generated> {
    let berth = bins.join("berth");
    let man = dir.join("man");
    let mut cmd = Command::new(&berth);
    cmd.arg("manual").arg(&man);
    run(cmd)?;
    crate::ensure_package("help2man", "help2man")?;
    let mut page = Command::new("help2man");
    page.args([
        "--no-info",
        "--section",
        "1",
        "--name",
        "Berth's sample CSI plugin (volumes as directories)",
    ])
    .arg("--output")
    .arg(man.join(PLUGIN_PAGE))
    .arg(bins.join("hostpath-plugin"));
    run(page)?;
    let man5 = dir.join("man5");
    std::fs::create_dir_all(&man5)?;
    crate::man_config::write(&root(), &man5, VERSION)?;
    let mut gzip = Command::new("gzip");
    gzip.args(["-9", "-n"]);
    for page in std::fs::read_dir(&man)?.chain(std::fs::read_dir(&man5)?) {
        gzip.arg(page?.path());
    }
    run(gzip)?;
    let completions = dir.join("completions");
    std::fs::create_dir_all(&completions)?;
    for program in ["berth", "berth-agent"] {
        for shell in ["bash", "zsh", "fish"] {
            let out = Command::new(&berth)
                .args(["completions", shell, "--program", program])
                .output()
                .context("running berth completions")?;
            if !out.status.success() {
                bail!("berth completions {shell} --program {program} failed");
            }
            std::fs::write(completions.join(format!("{program}.{shell}")), out.stdout)?;
        }
    }
    Ok(Generated {
        man,
        man5,
        completions,
    })
}

/// Where each shell looks for the completions of `program`.
fn completion_files(g: &Generated, program: &str) -> Vec<File> {
    let from = |shell: &str| g.completions.join(format!("{program}.{shell}"));
    vec![
        File::new(
            from("bash"),
            format!("usr/share/bash-completion/completions/{program}"),
            0o644,
        ),
        File::new(
            from("zsh"),
            format!("usr/share/zsh/vendor-completions/_{program}"),
            0o644,
        ),
        File::new(
            from("fish"),
            format!("usr/share/fish/vendor_completions.d/{program}.fish"),
            0o644,
        ),
    ]
}

fn man_files(g: &Generated, keep: impl Fn(&str) -> bool) -> anyhow::Result<Vec<File>> {
    let mut files = Vec::new();
    for page in std::fs::read_dir(&g.man)? {
        let path = page?.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy().to_string();
        if keep(&name) {
            files.push(File::new(&path, format!("usr/share/man/man1/{name}"), 0o644));
        }
    }
    files.sort_by(|a, b| a.to.cmp(&b.to));
    Ok(files)
}

/// A configuration file's page, in section 5.
fn config_page(g: &Generated, file: &str) -> File {
    let name = format!("{file}.5.gz");
    File::new(g.man5.join(&name), format!("usr/share/man/man5/{name}"), 0o644)
}

fn docs(package: &str) -> Vec<File> {
    let p = root().join("packaging/debian/copyright");
    vec![File::new(p, format!("usr/share/doc/{package}/copyright"), 0o644)]
}

/// The sample plugin's man page (gzipped later).
const PLUGIN_PAGE: &str = "hostpath-plugin.1";

fn packages(bins: &Path, g: &Generated) -> Vec<Package> {
    let packaging = root().join("packaging");
    let agent_page = |name: &str| name.starts_with("berth-agent.");
    let plugin_page = |name: &str| name.starts_with(PLUGIN_PAGE);
    let mut berth = vec![
        File::new(bins.join("berth"), "usr/bin/berth", 0o755),
        File::new(
            packaging.join("systemd/berth-serve.service"),
            "usr/lib/systemd/system/berth-serve.service",
            0o644,
        ),
        File::new(packaging.join("config/berth.toml"), "etc/berth/berth.toml", 0o640),
        File::new(
            packaging.join("debian/berth.spec"),
            "usr/lib/docker/plugins/berth.spec",
            0o644,
        ),
        File::new(root().join("README.md"), "usr/share/doc/berth/README.md", 0o644),
        File::new(
            packaging.join("monitoring/berth-dashboard.json"),
            "usr/share/berth/grafana/berth-dashboard.json",
            0o644,
        ),
        File::new(
            packaging.join("monitoring/berth-rules.yml"),
            "usr/share/berth/prometheus/berth-rules.yml",
            0o644,
        ),
    ];
    berth.extend(man_files(g, |n| !agent_page(n) && !plugin_page(n)).unwrap_or_default());
    berth.push(config_page(g, "berth.toml"));
    berth.extend(completion_files(g, "berth"));
    berth.extend(docs("berth"));
    let mut agent = vec![
        File::new(bins.join("berth-agent"), "usr/bin/berth-agent", 0o755),
        File::new(
            packaging.join("systemd/berth-agent.service"),
            "usr/lib/systemd/system/berth-agent.service",
            0o644,
        ),
        File::new(packaging.join("config/agent.toml"), "etc/berth/agent.toml", 0o600),
    ];
    agent.extend(man_files(g, agent_page).unwrap_or_default());
    agent.push(config_page(g, "agent.toml"));
    agent.extend(completion_files(g, "berth-agent"));
    agent.extend(docs("berth-agent"));
    let mut plugin = vec![
        File::new(bins.join("hostpath-plugin"), "usr/bin/hostpath-plugin", 0o755),
        File::new(
            packaging.join("systemd/berth-hostpath-plugin.service"),
            "usr/lib/systemd/system/berth-hostpath-plugin.service",
            0o644,
        ),
    ];
    plugin.extend(man_files(g, plugin_page).unwrap_or_default());
    plugin.extend(docs("berth-hostpath-plugin"));
    vec![
        Package {
            name: "berth",
            summary: "CSI volume manager with sandboxed WebAssembly policy",
            description: "Berth drives volumes through CSI plugins (create, publish, stage, and back)\n\
                          with durable state, and delegates naming, placement and retry decisions to\n\
                          sandboxed WebAssembly policy modules. This package holds the server and the\n\
                          CLI, the berth-serve unit (not enabled) and an example configuration.",
            files: berth,
            conffiles: vec!["/etc/berth/berth.toml"],
            postinst: Some("debian/berth.postinst"),
        },
        Package {
            name: "berth-agent",
            summary: "Berth's node agent, without the policy engine",
            description: "berth-agent runs on every node: it joins a Berth server over TLS and drives\n\
                          the node's CSI node plugins (stage, publish), keeping a durable record of\n\
                          what the node holds. This package holds the agent and its unit (not enabled).",
            files: agent,
            conffiles: vec!["/etc/berth/agent.toml"],
            postinst: Some("debian/berth-agent.postinst"),
        },
        Package {
            name: "berth-hostpath-plugin",
            summary: "Berth's sample CSI plugin (volumes as directories), to try Berth out",
            description: "hostpath-plugin is a CSI plugin (Identity, Controller, Node) that keeps\n\
                          volumes as directories and bind-mounts them: for trying Berth out and for\n\
                          testing, not for data that matters. Its unit (not enabled) serves the socket\n\
                          the packaged berth.toml names, for the berth group.",
            files: plugin,
            conffiles: vec![],
            postinst: Some("debian/berth-hostpath-plugin.postinst"),
        },
    ]
}

pub fn architecture() -> String {
    Command::new("dpkg")
        .arg("--print-architecture")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| "amd64".into())
}

fn build_deb(p: &Package, arch: &str, out: &Path) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let stage = out.join("stage").join(p.name);
    let control = stage.join("DEBIAN");
    std::fs::create_dir_all(&control)?;
    let mut size = 0u64;
    for f in &p.files {
        let to = stage.join(&f.to);
        std::fs::create_dir_all(to.parent().context("a file with no directory")?)?;
        std::fs::copy(&f.from, &to).with_context(|| format!("copying {}", f.from.display()))?;
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(f.mode))?;
        size += std::fs::metadata(&to)?.len();
    }
    let description: String = p
        .description
        .lines()
        .map(|l| format!(" {}\n", l.trim()))
        .collect();
    std::fs::write(
        control.join("control"),
        format!(
            "Package: {}\nVersion: {VERSION}\nArchitecture: {arch}\nMaintainer: {MAINTAINER}\n\
             Installed-Size: {}\nDepends: libc6 (>= 2.34)\nSection: admin\nPriority: optional\n\
             Description: {}\n{description}",
            p.name,
            size.div_ceil(1024),
            p.summary
        ),
    )?;
    if !p.conffiles.is_empty() {
        std::fs::write(control.join("conffiles"), p.conffiles.join("\n") + "\n")?;
    }
    let scripts = root().join("packaging");
    let install_script = |from: &Path, name: &str| -> anyhow::Result<()> {
        let to = control.join(name);
        std::fs::copy(from, &to).with_context(|| format!("copying {}", from.display()))?;
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755))?;
        Ok(())
    };
    if let Some(postinst) = p.postinst {
        install_script(&scripts.join(postinst), "postinst")?;
    }
    if p.files.iter().any(|f| f.to.starts_with("usr/lib/systemd/")) {
        install_script(&scripts.join("debian/postrm"), "postrm")?;
    }
    let deb = out.join(format!("{}_{VERSION}_{arch}.deb", p.name));
    let mut cmd = Command::new("dpkg-deb");
    cmd.args(["--root-owner-group", "-Zxz", "--build"])
        .arg(&stage)
        .arg(&deb);
    run(cmd)?;
    Ok(deb)
}
