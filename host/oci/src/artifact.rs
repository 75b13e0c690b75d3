//! The WebAssembly OCI artifact (CNCF TAG-Runtime): an image manifest whose
//! config is `application/vnd.wasm.config.v0+json` (architecture `wasm`,
//! os `wasip2`, the layers' digests, the component's imports and exports)
//! and whose one layer is the component, `application/wasm`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{Digest, OciError};

pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
pub const LAYER_MEDIA_TYPE: &str = "application/wasm";
/// An OCI 1.1 artifact's empty config (what `oras push --artifact-type` writes).
pub const EMPTY_CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.empty.v1+json";
/// The most a manifest or a config may weigh.
pub(crate) const DOCUMENT_MAX: usize = 4 << 20;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Descriptor {
    #[serde(rename = "mediaType")]
    pub media_type: String,
    pub digest: String,
    pub size: u64,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Manifest {
    #[serde(rename = "schemaVersion")]
    pub schema_version: u32,
    #[serde(rename = "mediaType", default)]
    pub media_type: Option<String>,
    /// An OCI 1.1 artifact's type (with an empty config).
    #[serde(rename = "artifactType", default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    pub config: Descriptor,
    pub layers: Vec<Descriptor>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// What the config says of the component: its world's imports and exports.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Component {
    pub exports: Vec<String>,
    pub imports: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct WasmConfig {
    created: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    author: Option<String>,
    architecture: String,
    os: String,
    #[serde(rename = "layerDigests")]
    layer_digests: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    component: Option<Component>,
}

/// The artifact's creation time: `SOURCE_DATE_EPOCH` (the reproducible-builds
/// convention) when set, else the Unix epoch, never the clock. So the same
/// module packs to the same manifest digest every time, and a digest
/// pinned or signed for it holds for every push of it.
fn created_time() -> String {
    let seconds = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(0);
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs(seconds))
        .to_string()
}

/// A component packed as the artifact: (config, manifest) documents.
pub(crate) fn pack(module: &[u8], component: Component, title: Option<&str>) -> (Vec<u8>, Vec<u8>) {
    let layer = Digest::of(module);
    let created = created_time();
    let config = WasmConfig {
        created: created.clone(),
        author: None,
        architecture: "wasm".into(),
        os: "wasip2".into(),
        layer_digests: vec![layer.to_string()],
        component: Some(component),
    };
    let config = serde_json::to_vec(&config).expect("a config serializes");
    let mut layer_annotations = BTreeMap::new();
    if let Some(title) = title {
        layer_annotations.insert("org.opencontainers.image.title".to_string(), title.to_string());
    }
    let manifest = Manifest {
        schema_version: 2,
        media_type: Some(MANIFEST_MEDIA_TYPE.into()),
        config: Descriptor {
            media_type: WASM_CONFIG_MEDIA_TYPE.into(),
            digest: Digest::of(&config).to_string(),
            size: config.len() as u64,
            annotations: BTreeMap::new(),
        },
        layers: vec![Descriptor {
            media_type: LAYER_MEDIA_TYPE.into(),
            digest: layer.to_string(),
            size: module.len() as u64,
            annotations: layer_annotations,
        }],
        annotations: BTreeMap::from([("org.opencontainers.image.created".to_string(), created)]),
        artifact_type: None,
    };
    let manifest = serde_json::to_vec(&manifest).expect("a manifest serializes");
    (config, manifest)
}

/// The one component layer of a manifest (its digest and size), if the
/// manifest is a WebAssembly artifact.
pub(crate) fn module_layer(at: &str, manifest: &[u8]) -> Result<(Digest, u64), OciError> {
    let bad = |why: String| OciError::Artifact {
        at: at.to_string(),
        why,
    };
    let m: Manifest =
        serde_json::from_slice(manifest).map_err(|e| bad(format!("its manifest does not parse: {e}")))?;
    if m.schema_version != 2 {
        return Err(bad(format!("schemaVersion {}", m.schema_version)));
    }
    if let Some(t) = m.media_type.as_deref().filter(|t| *t != MANIFEST_MEDIA_TYPE) {
        return Err(bad(format!("a manifest of type {t}")));
    }
    // An OCI 1.1 artifact (a type, an empty config) whose one layer is a
    // component: its bytes are checked to be one when pulled.
    let artifact = m.artifact_type.is_some() && m.config.media_type == EMPTY_CONFIG_MEDIA_TYPE;
    if m.config.media_type != WASM_CONFIG_MEDIA_TYPE && !artifact {
        return Err(bad(format!(
            "its config is {}, not {WASM_CONFIG_MEDIA_TYPE} (nor an OCI 1.1 artifact's empty config with an artifactType)",
            m.config.media_type
        )));
    }
    match &m.layers[..] {
        [layer] if layer.media_type == LAYER_MEDIA_TYPE || artifact => {
            Ok((Digest::parse(&layer.digest)?, layer.size))
        }
        [layer] => Err(bad(format!(
            "its layer is {}, not {LAYER_MEDIA_TYPE}",
            layer.media_type
        ))),
        layers => Err(bad(format!("{} layers, where a module has one", layers.len()))),
    }
}

/// The config's digest and size, as the manifest names it.
pub(crate) fn config_of(manifest: &[u8]) -> Option<(Digest, u64)> {
    let m: Manifest = serde_json::from_slice(manifest).ok()?;
    Some((Digest::parse(&m.config.digest).ok()?, m.config.size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packed_module_is_one_wasm_layer_under_a_wasm_config() {
        let module = b"\0asm\x0d\0\x01\0";
        let component = Component {
            exports: vec!["berth:policy/naming@0.2.0".into()],
            imports: vec![],
            target: None,
        };
        let (config, manifest) = pack(module, component.clone(), Some("naming.wasm"));
        // The same bytes pack the same, whenever they are packed.
        assert_eq!(
            pack(module, component.clone(), Some("naming.wasm")),
            (config.clone(), manifest.clone())
        );
        let (layer, size) = module_layer("here", &manifest).unwrap();
        assert_eq!((layer, size), (Digest::of(module), module.len() as u64));
        let (config_digest, _) = config_of(&manifest).unwrap();
        assert_eq!(config_digest, Digest::of(&config));
        let c: serde_json::Value = serde_json::from_slice(&config).unwrap();
        if std::env::var_os("SOURCE_DATE_EPOCH").is_none() {
            assert_eq!(c["created"], "1970-01-01T00:00:00Z", "not the clock's time");
        }
        assert_eq!(c["architecture"], "wasm");
        assert_eq!(c["os"], "wasip2");
        assert_eq!(c["layerDigests"][0], Digest::of(module).to_string());
        assert_eq!(c["component"]["exports"][0], "berth:policy/naming@0.2.0");

        // A container image is not a module.
        let mut m: serde_json::Value = serde_json::from_slice(&manifest).unwrap();
        m["config"]["mediaType"] = "application/vnd.oci.image.config.v1+json".into();
        let err = module_layer("r/x", &serde_json::to_vec(&m).unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a WebAssembly policy artifact"), "{err}");
    }
}
