//! cosign's password-protected private key (`cosign generate-key-pair` writes
//! one): a PEM block holding JSON, in which the PKCS#8 key is sealed with NaCl's
//! secretbox (XSalsa20-Poly1305) under a key scrypt derives from the password.

use base64::Engine as _;
use crypto_secretbox::aead::{Aead, KeyInit};
use crypto_secretbox::{Key, Nonce, XSalsa20Poly1305};
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};

/// The label cosign 2 and later write; cosign 1 wrote [`LEGACY_LABEL`].
pub const LABEL: &str = "ENCRYPTED SIGSTORE PRIVATE KEY";
pub const LEGACY_LABEL: &str = "ENCRYPTED COSIGN PRIVATE KEY";

const KDF: &str = "scrypt";
const CIPHER: &str = "nacl/secretbox";
/// The parameters cosign has always written (2^15, 8, 1).
const LOG_N: u8 = 15;
const R: u32 = 8;
const P: u32 = 1;
/// Parameters come from the file: past these, scrypt's memory and time are a
/// denial of service rather than a defence (2^17 × 8 × 128 B = 128 MiB).
const MAX_LOG_N: u8 = 17;
const MAX_R: u32 = 8;
const MAX_P: u32 = 4;

#[derive(Serialize, Deserialize)]
struct Sealed {
    kdf: Kdf,
    cipher: Cipher,
    #[serde(with = "b64")]
    ciphertext: Vec<u8>,
}

#[derive(Serialize, Deserialize)]
struct Kdf {
    name: String,
    params: Params,
    #[serde(with = "b64")]
    salt: Vec<u8>,
}

#[derive(Serialize, Deserialize)]
struct Params {
    #[serde(rename = "N")]
    n: u64,
    r: u32,
    p: u32,
}

#[derive(Serialize, Deserialize)]
struct Cipher {
    name: String,
    #[serde(with = "b64")]
    nonce: Vec<u8>,
}

/// Why a sealed key could not be opened or made.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error("not a sealed key: {0}")]
    NotSealed(#[from] serde_json::Error),
    #[error("sealed with {kdf} and {cipher}; Berth reads {KDF} and {CIPHER}")]
    Algorithms { kdf: String, cipher: String },
    #[error(
        "scrypt parameters N={n} r={r} p={p} are out of bounds (N a power of two up to 2^{MAX_LOG_N}, r up to {MAX_R}, p up to {MAX_P})"
    )]
    Bounds { n: u64, r: u32, p: u32 },
    #[error("the nonce is not 24 bytes")]
    Nonce,
    #[error("scrypt: {0}")]
    Scrypt(String),
    #[error("wrong password, or the key file is damaged")]
    Opening,
    #[error("no randomness from the system")]
    Randomness,
    #[error("sealing failed")]
    Sealing,
}

/// The PKCS#8 DER inside a sealed key's JSON (the PEM block's content).
pub fn open(json: &[u8], password: &[u8]) -> Result<Vec<u8>, SealError> {
    let sealed: Sealed = serde_json::from_slice(json)?;
    if sealed.kdf.name != KDF || sealed.cipher.name != CIPHER {
        return Err(SealError::Algorithms {
            kdf: sealed.kdf.name,
            cipher: sealed.cipher.name,
        });
    }
    let Params { n, r, p } = sealed.kdf.params;
    let log_n = (n.is_power_of_two() && n > 1).then(|| n.trailing_zeros() as u8);
    let log_n = match log_n {
        Some(log_n) if log_n <= MAX_LOG_N && (1..=MAX_R).contains(&r) && (1..=MAX_P).contains(&p) => log_n,
        _ => return Err(SealError::Bounds { n, r, p }),
    };
    if sealed.cipher.nonce.len() != 24 {
        return Err(SealError::Nonce);
    }
    let key = derive(password, &sealed.kdf.salt, log_n, r, p)?;
    XSalsa20Poly1305::new(&key)
        .decrypt(
            Nonce::from_slice(&sealed.cipher.nonce),
            sealed.ciphertext.as_slice(),
        )
        .map_err(|_| SealError::Opening)
}

