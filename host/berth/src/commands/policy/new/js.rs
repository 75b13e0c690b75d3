//! `berth policy new --lang js|ts`: an npm project whose module is built by
//! componentize-qjs (QuickJS, its start-up snapshotted at build time) with
//! no WASI at all; TypeScript is compiled by tsc first. The SDK travels
//! with the project (`sdk/`, `berth-policy` as a `file:` dependency), with
//! the contract's TypeScript types generated from Berth's WIT package.

use berth::policy::Decision;

use crate::commands::policy::new::{File, cases, file, fill, shown, wit_files};

const COMPONENTIZE_QJS: &str = include_str!("../../../../../../guests/js/componentize-qjs.version");
const TYPESCRIPT: &str = include_str!("../../../../../../guests/js/typescript.version");

fn source(d: Decision, typescript: bool) -> &'static str {
    match (d, typescript) {
        (Decision::Naming, false) => include_str!("../../../../templates/policy/js/naming.js"),
        (Decision::Placement, false) => include_str!("../../../../templates/policy/js/placement.js"),
        (Decision::Retry, false) => include_str!("../../../../templates/policy/js/retry.js"),
        (Decision::Naming, true) => include_str!("../../../../templates/policy/ts/naming.ts"),
        (Decision::Placement, true) => include_str!("../../../../templates/policy/ts/placement.ts"),
        (Decision::Retry, true) => include_str!("../../../../templates/policy/ts/retry.ts"),
        // The sample is the scaffold's module, as in Rust and Python.
        (Decision::Admission, false) => include_str!("../../../../../../guests/js/admission/app.js"),
        (Decision::Admission, true) => include_str!("../../../../templates/policy/ts/admission.ts"),
    }
}

/// The project's `package.json`: build and test scripts, the SDK as a
/// `file:` dependency, the tools pinned.
fn manifest(name: &str, decisions: &[Decision], typescript: bool) -> String {
    let entry = if typescript { "dist/app.js" } else { "app.js" };
    let componentize = format!(
        "componentize-qjs --wit wit --world module --js {entry} --module-root . --stub-wasi --sync -o {name}.wasm"
    );
    let build = if typescript {
        format!("tsc && {componentize}")
    } else {
        componentize
    };
    let mut dev = serde_json::Map::new();
    dev.insert("componentize-qjs".into(), COMPONENTIZE_QJS.trim().into());
    if typescript {
        dev.insert("typescript".into(), TYPESCRIPT.trim().into());
    }
    let manifest = serde_json::json!({
        "name": name,
        "version": "0.1.0",
        "private": true,
        "type": "module",
        "description": format!("A Berth policy module serving {}", shown(decisions)),
        "scripts": {
            "build": build,
            "test": format!("berth policy test {name}.wasm cases.toml"),
            "check": format!("berth policy check {name}.wasm"),
        },
        "dependencies": { "berth-policy": "file:sdk" },
        "devDependencies": dev,
    });
    serde_json::to_string_pretty(&manifest).unwrap_or_default() + "\n"
}

pub(super) fn js(name: &str, decisions: &[Decision], typescript: bool) -> Vec<File> {
    let (ext, dir) = if typescript { ("ts", "src/") } else { ("js", "") };
    let mut app = format!(
        "// {name}: a Berth policy module serving {}.\n\n",
        shown(decisions)
    );
    let mut files = Vec::new();
    for d in decisions {
        app.push_str(&format!("export {{ {0} }} from \"./{0}.js\";\n", d.interface()));
        files.push(file(
            format!("{dir}{}.{ext}", d.interface()),
            source(*d, typescript),
        ));
    }
    files.push(file(format!("{dir}app.{ext}"), app));
    let readme = fill(
        include_str!("../../../../templates/policy/js/README.md"),
        name,
        decisions,
    )
    .replace("{language}", if typescript { "TypeScript" } else { "JavaScript" })
    .replace("{componentize_qjs}", COMPONENTIZE_QJS.trim())
    .replace(
        "{typescript_note}",
        &if typescript {
            format!(", TypeScript {}", TYPESCRIPT.trim())
        } else {
            String::new()
        },
    )
    .replace("{source}", if typescript { "src/" } else { "./" })
    .replace("{entry}", if typescript { "src/app.ts" } else { "app.js" });
    files.extend([
        file("package.json", manifest(name, decisions, typescript)),
        file("README.md", readme),
        file(
            ".gitignore",
            include_str!("../../../../templates/policy/js/gitignore"),
        ),
        file("cases.toml", cases(decisions)),
        file(
            "sdk/package.json",
            include_str!("../../../../../../guests/js/sdk/package.json"),
        ),
        file(
            "sdk/index.js",
            include_str!("../../../../../../guests/js/sdk/index.js"),
        ),
        file(
            "sdk/index.d.ts",
            include_str!("../../../../../../guests/js/sdk/index.d.ts"),
        ),
        file(
            "sdk/contract.d.ts",
            include_str!("../../../../../../guests/js/sdk/contract.d.ts"),
        ),
    ]);
    if typescript {
        files.push(file(
            "tsconfig.json",
            include_str!("../../../../templates/policy/ts/tsconfig.json"),
        ));
    }
    files.extend(wit_files(decisions));
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_js_project_exports_only_the_decisions_asked_for_and_pins_its_tools() {
        let files = js("p", &[Decision::Naming, Decision::Retry], false);
        let find = |p: &str| &files.iter().find(|f| f.path == p).unwrap().text;
        assert!(find("app.js").contains("export { naming } from \"./naming.js\";"));
        assert!(!find("app.js").contains("placement"));
        assert!(files.iter().all(|f| f.path != "placement.js"));
        let manifest: serde_json::Value = serde_json::from_str(find("package.json")).unwrap();
        assert_eq!(
            manifest["devDependencies"]["componentize-qjs"],
            COMPONENTIZE_QJS.trim()
        );
        assert!(manifest["devDependencies"]["typescript"].is_null());
        assert!(
            manifest["scripts"]["build"]
                .as_str()
                .unwrap()
                .contains("--stub-wasi")
        );
        assert!(find("wit/module.wit").contains("export retry;"));

        let files = js("p", &[Decision::Placement], true);
        let find = |p: &str| &files.iter().find(|f| f.path == p).unwrap().text;
        assert!(find("src/app.ts").contains("export { placement } from \"./placement.js\";"));
        let manifest: serde_json::Value = serde_json::from_str(find("package.json")).unwrap();
        assert!(
            manifest["scripts"]["build"]
                .as_str()
                .unwrap()
                .starts_with("tsc && ")
        );
        assert_eq!(manifest["devDependencies"]["typescript"], TYPESCRIPT.trim());
        assert!(find("README.md").contains("TypeScript"));
        assert!(!find("README.md").contains('{'), "{}", find("README.md"));
    }
}
