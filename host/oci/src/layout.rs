//! The OCI image layout: a directory holding blobs by digest and an index,
//! for sites without a registry (`berth policy pull REF --output DIR`, then
//! carried over). Written so that `oras` and `skopeo` read it too.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::artifact::{self, DOCUMENT_MAX, MANIFEST_MEDIA_TYPE};
use crate::{Digest, OciError, Pulled};

const INDEX_MEDIA_TYPE: &str = "application/vnd.oci.image.index.v1+json";
const REF_NAME: &str = "org.opencontainers.image.ref.name";

#[derive(Serialize, Deserialize)]
struct Index {
    #[serde(rename = "schemaVersion")]
    schema_version: u32,
    #[serde(rename = "mediaType", default)]
    media_type: Option<String>,
    #[serde(default)]
    manifests: Vec<artifact::Descriptor>,
}

fn blob_path(dir: &Path, digest: &Digest) -> PathBuf {
    // `hex` is 64 hex digits, checked when the digest was made.
    dir.join("blobs").join("sha256").join(digest.hex())
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), OciError> {
    write_whole(path, bytes).map_err(|e| OciError::file(path, e))
}

/// Writes `bytes` to `path` whole or not at all: into a new file of this
/// write's own name beside it (created exclusively, so never through a link
/// planted there), synced, then renamed into place.
pub fn write_whole(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{}-{n}.partial", std::process::id()));
    let tmp = path.with_file_name(name);
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Adds a pulled module to the layout in `dir` (made if missing), named by
/// `tag` in the index when given. Blobs already there are kept.
pub fn store(dir: &Path, pulled: &Pulled, tag: Option<&str>) -> Result<(), OciError> {
    let blobs = dir.join("blobs").join("sha256");
    std::fs::create_dir_all(&blobs).map_err(|e| OciError::file(&blobs, e))?;
    write(&dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#)?;
    let manifest_digest = Digest::of(&pulled.manifest);
    let config_digest = Digest::of(&pulled.config);
    for (digest, bytes) in [
        (&manifest_digest, &pulled.manifest),
        (&config_digest, &pulled.config),
        (&pulled.layer, &pulled.module),
    ] {
        let path = blob_path(dir, digest);
        if !path.exists() {
            write(&path, bytes)?;
        }
    }
    let index_path = dir.join("index.json");
    let mut index = match std::fs::read(&index_path) {
        Ok(bytes) => serde_json::from_slice::<Index>(&bytes)
            .map_err(|e| OciError::file(&index_path, format!("not an OCI index: {e}")))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Index {
            schema_version: 2,
            media_type: Some(INDEX_MEDIA_TYPE.into()),
            manifests: vec![],
        },
        Err(e) => return Err(OciError::file(&index_path, e)),
    };
    // One entry per manifest; a tag names one manifest.
    index.manifests.retain(|m| {
        m.digest != manifest_digest.as_str()
            && tag.is_none_or(|t| m.annotations.get(REF_NAME).map(String::as_str) != Some(t))
    });
    let mut entry = artifact::Descriptor {
        media_type: MANIFEST_MEDIA_TYPE.into(),
        digest: manifest_digest.to_string(),
        size: pulled.manifest.len() as u64,
        annotations: Default::default(),
    };
    if let Some(t) = tag {
        entry.annotations.insert(REF_NAME.into(), t.to_string());
    }
    index.manifests.push(entry);
    write(
        &index_path,
        &serde_json::to_vec_pretty(&index).expect("an index serializes"),
    )
}

/// The module of manifest `digest` in the layout in `dir`, every blob
/// checked against its digest.
pub fn load(dir: &Path, digest: &Digest) -> Result<bytes::Bytes, OciError> {
    let path = module_path(dir, digest)?;
    std::fs::read(&path)
        .map(Into::into)
        .map_err(|e| OciError::file(&path, e))
}

/// Where module `reference` (pinned by digest) is on disk: in the layout in
/// `cache` if it is there and checks, else pulled from its registry,
/// checked and added. With `trust`, its signatures are checked too (those
/// kept in the cache, else the registry's, kept once they pass), and the
/// trusted key's file that signed it comes back beside the path. Nothing
/// unchecked is ever returned.
pub async fn fetch(
    cache: &Path,
    module: &str,
    reference: &crate::Reference,
    access: &crate::Access,
    trust: &crate::Trust,
) -> Result<(PathBuf, Option<PathBuf>), OciError> {
    let Some(digest) = &reference.digest else {
        return Err(OciError::Reference(
            reference.to_string(),
            "pin it by digest (@sha256:…); `berth policy pull` prints it",
        ));
    };
    let cached = module_path(cache, digest).ok();
    let registry = || crate::Registry::new(reference, access);
    let path = match cached {
        Some(path) => path,
        None => {
            let pulled = registry()?.pull(reference, crate::MODULE_MAX).await?;
            // Signatures before the module is kept: a refused module never enters the cache.
            let mut signed_by = None;
            if trust.required || !trust.keys.is_empty() {
                let verified = registry()?.verify(module, reference, digest, trust).await?;
                signed_by = verified.as_ref().map(|v| v.key.path.clone());
                keep_signature(cache, module, digest, verified)?;
            }
            store(cache, &pulled, None)?;
            return Ok((module_path(cache, digest)?, signed_by));
        }
    };
    if !trust.required && trust.keys.is_empty() {
        return Ok((path, None));
    }
    let kept = kept_signatures(cache, digest);
    let kept_key = match trust.check(module, digest, &kept) {
        Ok(Some(key)) => Some(key.path.clone()),
        _ => kept_bundle(cache, digest).and_then(|bundle| {
            let manifest = read_blob(cache, digest, DOCUMENT_MAX, "the manifest").ok()?;
            crate::bundle::judge(trust, digest, &manifest, &bundle)
                .ok()
                .map(|key| key.path.clone())
        }),
    };
    if kept_key.is_some() {
        return Ok((path, kept_key));
    }
    // Perhaps signed since it was fetched: the registry has the last word.
    let verified = registry()?.verify(module, reference, digest, trust).await?;
    let signed_by = verified.as_ref().map(|v| v.key.path.clone());
    keep_signature(cache, module, digest, verified)?;
    Ok((path, signed_by))
}

fn signatures_path(cache: &Path, digest: &Digest) -> PathBuf {
    cache.join("signatures").join(format!("{}.json", digest.hex()))
}

/// The most a kept signature file is read: one signature, its payload
/// at most 64 KiB before base64.
const KEPT_MAX: u64 = 256 << 10;

fn kept_signatures(cache: &Path, digest: &Digest) -> Vec<crate::Signature> {
    let path = signatures_path(cache, digest);
    if std::fs::metadata(&path).map_or(true, |m| m.len() > KEPT_MAX) {
        return Vec::new();
    }
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Keeps the one signature that passed beside the module (nothing when
/// none did and none is required: the registry is asked again next time).
fn keep_signature(
    cache: &Path,
    module: &str,
    digest: &Digest,
    verified: Option<crate::signature::Verified<'_>>,
) -> Result<(), OciError> {
    let Some(verified) = verified else {
        return Ok(());
    };
    tracing::info!(%module, %digest, key = %verified.key.path.display(), "policy module signature checked");
    let dir = cache.join("signatures");
    std::fs::create_dir_all(&dir).map_err(|e| OciError::file(&dir, e))?;
    match verified.kept {
        crate::signature::Kept::Simple(signature) => write(
            &signatures_path(cache, digest),
            &serde_json::to_vec(&[signature]).expect("signatures serialize"),
        ),
        crate::signature::Kept::Bundle(bundle) => write(&bundle_path(cache, digest), &bundle),
    }
}

fn bundle_path(cache: &Path, digest: &Digest) -> PathBuf {
    cache
        .join("signatures")
        .join(format!("{}.bundle.json", digest.hex()))
}

/// The Sigstore bundle kept beside a module, if one is (bounded).
fn kept_bundle(cache: &Path, digest: &Digest) -> Option<Vec<u8>> {
    let path = bundle_path(cache, digest);
    if std::fs::metadata(&path).map_or(true, |m| m.len() > KEPT_MAX) {
        return None;
    }
    std::fs::read(path).ok()
}

/// The module file of manifest `digest` in the layout, once checked.
fn module_path(dir: &Path, digest: &Digest) -> Result<PathBuf, OciError> {
    let manifest = read_blob(dir, digest, DOCUMENT_MAX, "the manifest")?;
    let at = format!("{}@{digest}", dir.display());
    let (layer, _) = artifact::module_layer(&at, &manifest)?;
    read_blob(dir, &layer, crate::MODULE_MAX, "the module")?;
    Ok(blob_path(dir, &layer))
}

fn read_blob(dir: &Path, d: &Digest, limit: usize, what: &'static str) -> Result<Vec<u8>, OciError> {
    let path = blob_path(dir, d);
    let len = std::fs::metadata(&path)
        .map_err(|e| OciError::file(&path, e))?
        .len();
    if len > limit as u64 {
        return Err(OciError::file(
            &path,
            format!("{what} is larger than {limit} bytes"),
        ));
    }
    let bytes = std::fs::read(&path).map_err(|e| OciError::file(&path, e))?;
    d.check(what, &format!("{}@{d}", dir.display()), &bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Component, Reference};

    #[test]
    fn a_module_stored_in_a_layout_loads_back_checked() {
        let dir = tempfile::tempdir().unwrap();
        let module = bytes::Bytes::from_static(b"\0asm\x0d\0\x01\0 policy");
        let (config, manifest) = artifact::pack(&module, Component::default(), None);
        let digest = Digest::of(&manifest);
        let pulled = Pulled {
            reference: Reference::parse("oci://r.io/a:v1")
                .unwrap()
                .pinned(digest.clone()),
            manifest: manifest.into(),
            config: config.into(),
            module: module.clone(),
            layer: Digest::of(&module),
        };
        store(dir.path(), &pulled, Some("v1")).unwrap();
        store(dir.path(), &pulled, Some("v1")).unwrap();
        let index: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("index.json")).unwrap()).unwrap();
        assert_eq!(
            index["manifests"].as_array().unwrap().len(),
            1,
            "stored twice, listed once"
        );
        assert_eq!(index["manifests"][0]["annotations"][REF_NAME], "v1");
        assert_eq!(load(dir.path(), &digest).unwrap(), module);

        // A blob changed on disk is refused, not used.
        std::fs::write(blob_path(dir.path(), &pulled.layer), b"\0asm tampered").unwrap();
        let err = load(dir.path(), &digest).unwrap_err().to_string();
        assert!(err.contains("does not match its digest"), "{err}");
    }
}