/// `pkcs8` sealed under `password`, as the JSON a PEM block with [`LABEL`] holds.
pub fn seal(pkcs8: &[u8], password: &[u8]) -> Result<Vec<u8>, SealError> {
    let rng = SystemRandom::new();
    let (mut salt, mut nonce) = (vec![0u8; 32], vec![0u8; 24]);
    rng.fill(&mut salt)
        .and_then(|()| rng.fill(&mut nonce))
        .map_err(|_| SealError::Randomness)?;
    let key = derive(password, &salt, LOG_N, R, P)?;
    let ciphertext = XSalsa20Poly1305::new(&key)
        .encrypt(Nonce::from_slice(&nonce), pkcs8)
        .map_err(|_| SealError::Sealing)?;
    let sealed = Sealed {
        kdf: Kdf {
            name: KDF.into(),
            params: Params {
                n: 1 << LOG_N,
                r: R,
                p: P,
            },
            salt,
        },
        cipher: Cipher {
            name: CIPHER.into(),
            nonce,
        },
        ciphertext,
    };
    Ok(serde_json::to_vec(&sealed)?)
}

fn derive(password: &[u8], salt: &[u8], log_n: u8, r: u32, p: u32) -> Result<Key, SealError> {
    let params =
        scrypt::Params::new(log_n, r, p, 32).map_err(|e| SealError::Scrypt(format!("parameters: {e}")))?;
    let mut key = Key::default();
    scrypt::scrypt(password, salt, &params, &mut key).map_err(|e| SealError::Scrypt(e.to_string()))?;
    Ok(key)
}

/// Go's encoding of `[]byte` in JSON: standard base64 with padding.
mod b64 {
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(serde::de::Error::custom)
    }
}

/// A PEM block's label and content, if `text` holds exactly one.
/// Every PEM block of `text`, in order (a key file may hold its curve's
/// parameters first, as `openssl ecparam -genkey` writes it).
pub fn pem_blocks(text: &str) -> Vec<(&str, Vec<u8>)> {
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some(begin) = rest.find("-----BEGIN ") {
        let Some(block) = pem_block(&rest[begin..]) else {
            break;
        };
        let end = format!("-----END {}-----", block.0);
        let consumed = rest[begin..]
            .find(&end)
            .map_or(rest.len(), |i| begin + i + end.len());
        blocks.push(block);
        rest = &rest[consumed..];
    }
    blocks
}

pub fn pem_block(text: &str) -> Option<(&str, Vec<u8>)> {
    let begin = text.find("-----BEGIN ")?;
    let rest = &text[begin + "-----BEGIN ".len()..];
    let label_end = rest.find("-----")?;
    let label = &rest[..label_end];
    let body = &rest[label_end + 5..];
    let end = body.find(&format!("-----END {label}-----"))?;
    let b64: String = body[..end].chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let der = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
    Some((label, der))
}

/// `der` as a PEM block, 64 characters a line.
pub fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_key_opens_with_its_password_only() {
        let sealed = seal(b"pkcs8 bytes", b"hunter2").unwrap();
        assert_eq!(open(&sealed, b"hunter2").unwrap(), b"pkcs8 bytes");
        assert!(matches!(open(&sealed, b"hunter3"), Err(SealError::Opening)));
        let json: serde_json::Value = serde_json::from_slice(&sealed).unwrap();
        assert_eq!(json["kdf"]["params"]["N"], 32768);
        assert_eq!(json["cipher"]["name"], "nacl/secretbox");
    }

    #[test]
    fn parameters_from_the_file_are_bounded() {
        let mut json: serde_json::Value = serde_json::from_slice(&seal(b"k", b"").unwrap()).unwrap();
        json["kdf"]["params"]["N"] = (1u64 << 24).into();
        let err = open(json.to_string().as_bytes(), b"").unwrap_err();
        assert!(matches!(err, SealError::Bounds { .. }), "{err}");
        assert!(err.to_string().contains("out of bounds"), "{err}");
        json["kdf"]["params"]["N"] = 1000.into();
        assert!(open(json.to_string().as_bytes(), b"").is_err());
        json["kdf"]["params"]["N"] = 32768.into();
        json["kdf"]["name"] = "argon2".into();
        let err = open(json.to_string().as_bytes(), b"").unwrap_err();
        assert!(err.to_string().contains("argon2"), "{err}");
    }

    #[test]
    fn pem_round_trips() {
        let text = pem(LABEL, &[7u8; 100]);
        assert!(text.lines().all(|l| l.len() <= 64 || l.starts_with("-----")));
        assert_eq!(pem_block(&text), Some((LABEL, vec![7u8; 100])));
        assert_eq!(pem_block("no pem here"), None);
    }
}
