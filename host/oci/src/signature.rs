//! Module signatures in cosign's format, so `cosign sign --key` and
//! `cosign verify --key` interoperate with Berth: a "simple signing"
//! payload naming the module's manifest digest, signed with ECDSA P-256 over
//! SHA-256 (ASN.1 DER, base64 in the layer's
//! `dev.cosignproject.cosign/signature` annotation), one layer per signature
//! in an image stored under the tag `sha256-<hex>.sig` beside the module
//! (read and written in `signature_image.rs`; file signatures in
//! `blob_signature.rs`, bundles in `bundle.rs`).
//! Keys are PEM: a PKCS#8 private key (`openssl genpkey -algorithm EC
//! -pkeyopt ec_paramgen_curve:P-256`), a PKIX public key (`cosign.pub`).

use std::path::{Path, PathBuf};

use base64::Engine as _;
use ring::rand::SystemRandom;
use ring::signature::{
    ECDSA_P256_SHA256_ASN1, ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, UnparsedPublicKey,
};
use rustls::pki_types::SubjectPublicKeyInfoDer;
use rustls::pki_types::pem::PemObject;
use serde::{Deserialize, Serialize};

use crate::{Digest, OciError, Reference};

pub const PAYLOAD_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
const PAYLOAD_TYPE: &str = "cosign container image signature";
/// The most a payload may weigh; cosign's are a few hundred bytes.
pub(crate) const PAYLOAD_MAX: usize = 64 << 10;

/// The tag the signatures of manifest `digest` are stored under.
pub fn signature_tag(digest: &Digest) -> String {
    format!("sha256-{}.sig", digest.hex())
}

#[derive(Serialize, Deserialize)]
struct Payload {
    critical: Critical,
    optional: Option<serde_json::Value>,
}

#[derive(Serialize, Deserialize)]
struct Critical {
    identity: Identity,
    image: Image,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Serialize, Deserialize)]
struct Identity {
    #[serde(rename = "docker-reference")]
    docker_reference: String,
}

#[derive(Serialize, Deserialize)]
struct Image {
    #[serde(rename = "docker-manifest-digest")]
    docker_manifest_digest: String,
}

/// The payload that signs `digest` of `reference`'s repository.
pub fn payload(reference: &Reference, digest: &Digest) -> Vec<u8> {
    serde_json::to_vec(&Payload {
        critical: Critical {
            identity: Identity {
                docker_reference: format!("{}/{}", reference.registry, reference.repository),
            },
            image: Image {
                docker_manifest_digest: digest.to_string(),
            },
            kind: PAYLOAD_TYPE.to_string(),
        },
        optional: None,
    })
    .expect("a payload serializes")
}

/// One signature as stored: the payload and its signature (base64 DER).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signature {
    /// base64 of the payload's bytes, as signed.
    pub payload: String,
    pub signature: String,
}

pub struct SigningKey(EcdsaKeyPair);

/// Where the password of a sealed key comes from, cosign's variable.
pub const PASSWORD_VARIABLE: &str = "COSIGN_PASSWORD";

