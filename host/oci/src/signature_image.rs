//! cosign's signature images in a registry: the image under the tag
//! `sha256-<hex>.sig` beside a module, one layer per signature, read one
//! layer at a time within bounds, and written (a layer added) by `sign`.

use base64::Engine as _;
use bytes::Bytes;

use crate::artifact::{DOCUMENT_MAX, Descriptor, MANIFEST_MEDIA_TYPE, Manifest};
use crate::registry::Call;
use crate::signature::{
    Kept, PAYLOAD_MAX, PAYLOAD_MEDIA_TYPE, Rejected, SIGNATURE_ANNOTATION, SIGNATURE_LAYERS_MAX, Signature,
    SigningKey, Verified, dedup, payload, signature_tag,
};
use crate::{Digest, OciError, Reference, Registry, Trust};

/// The media type of a container image's config: what a signature image has.
const IMAGE_CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";

impl Registry {
    /// The manifest of the image holding `reference`'s signatures, answered
    /// whatever way (404: none yet).
    async fn signature_image(
        &self,
        reference: &Reference,
        tag: &str,
    ) -> Result<crate::http::Response, OciError> {
        self.call_any(Call {
            method: "GET",
            target: self.target(format!("/v2/{}/manifests/{tag}", reference.repository)),
            headers: vec![("Accept", MANIFEST_MEDIA_TYPE.to_string())],
            body: Bytes::new(),
            limit: DOCUMENT_MAX,
            what: format!("the signatures of {reference}"),
        })
        .await
    }

