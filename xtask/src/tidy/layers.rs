//! Keeps the crate and module graph what ARCHITECTURE.md says it is: each
//! name of its layers block — a crate under `host/` (`host/<name>`, package
//! `berth-<name>`, or `berth` for the binary's) or a top-level module of the
//! server crate — uses only the names its line lists, and those lines have
//! no cycle. A crate's uses are its `berth-*` dependencies (the compiler
//! then keeps the boundary); a module's are its `crate::<name>` paths (the
//! crates are re-exported under their names, so `crate::manager` is the
//! manager crate). Its links block names, for each heavy dependency, the
//! only members of the workspace that may depend on it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The server crate, whose top-level modules are layers too.
fn here() -> PathBuf {
    super::root().join("host/server")
}

fn host() -> PathBuf {
    super::root().join("host")
}

/// A block of ARCHITECTURE.md between `<!-- name -->` and `<!-- /name -->`:
/// each line `name: word word ...` as name → words.
fn block(name: &str) -> BTreeMap<String, BTreeSet<String>> {
    let text = std::fs::read_to_string(super::root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    parse_block(&text, name)
}

fn parse_block(text: &str, name: &str) -> BTreeMap<String, BTreeSet<String>> {
    let (start, end) = (format!("<!-- {name} -->"), format!("<!-- /{name} -->"));
    let block = text
        .split_once(&start)
        .and_then(|(_, rest)| rest.split_once(&end))
        .map(|(block, _)| block)
        .unwrap_or_else(|| panic!("ARCHITECTURE.md has a {name} block"));
    block
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("```"))
        .map(|l| {
            let mut words = l.split_whitespace();
            let name = words.next().unwrap().trim_end_matches(':').to_string();
            let uses = words.filter(|w| *w != "—").map(str::to_string).collect();
            (name, uses)
        })
        .collect()
}

/// The layers block: name → what it may use.
fn declared() -> BTreeMap<String, BTreeSet<String>> {
    block("layers")
}

/// A dependency's layer name: `berth-<name>` is `<name>`, `berth` itself
/// is `berth`; anything else is not Berth's.
fn layer_of(dependency: &str) -> Option<String> {
    match dependency {
        "berth" => Some("berth".into()),
        d => d.strip_prefix("berth-").map(str::to_string),
    }
}

/// The `[dependencies]` section of a manifest: dependency names.
fn dependencies(manifest: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(manifest).unwrap();
    let mut deps = BTreeSet::new();
    let mut inside = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            inside = line == "[dependencies]";
        } else if inside
            && let Some((name, _)) = line.split_once(['.', ' ', '='])
            && !name.is_empty()
            && !name.starts_with('#')
        {
            deps.insert(name.to_string());
        }
    }
    deps
}

/// The crates split out of the library: `host/<name>/Cargo.toml` → name.
fn crates() -> BTreeMap<String, PathBuf> {
    std::fs::read_dir(host())
        .unwrap()
        .flatten()
        .map(|e| e.path().join("Cargo.toml"))
        .filter(|m| m.is_file())
        .map(|m| {
            let name = m
                .parent()
                .unwrap()
                .file_name()
                .unwrap()
                .to_string_lossy()
                .to_string();
            (name, m)
        })
        .collect()
}

/// This library's own top-level modules, from `lib.rs` (tests' own left out).
fn modules() -> BTreeSet<String> {
    let text = std::fs::read_to_string(here().join("src/lib.rs")).unwrap();
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    lines
        .iter()
        .enumerate()
        .filter(|(i, _)| *i == 0 || lines[i - 1] != "#[cfg(test)]")
        .filter_map(|(_, l)| l.strip_prefix("pub mod").or_else(|| l.strip_prefix("mod")))
        .map(|rest| rest.trim().trim_end_matches(';').to_string())
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

/// What each name uses of the others.
fn actual(names: &BTreeSet<String>) -> BTreeMap<String, BTreeSet<String>> {
    let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (name, manifest) in crates() {
        let used = dependencies(&manifest)
            .into_iter()
            .filter_map(|d| layer_of(&d))
            .filter(|d| names.contains(d))
            .collect();
        uses.insert(name, used);
    }
    let src = here().join("src");
    let modules = modules();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
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
                if name != top && names.contains(&name) {
                    uses.entry(top.clone()).or_default().insert(name);
                }
            }
        }
    }
    uses
}