impl SigningKey {
    /// A PEM private key: PKCS#8, SEC 1 (`EC PRIVATE KEY`, what `openssl
    /// ecparam -genkey` writes), or cosign's sealed one opened with `password`.
    pub fn from_pem(path: &Path, password: Option<&[u8]>) -> Result<SigningKey, OciError> {
        let text = std::fs::read_to_string(path).map_err(|e| OciError::file(path, e))?;
        let not_a_key = || {
            OciError::file(
                path,
                "holds no private key: PKCS#8 (PRIVATE KEY), SEC 1 (EC PRIVATE KEY) or cosign's encrypted one",
            )
        };
        let (label, der) = crate::sealed_key::pem_blocks(&text)
            .into_iter()
            .find(|(label, _)| label.ends_with("PRIVATE KEY"))
            .ok_or_else(not_a_key)?;
        let pkcs8 = match label {
            "PRIVATE KEY" => der,
            "EC PRIVATE KEY" => crate::sec1::to_pkcs8(&der).map_err(|why| OciError::file(path, why))?,
            crate::sealed_key::LABEL | crate::sealed_key::LEGACY_LABEL => {
                let password = password.ok_or_else(|| {
                    OciError::file(
                        path,
                        format!("the key is encrypted: give its password in {PASSWORD_VARIABLE}"),
                    )
                })?;
                crate::sealed_key::open(&der, password).map_err(|why| OciError::file(path, why))?
            }
            _ => return Err(not_a_key()),
        };
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &pkcs8, &SystemRandom::new())
            .map_err(|e| OciError::file(path, format!("not an ECDSA P-256 key: {e}")))?;
        Ok(SigningKey(pair))
    }

    /// A new key pair, as cosign's `generate-key-pair` writes it: the private key
    /// sealed under `password`, and the public key (both PEM).
    pub fn generate(password: &[u8]) -> Result<(String, String), OciError> {
        use ring::signature::KeyPair as _;
        let failed = |why: String| OciError::Signature {
            module: String::new(),
            why,
        };
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng)
            .map_err(|_| failed("key generation failed".into()))?;
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &rng)
            .map_err(|e| failed(e.to_string()))?;
        let sealed = crate::sealed_key::seal(pkcs8.as_ref(), password).map_err(|e| failed(e.to_string()))?;
        Ok((
            crate::sealed_key::pem(crate::sealed_key::LABEL, &sealed),
            crate::sealed_key::pem("PUBLIC KEY", &p256_spki(pair.public_key().as_ref())),
        ))
    }

    /// `payload` signed: base64 of the DER signature.
    pub fn sign(&self, payload: &[u8]) -> Result<String, OciError> {
        let sig = self
            .0
            .sign(&SystemRandom::new(), payload)
            .map_err(|_| OciError::Signature {
                module: String::new(),
                why: "signing failed".into(),
            })?;
        Ok(base64::engine::general_purpose::STANDARD.encode(sig.as_ref()))
    }
}

/// A trusted public key, and the file it came from (for messages).
#[derive(Clone, Debug)]
pub struct PublicKey {
    pub path: PathBuf,
    point: Vec<u8>,
}

impl PublicKey {
    pub fn from_pem(path: &Path) -> Result<PublicKey, OciError> {
        let spki = SubjectPublicKeyInfoDer::from_pem_file(path)
            .map_err(|e| OciError::file(path, format!("not a PEM public key: {e}")))?;
        use x509_parser::prelude::FromDer;
        let (_, info) = x509_parser::x509::SubjectPublicKeyInfo::from_der(spki.as_ref())
            .map_err(|e| OciError::file(path, format!("not a public key: {e}")))?;
        let ec = x509_parser::oid_registry::OID_KEY_TYPE_EC_PUBLIC_KEY;
        let p256 = x509_parser::oid_registry::OID_EC_P256;
        let curve = info.algorithm.parameters.as_ref().and_then(|p| p.as_oid().ok());
        if info.algorithm.algorithm != ec || curve.as_ref() != Some(&p256) {
            return Err(OciError::file(path, "not an ECDSA P-256 public key"));
        }
        Ok(PublicKey {
            path: path.to_path_buf(),
            point: info.subject_public_key.data.to_vec(),
        })
    }

    pub(crate) fn verifies(&self, payload: &[u8], signature: &[u8]) -> bool {
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, &self.point)
            .verify(payload, signature)
            .is_ok()
    }
}

/// The SubjectPublicKeyInfo of a P-256 key: the algorithm, then the point.
fn p256_spki(point: &[u8]) -> Vec<u8> {
    const ALGORITHM: [u8; 26] = [
        0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86,
        0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
    ];
    [&ALGORITHM[..], point].concat()
}

/// Which modules must be signed, and by whom.
#[derive(Clone, Debug, Default)]
pub struct Trust {
    pub keys: Vec<PublicKey>,
    /// Every module from a registry must carry a signature by one of `keys`.
    pub required: bool,
}

/// `seen` with each reason once, in the order first seen, counted.
pub(crate) fn dedup(seen: Vec<Rejected>) -> Vec<Rejected> {
    let mut out: Vec<(Rejected, usize)> = Vec::new();
    for r in seen {
        match out.iter_mut().find(|(o, _)| *o == r) {
            Some((_, n)) => *n += 1,
            None => out.push((r, 1)),
        }
    }
    out.into_iter()
        .map(|(r, n)| match (r, n) {
            (r, 1) => r,
            (Rejected::Skipped(why), n) => Rejected::Skipped(format!("{why} ×{n}")),
            (Rejected::Claim(why), n) => Rejected::Claim(format!("{why} ×{n}")),
        })
        .collect()
}