    /// The first signature stored beside manifest `digest` (cosign's
    /// layout) that `trust` accepts, read one layer at a time: junk layers
    /// (too large, unreadable, not signed by a trusted key) are skipped,
    /// at most [`SIGNATURE_LAYERS_MAX`] are read, and reading stops at the
    /// first that passes. `None` when none passed and none is required.
    pub async fn verify<'t>(
        &self,
        module: &str,
        reference: &Reference,
        digest: &Digest,
        trust: &'t Trust,
    ) -> Result<Option<Verified<'t>>, OciError> {
        let mut seen = Vec::new();
        if let Some(verified) = self.verify_simple(reference, digest, trust, &mut seen).await? {
            return Ok(Some(verified));
        }
        // cosign's current format: a bundle attached as a referrer.
        if let Some((key, bundle)) = self.verify_bundles(reference, digest, trust, &mut seen).await? {
            return Ok(Some(Verified {
                key,
                kept: Kept::Bundle(bundle),
            }));
        }
        trust.none_verified(module, dedup(seen))
    }

    /// The first `.sig`-tag signature that `trust` accepts; what else was
    /// found goes to `seen`.
    async fn verify_simple<'t>(
        &self,
        reference: &Reference,
        digest: &Digest,
        trust: &'t Trust,
        seen: &mut Vec<Rejected>,
    ) -> Result<Option<Verified<'t>>, OciError> {
        let repo = &reference.repository;
        let tag = signature_tag(digest);
        let response = self.signature_image(reference, &tag).await?;
        if response.status == 404 {
            return Ok(None);
        }
        if response.status != 200 {
            return Err(self.refusal(format!("the signatures of {reference}"), &response));
        }
        let at = format!("{reference} ({tag})");
        let manifest: Manifest = serde_json::from_slice(&response.body).map_err(|e| OciError::Artifact {
            at: at.clone(),
            why: format!("its signature manifest does not parse: {e}"),
        })?;
        let b64 = base64::engine::general_purpose::STANDARD;
        let layers: Vec<&Descriptor> = manifest
            .layers
            .iter()
            .filter(|l| {
                l.media_type == PAYLOAD_MEDIA_TYPE && l.annotations.contains_key(SIGNATURE_ANNOTATION)
            })
            .collect();
        for layer in layers.iter().take(SIGNATURE_LAYERS_MAX) {
            let skip = |why: String| Rejected::Skipped(why);
            if layer.size > PAYLOAD_MAX as u64 {
                seen.push(skip(format!(
                    "a payload of {} bytes (at most {PAYLOAD_MAX})",
                    layer.size
                )));
                continue;
            }
            let payload = match Digest::parse(&layer.digest) {
                Ok(d) => self.blob(repo, &d, PAYLOAD_MAX, "a signed payload", &at).await,
                Err(e) => Err(e),
            };
            let payload = match payload {
                Ok(payload) => payload,
                Err(e) => {
                    seen.push(skip(format!("a payload that could not be read ({e})")));
                    continue;
                }
            };
            let signature = Signature {
                payload: b64.encode(&payload),
                signature: layer.annotations[SIGNATURE_ANNOTATION].clone(),
            };
            match trust.judge(digest, &signature) {
                Ok(key) => {
                    return Ok(Some(Verified {
                        key,
                        kept: Kept::Simple(signature),
                    }));
                }
                Err(why) => seen.push(why),
            }
        }
        if layers.len() > SIGNATURE_LAYERS_MAX {
            seen.push(Rejected::Skipped(format!(
                "{} more signature layers not read (at most {SIGNATURE_LAYERS_MAX})",
                layers.len() - SIGNATURE_LAYERS_MAX
            )));
        }
        Ok(None)
    }

    /// Signs manifest `digest` with `key` and adds the signature to those
    /// stored beside it; returns the tag they are stored under.
    pub async fn sign(
        &self,
        reference: &Reference,
        digest: &Digest,
        key: &SigningKey,
    ) -> Result<String, OciError> {
        let repo = &reference.repository;
        let tag = signature_tag(digest);
        let payload = payload(reference, digest);
        let annotation = key.sign(&payload)?;
        let existing = self.signature_image(reference, &tag).await?;
        let mut layers = match existing.status {
            200 => serde_json::from_slice::<Manifest>(&existing.body)
                .map(|m| m.layers)
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        // Only what could be a signature, the newest, so the new one is read.
        layers.retain(|l| {
            l.media_type == PAYLOAD_MEDIA_TYPE
                && l.size <= PAYLOAD_MAX as u64
                && l.annotations.contains_key(SIGNATURE_ANNOTATION)
        });
        let old = layers.len().saturating_sub(SIGNATURE_LAYERS_MAX - 1);
        layers.drain(..old);
        let payload_digest = Digest::of(&payload);
        self.upload(repo, Bytes::from(payload.clone())).await?;
        layers.push(Descriptor {
            media_type: PAYLOAD_MEDIA_TYPE.into(),
            digest: payload_digest.to_string(),
            size: payload.len() as u64,
            annotations: [(SIGNATURE_ANNOTATION.to_string(), annotation)].into(),
        });
        // The image config cosign writes: one diff id per layer, nothing else.
        let config = serde_json::json!({
            "architecture": "",
            "created": "0001-01-01T00:00:00Z",
            "history": [{"created": "0001-01-01T00:00:00Z"}],
            "os": "",
            "rootfs": {"type": "layers", "diff_ids": layers.iter().map(|l| l.digest.clone()).collect::<Vec<_>>()},
            "config": {},
        });
        let config = serde_json::to_vec(&config).expect("a config serializes");
        self.upload(repo, Bytes::from(config.clone())).await?;
        let manifest = Manifest {
            schema_version: 2,
            media_type: Some(MANIFEST_MEDIA_TYPE.into()),
            config: Descriptor {
                media_type: IMAGE_CONFIG_MEDIA_TYPE.into(),
                digest: Digest::of(&config).to_string(),
                size: config.len() as u64,
                annotations: Default::default(),
            },
            artifact_type: None,
            layers,
            annotations: Default::default(),
        };
        self.call(Call {
            method: "PUT",
            target: self.target(format!("/v2/{repo}/manifests/{tag}")),
            headers: vec![("Content-Type", MANIFEST_MEDIA_TYPE.to_string())],
            body: Bytes::from(serde_json::to_vec(&manifest).expect("a manifest serializes")),
            limit: DOCUMENT_MAX,
            what: format!("storing the signatures of {reference}"),
        })
        .await?;
        Ok(tag)
    }
}
