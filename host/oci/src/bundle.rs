//! Signatures in cosign's current format: a Sigstore bundle
//! (`application/vnd.dev.sigstore.bundle.v0.3+json`) attached to the module's
//! manifest as an OCI 1.1 referrer — found through the referrers API, or the
//! `sha256-<hex>` referrers tag on a registry without it. A keyed bundle
//! holds a message signature (over the manifest's bytes) or a DSSE envelope
//! (an in-toto statement naming the manifest's digest), checked with the
//! same trusted keys as the `.sig` format. The transparency log is not
//! consulted (as `cosign verify --insecure-ignore-tlog`); a bundle with a
//! certificate instead of a key (keyless) is reported as such.

use base64::Engine as _;
use bytes::Bytes;
use serde::Deserialize;

use crate::artifact::{DOCUMENT_MAX, MANIFEST_MEDIA_TYPE};
use crate::registry::Call;
use crate::signature::{Rejected, SIGNATURE_LAYERS_MAX};
use crate::{Digest, OciError, Reference, Registry, Trust};

pub const BUNDLE_MEDIA_TYPE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
const INDEX_MEDIA_TYPE: &str = "application/vnd.oci.image.index.v1+json";
const IN_TOTO: &str = "application/vnd.in-toto+json";
/// The most a bundle may weigh (a keyed one is a few KiB).
const BUNDLE_MAX: usize = 256 << 10;

#[derive(Deserialize)]
struct Index {
    #[serde(default)]
    manifests: Vec<Entry>,
}

#[derive(Deserialize)]
struct Entry {
    digest: String,
    #[serde(rename = "artifactType", default)]
    artifact_type: Option<String>,
    /// The referrer manifest's size, as the index says.
    #[serde(default)]
    size: u64,
    /// The referrer manifest's annotations, copied into the index.
    #[serde(default)]
    annotations: std::collections::BTreeMap<String, String>,
}

/// The annotation cosign gives a bundle's referrer manifest: when it was made.
const CREATED: &str = "org.opencontainers.image.created";
/// The most a bundle's referrer manifest may weigh (cosign's is under 1 KiB):
/// one the index says is larger is passed over without a fetch.
const REFERRER_MANIFEST_MAX: u64 = 16 << 10;

/// The bundles worth reading, in the order they are read: newest first by
/// their `created` annotation, so that junk pushed before a signature cannot
/// hide it behind the bound; a date in the future (any pusher may write
/// one) or none goes last, in the index's order.
fn reading_order(entries: &[Entry], now: std::time::SystemTime) -> Vec<&Entry> {
    let created = |e: &Entry| {
        e.annotations
            .get(CREATED)
            .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
            .filter(|t| *t <= now + std::time::Duration::from_secs(300))
    };
    let mut bundles: Vec<(&Entry, Option<std::time::SystemTime>)> = entries
        .iter()
        .filter(|e| e.artifact_type.as_deref() == Some(BUNDLE_MEDIA_TYPE))
        .filter(|e| e.size <= REFERRER_MANIFEST_MAX)
        .map(|e| (e, created(e)))
        .collect();
    // Stable: entries of one date (or none) keep the index's order.
    bundles.sort_by_key(|b| std::cmp::Reverse(b.1));
    bundles.into_iter().map(|(e, _)| e).collect()
}

#[derive(Deserialize)]
struct ReferrerManifest {
    #[serde(default)]
    layers: Vec<Layer>,
}

