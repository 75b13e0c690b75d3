//! The Rust guest SDK (`berth-guest`) as `berth policy new --lang rust`
//! writes it into a project (`berth-guest/`): its sources and the WIT
//! package it binds, built into this binary, so a project builds with only
//! the installed `berth` and a Rust toolchain — no checkout of Berth's source.

/// One file of the vendored SDK: its path below `berth-guest/`, its text.
pub struct SdkFile {
    pub path: &'static str,
    pub text: String,
}

/// The WIT files the SDK's bindings are generated from (the current release).
pub(super) use berth_component::WIT;

const SOURCES: [(&str, &str); 6] = [
    ("src/lib.rs", include_str!("../../../../../guests/sdk/src/lib.rs")),
    (
        "src/alloc.rs",
        include_str!("../../../../../guests/sdk/src/alloc.rs"),
    ),
    (
        "src/columns.rs",
        include_str!("../../../../../guests/sdk/src/columns.rs"),
    ),
    (
        "src/helpers.rs",
        include_str!("../../../../../guests/sdk/src/helpers.rs"),
    ),
    (
        "src/shared.rs",
        include_str!("../../../../../guests/sdk/src/shared.rs"),
    ),
    (
        "src/testing.rs",
        include_str!("../../../../../guests/sdk/src/testing.rs"),
    ),
];

/// The SDK's manifest as a package of its own (the workspace's settings
/// written out).
fn manifest() -> String {
    format!(
        "[package]\n\
         name = \"berth-guest\"\n\
         version = \"{version}\"\n\
         description = \"Write Berth policy modules in Rust (vendored by `berth policy new`)\"\n\
         edition = \"2024\"\n\
         license = \"Apache-2.0\"\n\
         publish = false\n\n\
         [dependencies]\n\
         wit-bindgen = \"{wit_bindgen}\"\n\n\
         [features]\n\
         default = [\"bump-allocator\"]\n\
         bump-allocator = []\n",
        version = env!("CARGO_PKG_VERSION"),
        wit_bindgen = WIT_BINDGEN,
    )
}

/// wit-bindgen's release the SDK is built and tested with.
const WIT_BINDGEN: &str = "0.61";

/// Every file of the vendored SDK.
pub fn files() -> Vec<SdkFile> {
    let mut out = vec![SdkFile {
        path: "Cargo.toml",
        text: manifest(),
    }];
    for (path, text) in SOURCES {
        // In Berth's source the WIT package is two levels up; here, beside.
        out.push(SdkFile {
            path,
            text: text.replace("path: \"../../wit\"", "path: \"wit\""),
        });
    }
    for (path, text) in WIT {
        out.push(SdkFile {
            path,
            text: text.to_string(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_vendored_sdk_binds_the_wit_beside_it_and_pins_wit_bindgen() {
        let files = super::files();
        let lib = files.iter().find(|f| f.path == "src/lib.rs").unwrap();
        assert!(lib.text.contains("path: \"wit\"") && !lib.text.contains("../../wit"));
        let workspace = include_str!("../../../../../Cargo.toml");
        assert!(
            workspace.contains(&format!("wit-bindgen = \"{}\"", super::WIT_BINDGEN)),
            "the vendored SDK's wit-bindgen is the workspace's"
        );
        let wit_files = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../../wit"))
            .unwrap()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "wit"))
            .count();
        assert_eq!(
            files.iter().filter(|f| f.path.starts_with("wit/")).count(),
            wit_files
        );
    }
}
