//! Tidy: tests of the tree's own shape, run with the others (`cargo xtask
//! test`) and by `cargo xtask lint`. Each keeps a map true or a habit kept:
//! the crates' layers and what links wasmtime against ARCHITECTURE.md
//! (`layers`), no import circle between the files of a crate (`circles`),
//! a `//!` summary first in every module (`module_docs`), a crate root's
//! list of its modules whole and true when it has one (`module_lists`), at most thirty
//! methods a type (`methods`), and each CSI operation named wherever a new
//! one must be (`operations`), and the install paths the README and the
//! book show are crates with binaries (`install_paths`). Each has a test showing that it fails on a
//! tree that breaks its rule.

mod circles;
mod install_paths;
mod layers;
mod methods;
mod module_docs;
mod module_lists;
mod operations;

use std::path::{Path, PathBuf};

/// The workspace's root.
fn root() -> PathBuf {
    crate::root()
}

/// Folders never walked: build output, dependencies, version control.
const SKIPPED: [&str; 4] = ["target", "node_modules", ".git", "fixtures"];

/// Every `.rs` file below `dir`, sorted, skipping [`SKIPPED`] folders.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut next = vec![dir.to_path_buf()];
    while let Some(dir) = next.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            if path.is_dir() {
                if !SKIPPED.iter().any(|s| name == *s) {
                    next.push(path);
                }
            } else if path.extension().is_some_and(|x| x == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The workspace's crates: each member folder of the root Cargo.toml.
fn members() -> Vec<PathBuf> {
    let text = std::fs::read_to_string(root().join("Cargo.toml")).expect("the workspace's Cargo.toml");
    let list = text
        .split_once("members = [")
        .and_then(|(_, rest)| rest.split_once(']'))
        .map(|(list, _)| list)
        .expect("the workspace lists its members");
    list.split(',')
        .map(|m| m.trim().trim_matches('"'))
        .filter(|m| !m.is_empty())
        .map(|m| root().join(m))
        .collect()
}

/// Rust source with comments and the insides of string and character
/// literals blanked (line structure kept), so that what is left is code.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let keep_lines = |out: &mut String, skipped: &[char]| {
        out.extend(skipped.iter().filter(|c| **c == '\n'));
    };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let ident_before = i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
        if c == '/' && next == Some('/') {
            let end = chars[i..]
                .iter()
                .position(|c| *c == '\n')
                .map_or(chars.len(), |n| i + n);
            i = end;
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            let start = i;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            keep_lines(&mut out, &chars[start..i.min(chars.len())]);
        } else if !ident_before
            && (c == 'r' || (c == 'b' && next == Some('r')))
            && raw_string_at(&chars, i).is_some()
        {
            let (hashes, body) = raw_string_at(&chars, i).unwrap();
            let close: Vec<char> = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let end = (body..chars.len())
                .find(|&j| chars[j..].starts_with(&close))
                .map_or(chars.len(), |j| j + close.len());
            out.push_str("\"\"");
            keep_lines(&mut out, &chars[i..end]);
            i = end;
        } else if c == '"' {
            let start = i;
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
            keep_lines(&mut out, &chars[start..i.min(chars.len())]);
        } else if c == '\'' && next == Some('\\') {
            // An escaped character literal ('\n', '\'', '\u{..}').
            let end = (i + 3..chars.len().min(i + 12)).find(|&j| chars[j] == '\'');
            out.push_str("' '");
            i = end.map_or(i + 1, |end| end + 1);
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            // A character literal ('"'); a lifetime has no closing quote.
            out.push_str("' '");
            i += 3;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// At `i`, a raw string's opening (`r"`, `r#"`, `br##"`...): how many
/// hashes it has and where its body starts.
fn raw_string_at(chars: &[char], i: usize) -> Option<(usize, usize)> {
    let mut j = i + if chars[i] == 'b' { 2 } else { 1 };
    let mut hashes = 0;
    while chars.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    (chars.get(j) == Some(&'"')).then_some((hashes, j + 1))
}

#[cfg(test)]
mod tests {
    use super::code_only;

    #[test]
    fn comments_and_literals_are_not_code() {
        let text = "use crate::a; // crate::b\nlet s = \"crate::c\"; /* crate::d\n */ let r = r#\"crate::e\"#;\nlet q = '\"'; fn f<'a>(x: &'a str) { crate::g }";
        let code = code_only(text);
        assert!(code.contains("crate::a") && code.contains("crate::g"), "{code}");
        for gone in ["crate::b", "crate::c", "crate::d", "crate::e"] {
            assert!(!code.contains(gone), "{gone} in {code}");
        }
        assert_eq!(code.lines().count(), text.lines().count());
    }
}
