//! `berth policy new --lang go`: a Go module built with Go's own toolchain
//! (`GOOS=wasip1 -buildmode=c-shared`) and made a component by `berth
//! policy component`, through a Makefile. The SDK travels with the project
//! (`sdk/`, module `berth.dev/policy` through a `replace`), so building
//! needs no module proxy.

use berth::policy::Decision;

use crate::commands::policy::new::{File, cases, file, fill, shown, wit_files};

/// The Go SDK, path inside `sdk/` and text.
const SDK: &[(&str, &str)] = &[
    ("go.mod", include_str!("../../../../../../guests/go/sdk/go.mod")),
    (
        "types.go",
        include_str!("../../../../../../guests/go/sdk/types.go"),
    ),
    (
        "enums.go",
        include_str!("../../../../../../guests/go/sdk/enums.go"),
    ),
    (
        "helpers.go",
        include_str!("../../../../../../guests/go/sdk/helpers.go"),
    ),
    (
        "helpers_test.go",
        include_str!("../../../../../../guests/go/sdk/helpers_test.go"),
    ),
    (
        "columns.go",
        include_str!("../../../../../../guests/go/sdk/columns.go"),
    ),
    (
        "internal/abi/abi.go",
        include_str!("../../../../../../guests/go/sdk/internal/abi/abi.go"),
    ),
    (
        "internal/abi/contract.go",
        include_str!("../../../../../../guests/go/sdk/internal/abi/contract.go"),
    ),
    (
        "naming/naming.go",
        include_str!("../../../../../../guests/go/sdk/naming/naming.go"),
    ),
    (
        "naming/export.go",
        include_str!("../../../../../../guests/go/sdk/naming/export.go"),
    ),
    (
        "placement/placement.go",
        include_str!("../../../../../../guests/go/sdk/placement/placement.go"),
    ),
    (
        "placement/export.go",
        include_str!("../../../../../../guests/go/sdk/placement/export.go"),
    ),
    (
        "retry/retry.go",
        include_str!("../../../../../../guests/go/sdk/retry/retry.go"),
    ),
    (
        "retry/export.go",
        include_str!("../../../../../../guests/go/sdk/retry/export.go"),
    ),
    (
        "admission_types.go",
        include_str!("../../../../../../guests/go/sdk/admission_types.go"),
    ),
    (
        "admission/admission.go",
        include_str!("../../../../../../guests/go/sdk/admission/admission.go"),
    ),
    (
        "admission/export.go",
        include_str!("../../../../../../guests/go/sdk/admission/export.go"),
    ),
];

fn source(d: Decision) -> &'static str {
    match d {
        Decision::Naming => include_str!("../../../../templates/policy/go/naming.go"),
        Decision::Placement => include_str!("../../../../templates/policy/go/placement.go"),
        Decision::Retry => include_str!("../../../../templates/policy/go/retry.go"),
        // The sample's, as in the other languages.
        Decision::Admission => include_str!("../../../../../../guests/go/admission/admission.go"),
    }
}

fn go_mod(name: &str) -> String {
    format!(
        "module {name}\n\ngo 1.24\n\nrequire berth.dev/policy v0.0.0\n\nreplace berth.dev/policy => ./sdk\n"
    )
}

pub(super) fn go(name: &str, decisions: &[Decision]) -> Vec<File> {
    let main = format!(
        "// {name}: a Berth policy module serving {}.\n//\n\
         // Each decision's file registers its function in init; main never runs\n\
         // (the module is a library: go build -buildmode=c-shared).\npackage main\n\nfunc main() {{}}\n",
        shown(decisions)
    );
    let mut files = vec![file("main.go", main), file("go.mod", go_mod(name))];
    for d in decisions {
        files.push(file(format!("{}.go", d.interface()), source(*d)));
    }
    files.extend([
        file(
            "Makefile",
            fill(
                include_str!("../../../../templates/policy/go/Makefile"),
                name,
                decisions,
            ),
        ),
        file(
            "README.md",
            fill(
                include_str!("../../../../templates/policy/go/README.md"),
                name,
                decisions,
            ),
        ),
        file(
            ".gitignore",
            include_str!("../../../../templates/policy/go/gitignore"),
        ),
        file("cases.toml", cases(decisions)),
    ]);
    files.extend(SDK.iter().map(|(path, text)| file(format!("sdk/{path}"), *text)));
    files.extend(wit_files(decisions));
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_go_project_carries_the_whole_sdk_and_only_the_decisions_asked_for() {
        let sdk = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../guests/go/sdk");
        let mut on_disk = Vec::new();
        let mut dirs = vec![sdk.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else {
                    on_disk.push(path.strip_prefix(&sdk).unwrap().to_string_lossy().into_owned());
                }
            }
        }
        on_disk.sort();
        let mut carried: Vec<String> = SDK.iter().map(|(p, _)| p.to_string()).collect();
        carried.sort();
        assert_eq!(
            carried, on_disk,
            "every file of guests/go/sdk goes into a project"
        );

        let files = go("p", &[Decision::Naming, Decision::Retry]);
        let find = |p: &str| &files.iter().find(|f| f.path == p).unwrap().text;
        assert!(find("go.mod").contains("replace berth.dev/policy => ./sdk"));
        assert!(files.iter().all(|f| f.path != "placement.go"));
        assert!(find("retry.go").contains("retry.Export(classify)"));
        assert!(find("Makefile").contains("--wit wit --world module --to p.wasm"));
        assert!(find("wit/module.wit").contains("export retry;"));
        assert!(!find("README.md").contains('{'), "{}", find("README.md"));
    }
}
