//! The binaries the tests start, built beforehand and never by a test.

use std::path::{Path, PathBuf};

/// A binary built by this workspace (`berth`, `hostpath-plugin`).
///
/// Tests live in `target/<profile>/deps/`; the binaries sit one level up,
/// built before the tests run (`cargo xtask test` builds them; by hand,
/// `cargo build --bins -p berth -p hostpath-plugin` in the tests' profile).
/// A test never builds them itself: one missing, or older than the sources
/// it is built from, stops the test with what to run.
/// `BERTH_TEST_PREBUILT=1` skips that check when the caller just built them.
/// `BERTH_TEST_BINS=DIR` takes them from another profile's directory: a
/// benchmark's driver built with the tests drives the release binaries.
pub fn bin(name: &str) -> PathBuf {
    static CHECKED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    let dir = match std::env::var_os("BERTH_TEST_BINS") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let exe = std::env::current_exe().expect("current test executable");
            exe.parent()
                .and_then(Path::parent)
                .expect("target directory")
                .to_path_buf()
        }
    };
    if let Err(e) = CHECKED.get_or_init(|| check_bins(&dir)) {
        panic!("{e}");
    }
    dir.join(name)
}

/// The newest modification time of a file below `path`.
fn newest(path: &Path) -> Option<std::time::SystemTime> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_dir() {
        return meta.modified().ok();
    }
    std::fs::read_dir(path)
        .ok()?
        .flatten()
        .filter_map(|e| newest(&e.path()))
        .max()
}

/// Whether the binaries in `dir` (`target/<profile>`) are there and newer
/// than their sources.
fn check_bins(dir: &Path) -> Result<(), String> {
    if std::env::var_os("BERTH_TEST_PREBUILT").is_some() {
        return Ok(());
    }
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let profile = match dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => String::new(),
        Some("release") => " --release".into(),
        Some(other) => format!(" --profile {other}"),
        None => return Err(format!("{} is not a profile directory", dir.display())),
    };
    let build = format!("cargo build --bins -p berth -p berth-agent-bin -p hostpath-plugin{profile}");
    for (bin, sources) in [
        ("berth", &["host", "proto", "wit", "Cargo.lock"][..]),
        ("berth-agent", &["host", "proto", "Cargo.lock"][..]),
        (
            "hostpath-plugin",
            &["examples/hostpath-plugin/src", "proto", "Cargo.lock"][..],
        ),
    ] {
        let built = std::fs::metadata(dir.join(bin))
            .and_then(|m| m.modified())
            .map_err(|_| {
                format!(
                    "{bin} is not built in {}: run `{build}` (or `cargo xtask test`)",
                    dir.display()
                )
            })?;
        let source = sources.iter().filter_map(|s| newest(&root.join(s))).max();
        if source.is_some_and(|s| s > built) {
            return Err(format!(
                "{bin} in {} is older than its sources: run `{build}` (or `cargo xtask test`)",
                dir.display()
            ));
        }
    }
    Ok(())
}