#[derive(Deserialize)]
struct Layer {
    #[serde(rename = "mediaType")]
    media_type: String,
    digest: String,
    size: u64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Bundle {
    media_type: String,
    #[serde(default)]
    verification_material: Option<serde_json::Value>,
    #[serde(default)]
    message_signature: Option<MessageSignature>,
    #[serde(default)]
    dsse_envelope: Option<Envelope>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MessageSignature {
    message_digest: MessageDigest,
    signature: String,
}

#[derive(Deserialize)]
struct MessageDigest {
    algorithm: String,
    digest: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope {
    payload: String,
    payload_type: String,
    signatures: Vec<EnvelopeSignature>,
}

#[derive(Deserialize)]
struct EnvelopeSignature {
    sig: String,
}

#[derive(Deserialize)]
struct Statement {
    #[serde(default)]
    subject: Vec<Subject>,
}

#[derive(Deserialize)]
struct Subject {
    #[serde(default)]
    digest: std::collections::BTreeMap<String, String>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// DSSE's pre-authentication encoding: what an envelope's signature covers.
pub(crate) fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {} {} ",
        payload_type.len(),
        payload_type,
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

/// What verifying a bundle found: the trusted key, or why it did not count.
pub(crate) fn judge<'t>(
    trust: &'t Trust,
    digest: &Digest,
    manifest: &[u8],
    bundle: &[u8],
) -> Result<&'t crate::PublicKey, Rejected> {
    let skip = |why: &str| Rejected::Skipped(format!("a Sigstore bundle {why}"));
    let b64 = base64::engine::general_purpose::STANDARD;
    let bundle: Bundle = serde_json::from_slice(bundle).map_err(|_| skip("that does not parse"))?;
    if bundle.media_type != BUNDLE_MEDIA_TYPE {
        return Err(skip(&format!("of type {:?}", bundle.media_type)));
    }
    let material = bundle.verification_material.unwrap_or_default();
    if material.get("publicKey").is_none() {
        return Err(skip(
            "signed with a certificate (keyless), which Berth does not check: sign with a key (`cosign sign --key`)",
        ));
    }
    if let Some(m) = bundle.message_signature {
        if m.message_digest.algorithm != "SHA2_256" {
            return Err(skip(&format!("over {}", m.message_digest.algorithm)));
        }
        // The signature first: what a bundle claims counts only once a
        // trusted key is found to have made it (junk naming another digest
        // is junk, not a claim).
        let sig = b64
            .decode(&m.signature)
            .map_err(|_| skip("whose signature is not base64"))?;
        let key = trust
            .keys
            .iter()
            .find(|k| k.verifies(manifest, &sig))
            .ok_or_else(|| skip("by a key not trusted"))?;
        let named = b64.decode(&m.message_digest.digest).unwrap_or_default();
        if hex(&named) != digest.hex() {
            return Err(Rejected::Claim(format!(
                "{}'s Sigstore bundle names another digest than this module's {digest}",
                key.path.display()
            )));
        }
        return Ok(key);
    }
    let Some(envelope) = bundle.dsse_envelope else {
        return Err(skip("with neither a message signature nor a DSSE envelope"));
    };
    if envelope.payload_type != IN_TOTO {
        return Err(skip(&format!("whose envelope holds {:?}", envelope.payload_type)));
    }
    let payload = b64
        .decode(&envelope.payload)
        .map_err(|_| skip("whose payload is not base64"))?;
    let signed = pae(&envelope.payload_type, &payload);
    let key = envelope
        .signatures
        .iter()
        .take(SIGNATURE_LAYERS_MAX)
        .filter_map(|s| b64.decode(&s.sig).ok())
        .find_map(|sig| trust.keys.iter().find(|k| k.verifies(&signed, &sig)))
        .ok_or_else(|| skip("by a key not trusted"))?;
    let statement: Statement = serde_json::from_slice(&payload)
        .map_err(|_| Rejected::Claim("a trusted key's in-toto statement does not parse".into()))?;
    match statement
        .subject
        .iter()
        .any(|s| s.digest.get("sha256").map(String::as_str) == Some(digest.hex()))
    {
        true => Ok(key),
        false => Err(Rejected::Claim(format!(
            "{}'s in-toto statement does not name this module's {digest}",
            key.path.display()
        ))),
    }
}

impl Registry {
    /// The first bundle attached to manifest `digest` that `trust` accepts,
    /// reading at most [`SIGNATURE_LAYERS_MAX`] referrers; what was found
    /// otherwise goes to `seen`.
    pub(crate) async fn verify_bundles<'t>(
        &self,
        reference: &Reference,
        digest: &Digest,
        trust: &'t Trust,
        seen: &mut Vec<Rejected>,
    ) -> Result<Option<(&'t crate::PublicKey, Bytes)>, OciError> {
        let repo = &reference.repository;
        let at = format!("{reference} (referrers)");
        let index = self.referrers(reference, digest).await?;
        let Some(index) = index else {
            return Ok(None);
        };
        let bundles = reading_order(&index.manifests, std::time::SystemTime::now());
        for other in index
            .manifests
            .iter()
            .filter_map(|e| e.artifact_type.as_deref())
            .filter(|t| *t != BUNDLE_MEDIA_TYPE)
            .take(4)
        {
            seen.push(Rejected::Skipped(format!("a referrer of type {other}")));
        }
        if bundles.is_empty() {
            return Ok(None);
        }
        let manifest = self.manifest_bytes(reference, digest).await?;
        for entry in bundles.iter().take(SIGNATURE_LAYERS_MAX) {
            let Ok(d) = Digest::parse(&entry.digest) else {
                continue;
            };
            let referrer = match self.manifest_bytes(reference, &d).await {
                Ok(m) => m,
                Err(e) => {
                    seen.push(Rejected::Skipped(format!(
                        "a bundle that could not be read ({e})"
                    )));
                    continue;
                }
            };
            let layer = serde_json::from_slice::<ReferrerManifest>(&referrer)
                .ok()
                .and_then(|m| m.layers.into_iter().next())
                .filter(|l| l.media_type == BUNDLE_MEDIA_TYPE && l.size <= BUNDLE_MAX as u64);
            let Some(layer) = layer else {
                seen.push(Rejected::Skipped(
                    "a bundle manifest without a bundle layer".into(),
                ));
                continue;
            };
            let bundle = match Digest::parse(&layer.digest) {
                Ok(d) => self.blob(repo, &d, BUNDLE_MAX, "a Sigstore bundle", &at).await,
                Err(e) => Err(e),
            };
            match bundle {
                Ok(bundle) => match judge(trust, digest, &manifest, &bundle) {
                    Ok(key) => return Ok(Some((key, bundle))),
                    Err(why) => seen.push(why),
                },
                Err(e) => seen.push(Rejected::Skipped(format!(
                    "a bundle that could not be read ({e})"
                ))),
            }
        }
        if bundles.len() > SIGNATURE_LAYERS_MAX {
            seen.push(Rejected::Skipped(format!(
                "{} more bundles not read",
                bundles.len() - SIGNATURE_LAYERS_MAX
            )));
        }
        Ok(None)
    }

    /// The referrers of `digest`: the referrers API, else the referrers tag
    /// (`sha256-<hex>`); none when neither has any.
    async fn referrers(&self, reference: &Reference, digest: &Digest) -> Result<Option<Index>, OciError> {
        let repo = &reference.repository;
        for path in [
            format!("/v2/{repo}/referrers/{digest}"),
            format!("/v2/{repo}/manifests/sha256-{}", digest.hex()),
        ] {
            let response = match self
                .call_any(Call {
                    method: "GET",
                    target: self.target(path),
                    headers: vec![("Accept", INDEX_MEDIA_TYPE.to_string())],
                    body: Bytes::new(),
                    limit: DOCUMENT_MAX,
                    what: format!("the referrers of {reference}"),
                })
                .await
            {
                // An index past the bound (anyone who may push can grow it)
                // holds no bundle Berth reads; the signature image may.
                Err(OciError::TooLarge { .. }) => {
                    tracing::warn!(reference = %reference, "a referrers index larger than {DOCUMENT_MAX} bytes: no Sigstore bundle read from it");
                    continue;
                }
                other => other?,
            };
            if response.status == 200
                && let Ok(index) = serde_json::from_slice::<Index>(&response.body)
            {
                return Ok(Some(index));
            }
        }
        Ok(None)
    }

    /// A manifest's bytes by digest, checked against it.
    async fn manifest_bytes(&self, reference: &Reference, digest: &Digest) -> Result<Bytes, OciError> {
        let repo = &reference.repository;
        let body = self
            .call(Call {
                method: "GET",
                target: self.target(format!("/v2/{repo}/manifests/{digest}")),
                headers: vec![("Accept", format!("{MANIFEST_MEDIA_TYPE}, {INDEX_MEDIA_TYPE}"))],
                body: Bytes::new(),
                limit: DOCUMENT_MAX,
                what: format!("the manifest {digest} of {reference}"),
            })
            .await?
            .body;
        digest.check("a manifest", &reference.to_string(), &body)?;
        Ok(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pre_authentication_encoding_is_dsses() {
        assert_eq!(
            pae("application/vnd.in-toto+json", b"{}"),
            b"DSSEv1 28 application/vnd.in-toto+json 2 {}".to_vec()
        );
    }

    #[test]
    fn bundles_are_read_newest_first_with_future_dates_and_none_last() {
        let entry = |digest: &str, created: Option<&str>, size: u64, kind: &str| Entry {
            digest: digest.into(),
            artifact_type: Some(kind.into()),
            size,
            annotations: created
                .map(|c| (CREATED.to_string(), c.to_string()))
                .into_iter()
                .collect(),
        };
        let now = humantime::parse_rfc3339("2026-11-29T12:00:00Z").unwrap();
        let b = BUNDLE_MEDIA_TYPE;
        let entries = [
            entry("junk-undated", None, 700, b),
            entry("junk-old", Some("2026-11-01T00:00:00Z"), 700, b),
            entry("junk-future", Some("2099-01-01T00:00:00Z"), 700, b),
            entry("junk-huge", Some("2026-11-29T11:59:00Z"), 1 << 20, b),
            entry(
                "not-a-bundle",
                Some("2026-11-29T11:59:00Z"),
                700,
                "application/example",
            ),
            entry("good", Some("2026-11-29T11:00:00Z"), 700, b),
            entry("junk-unreadable-date", Some("yesterday"), 700, b),
        ];
        let order: Vec<&str> = reading_order(&entries, now)
            .iter()
            .map(|e| e.digest.as_str())
            .collect();
        assert_eq!(
            order,
            [
                "good",
                "junk-old",
                "junk-undated",
                "junk-future",
                "junk-unreadable-date"
            ]
        );
    }
}
