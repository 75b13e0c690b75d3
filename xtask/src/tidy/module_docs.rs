//! Every module says what it is for: its file starts with a `//!` summary,
//! so a reader who opens any file of the workspace learns first what the
//! file holds (and `cargo doc` shows it beside the module's name).

use std::path::{Path, PathBuf};

/// The files of `dirs` whose first line is not a `//!` comment.
fn undocumented(dirs: &[PathBuf]) -> Vec<PathBuf> {
    dirs.iter()
        .flat_map(|dir| super::rust_files(dir))
        .filter(|file| {
            let text = std::fs::read_to_string(file).unwrap_or_default();
            !text.starts_with("//!")
        })
        .collect()
}

/// Where the workspace's own Rust lives: each member's folder (benches,
/// tests and build scripts included).
fn sources() -> Vec<PathBuf> {
    super::members()
}

#[test]
fn every_module_starts_with_its_summary() {
    let root = super::root();
    let missing: Vec<String> = undocumented(&sources())
        .iter()
        .map(|f| f.strip_prefix(&root).unwrap_or(f).display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "start these files with a `//!` line saying what they hold:\n{}",
        missing.join("\n")
    );
}

#[test]
fn a_module_without_its_summary_is_caught() {
    let dir = std::env::temp_dir().join(format!("berth-tidy-docs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("good.rs"), "//! Good.\n").unwrap();
    std::fs::write(dir.join("bad.rs"), "// Not a module doc.\n").unwrap();
    let found = undocumented(std::slice::from_ref(&dir));
    std::fs::remove_dir_all(&dir).unwrap();
    let names: Vec<&Path> = found.iter().map(|f| Path::new(f.file_name().unwrap())).collect();
    assert_eq!(names, [Path::new("bad.rs")]);
}