#[test]
fn every_crate_and_module_uses_only_what_its_layer_allows() {
    let names: BTreeSet<String> = crates().into_keys().chain(modules()).collect();
    let declared = declared();
    let listed: BTreeSet<String> = declared.keys().cloned().collect();
    assert_eq!(
        listed, names,
        "the layers block lists every crate under host/ and every module of lib.rs, and no other"
    );
    let mut wrong = Vec::new();
    for (name, uses) in actual(&names) {
        for used in uses.difference(&declared[&name]) {
            wrong.push(format!("{name} uses {used}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "not in ARCHITECTURE.md's layers (add it there if it belongs, or move the code): {wrong:?}"
    );
}

/// Everything `name` builds on, itself included.
fn closure(declared: &BTreeMap<String, BTreeSet<String>>, name: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut next = vec![name.to_string()];
    while let Some(n) = next.pop() {
        if seen.insert(n.clone()) {
            next.extend(declared.get(&n).into_iter().flatten().cloned());
        }
    }
    seen
}

/// Each member of the workspace by its name in the links block: its path,
/// `host/` left out (`policy`, `berth`, `tests`, `examples/hostpath-plugin`).
fn members() -> BTreeMap<String, PathBuf> {
    super::members()
        .into_iter()
        .map(|dir| {
            let rel = dir
                .strip_prefix(super::root())
                .unwrap_or(&dir)
                .to_string_lossy()
                .into_owned();
            let name = rel.strip_prefix("host/").unwrap_or(&rel).to_string();
            (name, dir.join("Cargo.toml"))
        })
        .collect()
}

/// For each dependency the links block names, the members whose manifests
/// depend on it (on any crate whose name starts with it) where the block
/// does not list them, or that it lists and do not.
fn links_wrong(
    links: &BTreeMap<String, BTreeSet<String>>,
    members: &BTreeMap<String, PathBuf>,
) -> Vec<String> {
    let mut wrong = Vec::new();
    for (dependency, allowed) in links {
        let linking: BTreeSet<String> = members
            .iter()
            .filter(|(_, m)| dependencies(m).iter().any(|d| d.starts_with(dependency.as_str())))
            .map(|(name, _)| name.clone())
            .collect();
        for name in linking.difference(allowed) {
            wrong.push(format!(
                "{name} depends on {dependency}, which ARCHITECTURE.md does not say"
            ));
        }
        for name in allowed.difference(&linking) {
            wrong.push(format!(
                "ARCHITECTURE.md says {name} depends on {dependency}; it does not"
            ));
        }
    }
    wrong
}

#[test]
fn only_the_crates_architecture_names_link_wasmtime_and_the_agent_builds_without_it() {
    let links = block("links");
    assert!(links.contains_key("wasmtime"), "the links block names wasmtime");
    let wrong = links_wrong(&links, &members());
    assert!(wrong.is_empty(), "{wrong:#?}");
    let agent = closure(&declared(), "agent");
    assert!(!agent.contains("policy"), "the agent builds on {agent:?}");
}

#[test]
fn a_member_linking_what_the_links_block_does_not_say_is_caught() {
    let links = parse_block(
        "<!-- links -->\nwasmtime: policy\nwat: nothing\n<!-- /links -->",
        "links",
    );
    let mut wrong = links_wrong(&links, &members());
    wrong.sort();
    // The binary's own package links wasmtime through its component tooling.
    assert!(
        wrong.contains(&"component depends on wasmtime, which ARCHITECTURE.md does not say".to_string()),
        "{wrong:#?}"
    );
    assert!(
        wrong.contains(&"ARCHITECTURE.md says nothing depends on wat; it does not".to_string()),
        "{wrong:#?}"
    );
}

/// The packages in `package`'s dependency tree (normal dependencies), as
/// cargo resolves them.
fn dependency_tree(package: &str) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "-e",
            "normal",
            "--prefix",
            "none",
            "-p",
            package,
        ])
        .current_dir(super::root())
        .output()
        .expect("running cargo tree");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

#[test]
fn the_berth_agent_binary_has_no_wasmtime_in_its_dependency_tree() {
    let agent = dependency_tree("berth-agent-bin");
    assert!(agent.contains("berth-agent"), "{agent:?}");
    let engine: Vec<&String> = agent.iter().filter(|p| p.starts_with("wasmtime")).collect();
    assert!(engine.is_empty(), "berth-agent links {engine:?}");
    // The same look at the server finds the engine: the check can fail.
    assert!(dependency_tree("berth").iter().any(|p| p == "wasmtime"));
}

#[test]
fn the_layers_have_no_cycle() {
    let declared = declared();
    // Each name must come after everything it uses.
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
    for (name, uses) in &declared {
        for u in uses {
            assert!(
                declared.contains_key(u),
                "{name} names {u}, which is not a crate or module"
            );
        }
    }
}
