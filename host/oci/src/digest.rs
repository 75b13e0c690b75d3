//! Content digests: sha256, the one algorithm registries and Berth share.

use sha2::{Digest as _, Sha256};

use crate::OciError;

/// `sha256:` and 64 lowercase hex digits.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(String);

impl Digest {
    pub fn of(bytes: &[u8]) -> Digest {
        let hash = Sha256::digest(bytes);
        let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
        Digest(format!("sha256:{hex}"))
    }

    pub fn parse(text: &str) -> Result<Digest, OciError> {
        match text.strip_prefix("sha256:") {
            Some(hex)
                if hex.len() == 64
                    && hex
                        .bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) =>
            {
                Ok(Digest(text.to_string()))
            }
            _ => Err(OciError::Digest(text.to_string())),
        }
    }

    /// The 64 hex digits: a file name that cannot leave its directory.
    pub fn hex(&self) -> &str {
        &self.0["sha256:".len()..]
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `bytes`, if they are what this digest names.
    pub fn check(&self, what: &'static str, at: &str, bytes: &[u8]) -> Result<(), OciError> {
        let actual = Digest::of(bytes);
        if actual == *self {
            Ok(())
        } else {
            Err(OciError::DigestMismatch {
                what,
                at: at.to_string(),
                expected: self.0.clone(),
                actual: actual.0,
            })
        }
    }
}

impl std::fmt::Display for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_checked_and_parsed_strictly() {
        let d = Digest::of(b"hello");
        assert_eq!(
            d.as_str(),
            "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        assert!(d.check("layer", "here", b"hello").is_ok());
        let err = d.check("layer", "here", b"hellO").unwrap_err().to_string();
        assert!(err.contains("does not match its digest"), "{err}");
        assert_eq!(Digest::parse(d.as_str()).unwrap(), d);
        for bad in ["sha256:ABC", "sha512:00", "2cf24dba", "sha256:../../etc/passwd"] {
            assert!(Digest::parse(bad).is_err(), "{bad}");
        }
        let upper = d.as_str().to_uppercase().replace("SHA256", "sha256");
        assert!(Digest::parse(&upper).is_err());
    }
}
