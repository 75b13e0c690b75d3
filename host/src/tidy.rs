//! Keeps the module graph what ARCHITECTURE.md says it is: every top-level
//! module uses only the modules its line under "Module layers" names, and
//! those lines have no cycle, so each layer builds on the ones before it.
//! (A layer split into a crate of its own, as `model` is, has its boundary
//! kept by the compiler as well.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const START: &str = "<!-- layers -->";
const END: &str = "<!-- /layers -->";

/// The layers block of ARCHITECTURE.md: module → what it may use.
fn declared() -> BTreeMap<String, BTreeSet<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ARCHITECTURE.md");
    let text = std::fs::read_to_string(&root).expect("ARCHITECTURE.md");
    let block = text
        .split_once(START)
        .and_then(|(_, rest)| rest.split_once(END))
        .map(|(block, _)| block)
        .expect("ARCHITECTURE.md has a layers block");
    block
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("```"))
        .map(|l| {
            let mut words = l.split_whitespace();
            let module = words.next().unwrap().trim_end_matches(':').to_string();
            let uses = words.filter(|w| *w != "—").map(str::to_string).collect();
            (module, uses)
        })
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let path = e.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// What each top-level module of the library uses of the others, from
/// `crate::<module>` in its code (comments left out).
fn actual(modules: &BTreeSet<String>) -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(&src).unwrap();
        let top = rel.iter().next().unwrap().to_string_lossy();
        let top = top.trim_end_matches(".rs").to_string();
        if !modules.contains(&top) {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        for line in text.lines() {
            let code = line.split("//").next().unwrap_or_default();
            for (i, _) in code.match_indices("crate::") {
                let name: String = code[i + 7..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if name != top && modules.contains(&name) {
                    uses.entry(top.clone()).or_default().insert(name);
                }
            }
        }
    }
    uses
}

/// The library's top-level modules, from `lib.rs`: its own, and the crates
/// split out of it under their module names (`pub use berth_model as
/// model;`), whose boundaries the compiler keeps.
fn modules() -> BTreeSet<String> {
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs");
    std::fs::read_to_string(lib)
        .unwrap()
        .lines()
        .map(str::trim)
        .filter_map(|l| {
            l.strip_prefix("pub mod")
                .or_else(|| l.strip_prefix("mod"))
                .or_else(|| {
                    l.strip_prefix("pub use berth_")
                        .and_then(|r| r.split(" as ").nth(1))
                })
        })
        .map(|rest| rest.trim().trim_end_matches(';').to_string())
        .filter(|m| m != "tidy")
        .collect()
}

#[test]
fn every_module_uses_only_what_its_layer_allows() {
    let modules = modules();
    let declared = declared();
    let listed: BTreeSet<String> = declared.keys().cloned().collect();
    assert_eq!(
        listed, modules,
        "the layers block lists every module of lib.rs, and no other"
    );
    let mut wrong = Vec::new();
    for (module, uses) in actual(&modules) {
        for used in uses.difference(&declared[&module]) {
            wrong.push(format!("{module} uses {used}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "not in ARCHITECTURE.md's layers (add it there if it belongs, or move the code): {wrong:?}"
    );
}

#[test]
fn the_layers_have_no_cycle() {
    let declared = declared();
    // Each module must come after everything it uses.
    let mut placed: Vec<String> = Vec::new();
    let mut left: BTreeMap<String, BTreeSet<String>> = declared.clone();
    while !left.is_empty() {
        let ready: Vec<String> = left
            .iter()
            .filter(|(_, uses)| uses.iter().all(|u| placed.contains(u)))
            .map(|(m, _)| m.clone())
            .collect();
        assert!(
            !ready.is_empty(),
            "a cycle among: {:?}",
            left.keys().collect::<Vec<_>>()
        );
        for m in ready {
            left.remove(&m);
            placed.push(m);
        }
    }
    for (module, uses) in &declared {
        for u in uses {
            assert!(
                declared.contains_key(u),
                "{module} names {u}, which is not a module"
            );
        }
    }
}
