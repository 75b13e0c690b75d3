//! `berth policy new`: a policy project of its own, in Rust, Python,
//! JavaScript, TypeScript or Go, that builds and passes its cases as generated.
//! The templates, the WIT package and the SDKs are built into the binary,
//! so a project can be made and built anywhere: a Rust project carries the
//! SDK (`berth-guest/`) with it, unless it is pointed at Berth's source
//! (`--sdk-path`, `--sdk-git`); the others carry theirs in `sdk/`.

mod go;
mod js;

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use berth::policy::{Decision, PACKAGE_VERSION};
use clap::{Args, ValueEnum};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Lang {
    Rust,
    Python,
    /// JavaScript, built with componentize-qjs (QuickJS) from npm.
    Js,
    /// TypeScript: tsc, then as JavaScript.
    Ts,
    /// Go 1.24 or later with its own toolchain (GOOS=wasip1), made a
    /// component by `berth policy component`.
    Go,
}

impl Lang {
    pub fn name(self) -> &'static str {
        match self {
            Lang::Rust => "Rust",
            Lang::Python => "Python",
            Lang::Js => "JavaScript",
            Lang::Ts => "TypeScript",
            Lang::Go => "Go",
        }
    }
}

#[derive(Debug, Args)]
pub struct NewArgs {
    /// The project's name: lower-case letters, digits and '-', starting with
    /// a letter (it names the crate or the component file).
    pub name: String,
    /// The language to write the policy in.
    #[arg(long, value_enum)]
    pub lang: Lang,
    /// The decisions the module serves, separated by ','.
    #[arg(long, value_delimiter = ',', default_value = "naming,placement,retry")]
    pub decisions: Vec<Decision>,
    /// Where to make the project; it must not exist or be empty [default: ./NAME].
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Rust: the berth-guest SDK (guests/sdk in Berth's source) as a path
    /// dependency [default: the SDK built into this berth, written into the
    /// project as berth-guest/].
    #[arg(long, conflicts_with = "sdk_git")]
    pub sdk_path: Option<PathBuf>,
    /// Rust: the berth-guest SDK from a git repository of Berth's source.
    #[arg(long)]
    pub sdk_git: Option<String>,
    /// With --sdk-git: the commit, tag or branch to build against.
    #[arg(long, requires = "sdk_git")]
    pub sdk_rev: Option<String>,
}

const COMPONENTIZE_PY: &str = include_str!("../../../../../../guests/python/componentize-py.version");

/// A file of the project: its path inside it, its text, and whether it runs.
pub(super) struct File {
    pub path: String,
    pub text: String,
    pub executable: bool,
}

pub(super) fn file(path: impl Into<String>, text: impl Into<String>) -> File {
    File {
        path: path.into(),
        text: text.into(),
        executable: false,
    }
}

pub fn run(args: NewArgs) -> anyhow::Result<()> {
    check_name(&args.name)?;
    let mut decisions = args.decisions.clone();
    decisions.sort();
    decisions.dedup();
    let dir = args.dir.clone().unwrap_or_else(|| PathBuf::from(&args.name));
    let files = match args.lang {
        Lang::Rust => {
            let mut files = rust(&args.name, &decisions, &sdk_dependency(&args)?);
            if args.sdk_path.is_none() && args.sdk_git.is_none() {
                files.extend(
                    crate::commands::policy::sdk::files()
                        .into_iter()
                        .map(|f| file(format!("berth-guest/{}", f.path), f.text)),
                );
            }
            files
        }
        Lang::Python => python(&args.name, &decisions),
        Lang::Js => crate::commands::policy::new::js::js(&args.name, &decisions, false),
        Lang::Ts => crate::commands::policy::new::js::js(&args.name, &decisions, true),
        Lang::Go => crate::commands::policy::new::go::go(&args.name, &decisions),
    };
    write_project(&dir, &files)?;
    println!(
        "made {} ({}, serving {})",
        dir.display(),
        args.lang.name(),
        shown(&decisions)
    );
    let next = match args.lang {
        Lang::Rust => format!(
            "cargo build --release --target wasm32-wasip2 && berth policy test target/wasm32-wasip2/release/{}.wasm cases.toml",
            args.name.replace('-', "_")
        ),
        Lang::Python => format!("./build.sh && berth policy test {}.wasm cases.toml", args.name),
        Lang::Js | Lang::Ts => "npm install && npm run build && npm test".to_string(),
        Lang::Go => "make test".to_string(),
    };
    println!("next: cd {} && {next}", dir.display());
    Ok(())
}

fn check_name(name: &str) -> anyhow::Result<()> {
    let ok = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !ok {
        bail!(
            "{name:?} is not a project name: use 1 to 64 lower-case letters, digits and '-', \
             starting with a letter and not ending with '-'"
        );
    }
    Ok(())
}

pub(super) fn shown(decisions: &[Decision]) -> String {
    let names: Vec<&str> = decisions.iter().map(|d| d.interface()).collect();
    names.join(", ")
}

/// `berth-guest`'s entry in the project's Cargo.toml: Berth's source when
/// named, else the SDK vendored into the project (`berth-guest/`).
fn sdk_dependency(args: &NewArgs) -> anyhow::Result<String> {
    if let Some(url) = &args.sdk_git {
        return Ok(match &args.sdk_rev {
            Some(rev) => format!("{{ git = {}, rev = {} }}", toml_string(url), toml_string(rev)),
            None => format!("{{ git = {} }}", toml_string(url)),
        });
    }
    let Some(path) = args.sdk_path.clone() else {
        return Ok("{ path = \"berth-guest\" }".into());
    };
    let path = path.canonicalize().with_context(|| {
        format!(
            "the berth-guest SDK is not at {}; --sdk-path names Berth's guests/sdk",
            path.display()
        )
    })?;
    if !path.join("Cargo.toml").is_file() {
        bail!(
            "{} holds no Cargo.toml; --sdk-path must name Berth's guests/sdk",
            path.display()
        );
    }
    Ok(format!("{{ path = {} }}", toml_string(&path.to_string_lossy())))
}

fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

pub(super) fn fill(template: &str, name: &str, decisions: &[Decision]) -> String {
    template
        .replace("{name}", name)
        .replace("{crate}", &name.replace('-', "_"))
        .replace("{decisions}", &shown(decisions))
        .replace("{componentize_py}", COMPONENTIZE_PY.trim())
}

/// The case file: each decision's cases, which name their decision.
pub(super) fn cases(decisions: &[Decision]) -> String {
    let mut text = String::from(
        "# Inputs and the answers expected: berth policy test <module .wasm> cases.toml\n\
         # The format is documented in the Berth book, Writing a policy.\n",
    );
    for d in decisions {
        text.push('\n');
        text.push_str(match d {
            Decision::Naming => include_str!("../../../../templates/policy/cases/naming.toml"),
            Decision::Placement => include_str!("../../../../templates/policy/cases/placement.toml"),
            Decision::Retry => include_str!("../../../../templates/policy/cases/retry.toml"),
            Decision::Admission => include_str!("../../../../../../guests/admission/cases.toml"),
        });
    }
    text
}

fn rust(name: &str, decisions: &[Decision], sdk: &str) -> Vec<File> {
    let mut lib = format!(
        "//! {name}: a Berth policy module serving {}.\n\n",
        shown(decisions)
    );
    for d in decisions {
        lib.push_str(&format!("mod {};\n", d.interface()));
    }
    lib.push_str("\n/// The policy: one type implementing each decision it serves.\npub struct Policy;\n\n");
    for d in decisions {
        lib.push_str(&format!("berth_guest::export_{}!(Policy);\n", d.interface()));
    }
    let mut files = vec![
        file(
            "Cargo.toml",
            fill(
                include_str!("../../../../templates/policy/rust/Cargo.toml"),
                name,
                decisions,
            )
            .replace("{sdk}", sdk),
        ),
        file(
            ".cargo/config.toml",
            include_str!("../../../../templates/policy/rust/config.toml"),
        ),
        file(
            "README.md",
            fill(
                include_str!("../../../../templates/policy/rust/README.md"),
                name,
                decisions,
            ),
        ),
        file(
            ".gitignore",
            include_str!("../../../../templates/policy/rust/gitignore"),
        ),
        file("cases.toml", cases(decisions)),
        file("src/lib.rs", lib),
    ];
    for d in decisions {
        let source = match d {
            Decision::Naming => include_str!("../../../../templates/policy/rust/naming.rs"),
            Decision::Placement => include_str!("../../../../templates/policy/rust/placement.rs"),
            Decision::Retry => include_str!("../../../../templates/policy/rust/retry.rs"),
            Decision::Admission => include_str!("../../../../templates/policy/rust/admission.rs"),
        };
        files.push(file(format!("src/{}.rs", d.interface()), source));
    }
    files
}

fn python(name: &str, decisions: &[Decision]) -> Vec<File> {
    let mut app = format!(
        "\"\"\"{name}: a Berth policy module serving {}.\"\"\"\n\nfrom wit_world import exports\n",
        shown(decisions)
    );
    for d in decisions {
        app.push_str("\n\n");
        app.push_str(match d {
            Decision::Naming => include_str!("../../../../templates/policy/python/naming.py"),
            Decision::Placement => include_str!("../../../../templates/policy/python/placement.py"),
            Decision::Retry => include_str!("../../../../templates/policy/python/retry.py"),
            // The sample is the scaffold's module, as in Rust.
            Decision::Admission => include_str!("../../../../../../guests/python/admission/app.py"),
        });
    }
    let mut build = file(
        "build.sh",
        fill(
            include_str!("../../../../templates/policy/python/build.sh"),
            name,
            decisions,
        ),
    );
    build.executable = true;
    let mut files = vec![
        file("app.py", app),
        file("cases.toml", cases(decisions)),
        build,
        file(
            "README.md",
            fill(
                include_str!("../../../../templates/policy/python/README.md"),
                name,
                decisions,
            ),
        ),
        file(
            ".gitignore",
            include_str!("../../../../templates/policy/python/gitignore"),
        ),
        file(
            "sdk/berth_policy/__init__.py",
            include_str!("../../../../../../guests/python/sdk/berth_policy/__init__.py"),
        ),
        file(
            "sdk/berth_policy/cases.py",
            include_str!("../../../../../../guests/python/sdk/berth_policy/cases.py"),
        ),
    ];
    files.extend(wit_files(decisions));
    files
}

/// The contract, and `wit/module.wit`: a world exporting the decisions asked for.
pub(super) fn wit_files(decisions: &[Decision]) -> Vec<File> {
    let mut world = format!(
        "package berth:policy@{PACKAGE_VERSION};\n\n/// The decisions this module serves: Berth reads a module's exports.\nworld module {{\n",
    );
    for d in decisions {
        world.push_str(&format!("    export {};\n", d.interface()));
    }
    world.push_str("}\n");
    vec![
        file("wit/types.wit", include_str!("../../../../../../wit/types.wit")),
        file("wit/naming.wit", include_str!("../../../../../../wit/naming.wit")),
        file(
            "wit/placement.wit",
            include_str!("../../../../../../wit/placement.wit"),
        ),
        file("wit/retry.wit", include_str!("../../../../../../wit/retry.wit")),
        file(
            "wit/admission.wit",
            include_str!("../../../../../../wit/admission.wit"),
        ),
        file("wit/module.wit", world),
    ]
}

/// Writes the project beside its final place, then renames it there: an
/// interrupted run leaves no half project.
fn write_project(dir: &Path, files: &[File]) -> anyhow::Result<()> {
    if dir.exists() {
        let empty = dir.read_dir().map(|mut d| d.next().is_none()).unwrap_or(false);
        if !empty {
            bail!("{} already exists and is not an empty directory", dir.display());
        }
    }
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).with_context(|| format!("creating {}", parent.display()))?;
    let staging = parent.join(format!(".berth-new-{}", std::process::id()));
    let written = write_files(&staging, files).and_then(|()| {
        std::fs::rename(&staging, dir).with_context(|| format!("moving the project to {}", dir.display()))
    });
    if written.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    written
}

