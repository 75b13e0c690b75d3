//! Builds the policy guest components the tests load (the samples in
//! `guests/` and the hostile ones in `tests/guests/`) for wasm32-wasip2, so
//! that a plain `cargo test` works on a clean clone and a guest is rebuilt
//! whenever its sources change.
//!
//! The guests get a target directory of their own (`target/guests`): the
//! outer cargo holds the lock of the main one while build scripts run.
//! `cargo xtask guests` builds into the same place.

use std::path::PathBuf;
use std::process::Command;

/// One package a line; `#` starts a comment.
fn guests() -> impl Iterator<Item = &'static str> {
    include_str!("guest-packages.txt")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
}
const TARGET: &str = "wasm32-wasip2";

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let root = manifest.parent().expect("the workspace root").to_path_buf();
    for watched in [
        "guests",
        "wit",
        "tests/guests",
        ".cargo/config.toml",
        "Cargo.lock",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(watched).display());
    }
    println!("cargo:rerun-if-env-changed=CARGO_TARGET_DIR");
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(|d| root.join(d))
        .unwrap_or_else(|| root.join("target"))
        .join("guests");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    ensure_target();
    let mut cmd = Command::new(&cargo);
    cmd.current_dir(&root)
        .args(["build", "--quiet", "--target", TARGET, "--profile", "guest"])
        .env("CARGO_TARGET_DIR", &target_dir)
        // What the outer build set for itself must not reach the guests:
        // flags (they would replace the guests' stack size from
        // .cargo/config.toml) and clippy's driver.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .env_remove("RUSTC_WORKSPACE_WRAPPER");
    for g in guests() {
        cmd.args(["--package", g]);
    }
    let status = cmd.status().expect("running cargo to build the guest components");
    if !status.success() {
        panic!("building the guest components failed ({status}); see the errors above");
    }
    let dir = target_dir.join(TARGET).join("guest");
    println!("cargo:rustc-env=BERTH_GUESTS_DIR={}", dir.display());
    // A component removed since (a cleaned guest directory) is built again.
    for g in guests() {
        let file = format!("{}.wasm", g.replace('-', "_"));
        println!("cargo:rerun-if-changed={}", dir.join(file).display());
    }

    // The naming sample once more as a guest author who skipped the SDK's
    // stack setting would build it (Rust's default 1 MiB stack), for the
    // test that `berth policy check` warns about it. Flags in the
    // environment replace those of .cargo/config.toml.
    let plain_dir = target_dir.with_file_name("guests-default-stack");
    let status = Command::new(&cargo)
        .current_dir(&root)
        .args([
            "build",
            "--quiet",
            "--target",
            TARGET,
            "--profile",
            "guest",
            "--package",
            "berth-naming-guest",
        ])
        .env("CARGO_TARGET_DIR", &plain_dir)
        .env("CARGO_ENCODED_RUSTFLAGS", "-Cdebuginfo=0")
        .env_remove("RUSTFLAGS")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .status()
        .expect("running cargo to build a guest with the default stack");
    if !status.success() {
        panic!("building the default-stack guest failed ({status})");
    }
    println!(
        "cargo:rustc-env=BERTH_DEFAULT_STACK_GUEST={}",
        plain_dir
            .join(TARGET)
            .join("guest/berth_naming_guest.wasm")
            .display()
    );
}

/// Adds the wasm32-wasip2 target when rustup manages the toolchain and lacks it.
fn ensure_target() {
    let Ok(out) = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
    else {
        return; // No rustup: the toolchain must have the target already.
    };
    if String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.trim() == TARGET)
    {
        return;
    }
    let added = Command::new("rustup").args(["target", "add", TARGET]).status();
    if !added.is_ok_and(|s| s.success()) {
        panic!("could not add the {TARGET} target; run `rustup target add {TARGET}`");
    }
}
