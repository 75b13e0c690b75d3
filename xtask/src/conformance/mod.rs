//! `cargo xtask conformance [--csi-sanity PATH]`: the sample plugin judged
//! in every shape it offers (one process; controller and node apart, split
//! with `--mode` and with `--controller false`/`--node false`; without
//! ControllerPublish; without staging; an older CSI version; optional fields
//! left out; capacity unknown; snapshots ready later).
//!
//! `berth plugin check` alone decides: every shape passes every case it
//! does not skip and leaves nothing behind, the two spellings of the split
//! get the same verdicts, and each `--misbehave` flag fails exactly the
//! cases of the rule it breaks ([`check`]). When csi-sanity
//! (kubernetes-csi/csi-test, not part of Berth) is given with
//! `--csi-sanity PATH` or `BERTH_CSI_SANITY`, every shape must pass it too
//! ([`sanity`]) and the two must agree on every rule both judge
//! ([`compare`]); without it, the run says the comparison was skipped.

mod check;
mod compare;
mod plugin;
mod sanity;

use std::path::PathBuf;

use anyhow::{Context, bail, ensure};

use crate::root;

const USAGE: &str = "\
usage: cargo xtask conformance [--csi-sanity PATH]

`berth plugin check` against the sample plugin in every shape it offers, and with each of
its fault flags: every shape passes with nothing left behind, each flag fails exactly the
cases of the rule it breaks.

  --csi-sanity PATH   also run csi-sanity (kubernetes-csi/csi-test's cmd/csi-sanity) in
                      every shape and compare its verdicts with the check's; the
                      environment's BERTH_CSI_SANITY does the same. Without either, that
                      comparison is skipped (and said so).";

/// The csi-sanity binary to run, if one was given.
fn sanity_path(args: &[String]) -> anyhow::Result<Option<PathBuf>> {
    let mut it = args.iter();
    let mut given = std::env::var_os("BERTH_CSI_SANITY")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--csi-sanity" => given = Some(it.next().context("--csi-sanity needs a path")?.into()),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("conformance: unknown argument {other}\n\n{USAGE}"),
        }
    }
    if let Some(path) = &given {
        ensure!(
            path.is_file(),
            "no csi-sanity at {}: build it from kubernetes-csi/csi-test (cmd/csi-sanity), or run without \
             --csi-sanity and BERTH_CSI_SANITY to rely on plugin check alone",
            path.display()
        );
    }
    Ok(given)
}

pub fn conformance(args: &[String]) -> anyhow::Result<()> {
    let sanity = sanity_path(args)?;
    // The workspace's binaries, as `cargo xtask test` builds them (building
    // two packages alone resolves their dependencies' features apart and
    // compiles a third of the tree again).
    crate::build_bins()?;
    let plugin = root().join("target/debug/hostpath-plugin");
    let base = root().join("target/conformance");
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base)?;
    check::shapes(&plugin, &base)?;
    check::faults(&plugin, &base)?;
    match sanity {
        Some(sanity) => {
            sanity::shapes(&sanity, &plugin, &base)?;
            compare::compare(&sanity, &plugin, &base)
        }
        None => {
            println!(
                "xtask: csi-sanity comparison skipped: no --csi-sanity PATH or BERTH_CSI_SANITY given; \
                 the verdicts above are plugin check's alone"
            );
            Ok(())
        }
    }
}