fn write_files(root: &Path, files: &[File]) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    for f in files {
        let path = root.join(&f.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, &f.text).with_context(|| format!("writing {}", path.display()))?;
        if f.executable {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_must_suit_a_crate_and_a_file() {
        for good in ["a", "team-a-naming", "p2"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", "A", "2p", "a_b", "a-", "a/b", "../x", &"a".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_project_serves_only_the_decisions_asked_for() {
        let files = rust("p", &[Decision::Naming, Decision::Retry], "{ path = \"/sdk\" }");
        let find = |p: &str| &files.iter().find(|f| f.path == p).unwrap().text;
        assert!(find("src/lib.rs").contains("export_naming!(Policy)"));
        assert!(!find("src/lib.rs").contains("placement"));
        assert!(find("Cargo.toml").contains("berth-guest = { path = \"/sdk\" }"));
        assert!(!find("cases.toml").contains("decision = \"placement\""));
        assert!(files.iter().all(|f| f.path != "src/placement.rs"));
        let files = python("p", &[Decision::Placement]);
        let find = |p: &str| &files.iter().find(|f| f.path == p).unwrap().text;
        assert!(find("wit/module.wit").contains("export placement;"));
        assert!(!find("wit/module.wit").contains("export naming;"));
        assert!(find("app.py").contains("class Placement("));
        assert!(find("build.sh").contains(&format!("componentize-py=={}", COMPONENTIZE_PY.trim())));
        let files = python("p", &[Decision::Admission]);
        let find = |p: &str| &files.iter().find(|f| f.path == p).unwrap().text;
        assert!(find("wit/module.wit").contains("export admission;"));
        assert!(find("app.py").contains("class Admission(exports.Admission)"));
        assert!(find("cases.toml").contains("decision = \"admission\""));
    }

    #[test]
    fn an_existing_project_is_never_written_over() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("p");
        write_project(&dir, &python("p", &[Decision::Naming])).unwrap();
        assert!(dir.join("build.sh").is_file());
        let err = write_project(&dir, &[file("app.py", "x")]).unwrap_err();
        assert!(err.to_string().contains("not an empty directory"), "{err}");
        assert_ne!(std::fs::read_to_string(dir.join("app.py")).unwrap(), "x");
        // Nothing staged is left beside it.
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1);
    }
}
