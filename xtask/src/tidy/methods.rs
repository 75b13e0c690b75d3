//! No type grows a door for everything: a type's inherent methods, counted
//! over every `impl` block of its crate (trait impls aside), stay at most
//! [`MOST`]. A type past it is split by concern (the manager's views of its
//! core are the pattern).

use std::collections::BTreeMap;
use std::path::Path;

/// The most inherent methods one type may have.
const MOST: usize = 30;

/// Types past [`MOST`] for now, each with its crate and why; the test fails
/// too when one of them is back within it (then it leaves this list).
const OVER: [(&str, &str, &str); 2] = [
    (
        "host/check",
        "Run",
        "plugin check's cases, one method each: a table of cases",
    ),
    (
        "tests",
        "Cluster",
        "the test harness's cluster: a server, agents and plugins driven by tests",
    ),
];

/// Each type's inherent method count over the files of `src`.
fn counts(src: &Path) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for file in super::rust_files(src) {
        let text = super::code_only(&std::fs::read_to_string(&file).unwrap_or_default());
        let mut current: Option<String> = None;
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("impl") {
                // `impl Type {`, `impl<T> Type<T> {`, `impl Type<'_> {`; not `impl Trait for Type`.
                let head = rest.trim_end().trim_end_matches('{').trim();
                let head = match head.strip_prefix('<') {
                    Some(generic) => generic.split_once('>').map_or("", |(_, rest)| rest).trim(),
                    None => head,
                };
                current = (!head.contains(" for ") && rest.trim_end().ends_with('{'))
                    .then(|| head.split('<').next().unwrap_or(head).trim().to_string())
                    .filter(|name| !name.is_empty());
            } else if line.starts_with('}') {
                current = None;
            } else if let Some(name) = &current {
                let item = line.trim_start();
                let indent = line.len() - item.len();
                let item = ["pub(crate) ", "pub(super) ", "pub "]
                    .iter()
                    .find_map(|p| item.strip_prefix(p))
                    .unwrap_or(item);
                let item = item.strip_prefix("async ").unwrap_or(item);
                let item = item.strip_prefix("const ").unwrap_or(item);
                if indent == 4 && item.starts_with("fn ") {
                    *counts.entry(name.clone()).or_insert(0) += 1;
                }
            }
        }
    }
    counts
}

#[test]
fn no_type_has_more_than_thirty_methods() {
    let mut over = Vec::new();
    for member in super::members() {
        for (name, n) in counts(&member.join("src")) {
            let crate_dir = member
                .strip_prefix(super::root())
                .unwrap_or(&member)
                .display()
                .to_string();
            let excused = OVER.iter().any(|(c, t, _)| *c == crate_dir && *t == name);
            if n > MOST && !excused {
                over.push(format!("{crate_dir}: {name} has {n} methods"));
            }
            if n <= MOST && excused {
                over.push(format!(
                    "{crate_dir}: {name} has {n} methods now: take it off the OVER list"
                ));
            }
        }
    }
    assert!(
        over.is_empty(),
        "split these by concern (at most {MOST} each):\n{}",
        over.join("\n")
    );
}

#[test]
fn methods_are_counted_per_type_over_every_block_and_trait_impls_aside() {
    let dir = std::env::temp_dir().join(format!("berth-tidy-methods-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let block = |n: usize| {
        (0..n)
            .map(|i| format!("    pub async fn f{i}(&self) {{}}\n"))
            .collect::<String>()
    };
    std::fs::write(
        dir.join("a.rs"),
        format!(
            "//! A.\nimpl Big {{\n{}}}\nimpl Clone for Big {{\n{}}}\n",
            block(20),
            block(5)
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("b.rs"),
        format!("//! B.\nimpl<'a> Big<'a> {{\n{}}}\n", block(11)),
    )
    .unwrap();
    let found = counts(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(found.get("Big"), Some(&31));
    assert!(found["Big"] > MOST, "the check fails on such a type");
}