/// A signature that a trusted key made for this module.
#[derive(Clone, Debug)]
pub struct Verified<'a> {
    pub key: &'a PublicKey,
    /// What to keep beside the module, to check again without the registry.
    pub kept: Kept,
}

/// A signature as kept beside a cached module.
#[derive(Clone, Debug)]
pub enum Kept {
    /// cosign's `.sig` format.
    Simple(Signature),
    /// A Sigstore bundle's JSON (checked against the cached manifest).
    Bundle(bytes::Bytes),
}

/// Why one signature did not count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Rejected {
    /// Junk or someone else's: skipped, the next one may do.
    Skipped(String),
    /// A trusted key's claim about another module: never passed over in silence.
    Claim(String),
}

impl Trust {
    /// Judges one signature: the trusted key that made it for `digest`, or why not.
    pub(crate) fn judge(&self, digest: &Digest, s: &Signature) -> Result<&PublicKey, Rejected> {
        let b64 = base64::engine::general_purpose::STANDARD;
        let (Ok(payload), Ok(sig)) = (b64.decode(&s.payload), b64.decode(&s.signature)) else {
            return Err(Rejected::Skipped("a signature that is not base64".into()));
        };
        let Some(key) = self.keys.iter().find(|k| k.verifies(&payload, &sig)) else {
            return Err(Rejected::Skipped("a signature by a key not trusted".into()));
        };
        // Signed by a trusted key: it must be about this module.
        let claim: Payload = serde_json::from_slice(&payload)
            .map_err(|e| Rejected::Claim(format!("its signed payload does not parse: {e}")))?;
        if claim.critical.kind != PAYLOAD_TYPE {
            return Err(Rejected::Claim(format!(
                "its signed payload is a {:?}",
                claim.critical.kind
            )));
        }
        if claim.critical.image.docker_manifest_digest != digest.as_str() {
            return Err(Rejected::Claim(format!(
                "{} signed {}, not this module's {digest}",
                key.path.display(),
                claim.critical.image.docker_manifest_digest
            )));
        }
        Ok(key)
    }

    /// The key among `keys` that signed `digest`, from `signatures`; an
    /// error naming `module` and why when none did and one must have.
    pub fn check(
        &self,
        module: &str,
        digest: &Digest,
        signatures: &[Signature],
    ) -> Result<Option<&PublicKey>, OciError> {
        let mut seen = Vec::new();
        for s in signatures {
            match self.judge(digest, s) {
                Ok(key) => return Ok(Some(key)),
                Err(why) => seen.push(why),
            }
        }
        self.none_verified(module, seen)
    }

    /// The verdict when no signature passed: `seen` says what was found.
    pub(crate) fn none_verified<T>(&self, module: &str, seen: Vec<Rejected>) -> Result<Option<T>, OciError> {
        let refuse = |why: String| OciError::Signature {
            module: module.to_string(),
            why,
        };
        if let Some(Rejected::Claim(why)) = seen.iter().find(|r| matches!(r, Rejected::Claim(_))) {
            return Err(refuse(why.clone()));
        }
        if !self.required {
            return Ok(None);
        }
        let seen: Vec<String> = seen
            .into_iter()
            .map(|r| match r {
                Rejected::Skipped(why) | Rejected::Claim(why) => why,
            })
            .collect();
        Err(refuse(match (self.keys.is_empty(), seen.is_empty()) {
            (true, _) => "signatures are required and no key is trusted ([policy_trust] keys)".into(),
            (false, true) => "it is not signed, and signatures are required".into(),
            (false, false) => format!("no signature by a trusted key ({})", seen.join(", ")),
        }))
    }
}

