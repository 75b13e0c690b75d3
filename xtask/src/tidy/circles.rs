//! No import circle between the files of a crate. File A uses file B when
//! A's code names a path (`crate::x::y`, `super::y`, `self::y`, and each
//! path of a `{...}` group) that lives in B. A module and its own folder's
//! files are one room: a parent declaring its children, or a child reaching
//! its ancestors' items, is no edge. What is left must have no circle, so
//! that each file can be read knowing only the files below it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module's path inside its crate: `[]` for the root, `["a", "b"]` for `a::b`.
type ModPath = Vec<String>;

/// Each file of the crate whose sources are in `src`, by module path.
fn modules(src: &Path) -> BTreeMap<ModPath, PathBuf> {
    let mut map = BTreeMap::new();
    for file in super::rust_files(src) {
        let rel = file.strip_prefix(src).expect("below src");
        let mut parts: ModPath = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
        if parts.first().is_some_and(|p| p == "bin") {
            continue;
        }
        let name = parts.pop().expect("a file name");
        let stem = name.trim_end_matches(".rs");
        let root_file = parts.is_empty() && (stem == "lib" || stem == "main");
        if !root_file && stem != "mod" {
            parts.push(stem.to_string());
        }
        map.entry(parts).or_insert(file);
    }
    map
}

/// Every path named in `code` from `crate`, `super` or `self`, made
/// absolute from `module` (the file's own module path), groups expanded.
fn paths_named(code: &str, module: &ModPath) -> Vec<ModPath> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    for start in ["crate::", "super::", "self::"] {
        for (i, _) in code.match_indices(start) {
            let before = i.checked_sub(1).map(|b| bytes[b]);
            if before.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':') {
                continue;
            }
            let mut base: ModPath = match start {
                "crate::" => Vec::new(),
                "self::" => module.clone(),
                _ => module[..module.len().saturating_sub(1)].to_vec(),
            };
            let mut rest = &code[i + start.len()..];
            // `super::super::`
            while let Some(r) = rest.strip_prefix("super::") {
                base.pop();
                rest = r;
            }
            tree(rest, base, &mut out);
        }
    }
    out
}

/// The paths of a use tree starting at `text` (after a `::`), below `base`.
fn tree(text: &str, base: ModPath, out: &mut Vec<ModPath>) {
    let text = text.trim_start();
    if let Some(group) = text.strip_prefix('{') {
        for item in split_group(group) {
            tree(item, base.clone(), out);
        }
        return;
    }
    let name: String = text
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    if name.is_empty() {
        return;
    }
    let mut path = base;
    if name != "self" {
        path.push(name.clone());
    }
    match text[name.len()..].trim_start().strip_prefix("::") {
        Some(rest) => tree(rest, path, out),
        None => out.push(path),
    }
}

/// The items of a `{...}` group whose text starts just after its `{`.
fn split_group(text: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&text[start..i]);
                return items;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items
}

/// The deepest module of `modules` that `path` lies in.
fn file_of<'a>(modules: &'a BTreeMap<ModPath, PathBuf>, path: &ModPath) -> Option<&'a ModPath> {
    (1..=path.len())
        .rev()
        .find_map(|n| modules.get_key_value(&path[..n]).map(|(k, _)| k))
}

/// The circles among the files of the crate whose sources are in `src`:
/// each a set of two or more files that all reach each other.
pub fn circles(src: &Path) -> Vec<Vec<PathBuf>> {
    let modules = modules(src);
    let mut edges: BTreeMap<&ModPath, BTreeSet<&ModPath>> = BTreeMap::new();
    for (module, file) in &modules {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        for path in paths_named(&super::code_only(&text), module) {
            let Some(target) = file_of(&modules, &path) else {
                continue;
            };
            let related = target.starts_with(module) || module.starts_with(target);
            if !related {
                edges.entry(module).or_default().insert(target);
            }
        }
    }
    let reach = |from: &ModPath| {
        let mut seen = BTreeSet::new();
        let mut next = vec![from];
        while let Some(m) = next.pop() {
            for to in edges.get(m).into_iter().flatten() {
                if seen.insert(*to) {
                    next.push(to);
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&ModPath, BTreeSet<&ModPath>> = modules.keys().map(|m| (m, reach(m))).collect();
    let mut placed = BTreeSet::new();
    let mut out = Vec::new();
    for m in modules.keys() {
        if placed.contains(m) || !reaches[m].contains(m) {
            continue;
        }
        let circle: Vec<&ModPath> = reaches[m]
            .iter()
            .copied()
            .filter(|o| reaches[o].contains(m))
            .collect();
        placed.extend(circle.iter().copied());
        out.push(circle.iter().map(|m| modules[*m].clone()).collect());
    }
    out
}

#[test]
fn no_crate_has_a_file_circle() {
    let mut found = Vec::new();
    for member in super::members() {
        for circle in circles(&member.join("src")) {
            let names: Vec<String> = circle
                .iter()
                .map(|f| f.strip_prefix(super::root()).unwrap_or(f).display().to_string())
                .collect();
            found.push(names.join(" ⇄ "));
        }
    }
    assert!(
        found.is_empty(),
        "files that use each other (move what both need below both, or make one a child of the other):\n{}",
        found.join("\n")
    );
}

#[test]
fn a_circle_is_found_and_a_parent_with_its_children_is_none() {
    let dir = std::env::temp_dir().join(format!("berth-tidy-circles-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let write = |path: &str, text: &str| {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write("lib.rs", "//! Root.\nmod a;\nmod b;\nmod c;\nmod d;\n");
    write("a.rs", "//! A.\nuse crate::{b::B, c};\n");
    write("b.rs", "//! B.\npub struct B;\nfn f() { super::a::g() }\n");
    write(
        "c.rs",
        "//! C.\n// crate::d in a comment is no use\nconst S: &str = \"crate::d\";\n",
    );
    write("d/mod.rs", "//! D.\nmod e;\nuse self::e::E;\n");
    write(
        "d/e.rs",
        "//! E.\npub struct E;\nuse super::super::d::X;\nuse crate::c;\n",
    );
    let found = circles(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    let names: Vec<Vec<String>> = found
        .iter()
        .map(|c| {
            c.iter()
                .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
                .collect()
        })
        .collect();
    assert_eq!(names, [["a.rs", "b.rs"]]);
}

#[test]
fn groups_and_super_paths_are_made_absolute() {
    let module: ModPath = vec!["x".into(), "y".into()];
    let mut named = paths_named("use crate::{a::{b, c::D}, e}; super::f::g(); self::h;", &module);
    named.sort();
    let expected: Vec<ModPath> = vec![
        vec!["a".into(), "b".into()],
        vec!["a".into(), "c".into(), "D".into()],
        vec!["e".into()],
        vec!["x".into(), "f".into(), "g".into()],
        vec!["x".into(), "y".into(), "h".into()],
    ];
    assert_eq!(named, expected);
}
