//! A crate root's list of its modules stays whole and true: when the `//!`
//! docs of a `lib.rs` or `main.rs` list modules (items starting with a
//! module's name in backticks, `- \`name\` — ...`), every module the root
//! declares is named there, and every name listed is one it declares. A
//! root without such a list is left alone (its modules' own `//!` lines
//! say what they are).

use std::collections::BTreeSet;

/// The modules `root` declares, test modules aside.
fn declared(root: &str) -> BTreeSet<String> {
    let lines: Vec<&str> = root.lines().map(str::trim).collect();
    lines
        .iter()
        .enumerate()
        .filter(|(i, _)| *i == 0 || lines[i - 1] != "#[cfg(test)]")
        .filter_map(|(_, l)| {
            let l = ["pub(crate) ", "pub(super) ", "pub "]
                .iter()
                .find_map(|p| l.strip_prefix(p))
                .unwrap_or(l);
            let name = l.strip_prefix("mod ")?.strip_suffix(';')?;
            Some(name.trim().to_string())
        })
        .collect()
}

/// The module names a root's `//!` docs list: each list item's leading
/// backticked names (`name`, `name/`, `name.rs`), and any further
/// `; \`name\` —` in the same item (its indented lines included).
fn listed(root: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut in_item = false;
    for line in root.lines().filter_map(|l| l.strip_prefix("//!")) {
        // An item's own line, or its continuation (indented under it).
        let item = match line.trim_start().strip_prefix("- ") {
            Some(item) => item,
            None if in_item && line.starts_with("   ") => line.trim_start(),
            None => {
                in_item = false;
                continue;
            }
        };
        in_item = true;
        for part in item.split("; ") {
            let Some(rest) = part.strip_prefix('`') else {
                continue;
            };
            let Some((name, after)) = rest.split_once('`') else {
                continue;
            };
            if after.trim_start().starts_with('—') {
                names.insert(name.trim_end_matches('/').trim_end_matches(".rs").to_string());
            }
        }
    }
    names
}

/// What is wrong with `root`'s list, if it has one.
fn wrong(root: &str) -> Vec<String> {
    let listed = listed(root);
    if listed.is_empty() {
        return Vec::new();
    }
    let declared = declared(root);
    let mut wrong: Vec<String> = declared
        .difference(&listed)
        .map(|m| format!("module {m} is not in the list"))
        .collect();
    wrong.extend(
        listed
            .difference(&declared)
            .map(|m| format!("{m} is listed but is no module")),
    );
    wrong
}

#[test]
fn every_listed_crate_root_lists_its_modules_and_only_them() {
    let mut found = Vec::new();
    for member in super::members() {
        for root in ["src/lib.rs", "src/main.rs"] {
            let path = member.join(root);
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            for w in wrong(&text) {
                found.push(format!(
                    "{}: {w}",
                    path.strip_prefix(super::root()).unwrap_or(&path).display()
                ));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn a_stale_or_partial_list_is_caught_and_no_list_is_fine() {
    let root = "//! Parts:\n//! - `a` — one; `b/` — two,\n//!   more of two; `d` — four;\n//! - `gone.rs` — moved away.\n\nmod a;\npub mod b;\npub(crate) mod c;\nmod d;\n#[cfg(test)]\nmod tests;\n";
    let mut found = wrong(root);
    found.sort();
    assert_eq!(
        found,
        ["gone is listed but is no module", "module c is not in the list"]
    );
    assert!(wrong("//! No list here.\nmod a;\n").is_empty());
}
