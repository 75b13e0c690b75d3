//! Every `cargo install --path P` the README and the book show names a
//! member of the workspace that builds a binary, so that a crate moved in
//! the tree cannot leave the install instructions pointing at nothing.

use std::path::Path;

/// The `--path` of each `cargo install` in `text`.
fn install_paths(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.contains("cargo install"))
        .filter_map(|l| l.split_once("--path ").map(|(_, rest)| rest))
        .map(|rest| {
            rest.split(|c: char| c.is_whitespace() || c == '`')
                .next()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

/// Whether `dir` (below the root) is a member building a binary.
fn builds_a_binary(root: &Path, dir: &str) -> bool {
    let dir = root.join(dir);
    super::members().contains(&dir) && dir.join("src/main.rs").is_file()
}

#[test]
fn every_install_path_shown_is_a_member_with_a_binary() {
    let root = super::root();
    let mut pages = vec![root.join("README.md")];
    let mut next = vec![root.join("docs/src")];
    while let Some(dir) = next.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                next.push(p);
            } else if p.extension().is_some_and(|x| x == "md") {
                pages.push(p);
            }
        }
    }
    let mut wrong = Vec::new();
    let mut seen = 0;
    for page in pages {
        let text = std::fs::read_to_string(&page).unwrap();
        for path in install_paths(&text) {
            seen += 1;
            if !builds_a_binary(&root, &path) {
                wrong.push(format!("{}: cargo install --path {path}", page.display()));
            }
        }
    }
    assert!(
        seen > 0,
        "the README or the book shows how to install from source"
    );
    assert!(
        wrong.is_empty(),
        "no member with a binary there:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn a_path_that_moved_is_caught() {
    let root = super::root();
    let paths = install_paths(
        "Or: `cargo install --locked --path host` (and more)\ncargo install --path host/berth  # x",
    );
    assert_eq!(paths, ["host", "host/berth"]);
    assert!(!builds_a_binary(&root, "host"));
    assert!(builds_a_binary(&root, "host/berth"));
}