/// The most layers of one signature image Berth reads: cosign adds one per
/// signing, so a module signed by each key of a rotation has a few. Layers
/// past it are not fetched.
pub const SIGNATURE_LAYERS_MAX: usize = 32;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sealed_key::pem;

    #[test]
    fn payloads_name_the_manifest_as_cosign_does() {
        let r = Reference::parse("oci://r.io:5000/team/naming:v1").unwrap();
        let d = Digest::of(b"manifest");
        let p: serde_json::Value = serde_json::from_slice(&payload(&r, &d)).unwrap();
        assert_eq!(
            p["critical"]["identity"]["docker-reference"],
            "r.io:5000/team/naming"
        );
        assert_eq!(p["critical"]["image"]["docker-manifest-digest"], d.as_str());
        assert_eq!(p["critical"]["type"], "cosign container image signature");
        assert!(p["optional"].is_null());
        assert_eq!(signature_tag(&d), format!("sha256-{}.sig", d.hex()));
    }

    /// A fresh key pair written as PEM files: (private, public).
    fn key_pair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        use ring::signature::KeyPair as _;
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &rng).unwrap();
        let (private, public) = (dir.join(format!("{name}.key")), dir.join(format!("{name}.pub")));
        std::fs::write(&private, pem("PRIVATE KEY", pkcs8.as_ref())).unwrap();
        std::fs::write(&public, pem("PUBLIC KEY", &p256_spki(pair.public_key().as_ref()))).unwrap();
        (private, public)
    }

    #[test]
    fn a_signature_by_a_trusted_key_for_this_module_passes_and_nothing_else_does() {
        let dir = tempfile::tempdir().unwrap();
        let (key, public) = key_pair(dir.path(), "team");
        let (other_key, _) = key_pair(dir.path(), "other");
        let r = Reference::parse("oci://r.io/naming:v1").unwrap();
        let digest = Digest::of(b"manifest");
        let signed = |key: &Path, digest: &Digest| {
            let payload = payload(&r, digest);
            Signature {
                signature: SigningKey::from_pem(key, None).unwrap().sign(&payload).unwrap(),
                payload: base64::engine::general_purpose::STANDARD.encode(&payload),
            }
        };
        let trust = Trust {
            keys: vec![PublicKey::from_pem(&public).unwrap()],
            required: true,
        };
        let by = trust.check("naming", &digest, &[signed(&key, &digest)]).unwrap();
        assert_eq!(by.unwrap().path, public);

        let why = |sigs: &[Signature]| trust.check("naming", &digest, sigs).unwrap_err().to_string();
        assert!(why(&[]).contains("not signed"), "{}", why(&[]));
        assert!(why(&[signed(&other_key, &digest)]).contains("no signature by a trusted key"));
        let elsewhere = why(&[signed(&key, &Digest::of(b"another manifest"))]);
        assert!(elsewhere.contains("not this module's"), "{elsewhere}");
        let mut tampered = signed(&key, &digest);
        tampered.payload = base64::engine::general_purpose::STANDARD.encode(b"{}");
        assert!(why(&[tampered]).contains("no signature by a trusted key"));

        // Not required: an unsigned module passes, a wrong claim by a trusted key never does.
        let lenient = Trust {
            required: false,
            ..trust.clone()
        };
        assert!(lenient.check("naming", &digest, &[]).unwrap().is_none());
        assert!(
            lenient
                .check("naming", &digest, &[signed(&key, &Digest::of(b"x"))])
                .is_err()
        );
        // A private key is no public key, and the other way round.
        assert!(PublicKey::from_pem(&key).is_err());
        assert!(SigningKey::from_pem(&public, None).is_err());
    }

    #[test]
    fn a_generated_key_is_sealed_and_signs_for_its_public_key() {
        let dir = tempfile::tempdir().unwrap();
        let (private, public) = SigningKey::generate(b"pw").unwrap();
        assert!(private.starts_with("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----"));
        let (key, public_path) = (dir.path().join("k.key"), dir.path().join("k.pub"));
        std::fs::write(&key, private).unwrap();
        std::fs::write(&public_path, public).unwrap();
        let err = SigningKey::from_pem(&key, None).err().unwrap().to_string();
        assert!(
            err.contains("encrypted") && err.contains(PASSWORD_VARIABLE),
            "{err}"
        );
        let err = SigningKey::from_pem(&key, Some(b"wrong"))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("wrong password"), "{err}");
        let signature = SigningKey::from_pem(&key, Some(b"pw"))
            .unwrap()
            .sign(b"payload")
            .unwrap();
        let signature = base64::engine::general_purpose::STANDARD
            .decode(signature)
            .unwrap();
        assert!(
            PublicKey::from_pem(&public_path)
                .unwrap()
                .verifies(b"payload", &signature)
        );
    }
}
