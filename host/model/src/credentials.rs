//! What both sides of a join read: a join token's text and a certificate's
//! fingerprint. The agent pins the cluster CA by the fingerprint a token
//! carries before it sends anything; the server mints the tokens.

use sha2::{Digest, Sha256};

pub const TOKEN_PREFIX: &str = "berth2";
/// Tokens from before they were stored: refused, with what to do instead.
const OLD_PREFIX: &str = "berth1";

/// The hex SHA-256 of a certificate's DER form.
pub fn fingerprint(der: &[u8]) -> String {
    hex(&Sha256::digest(der))
}

/// Lower-case hex of `bytes` (fingerprints, token parts, sealed values).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Why a token's text was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error(
        "this join token was made by an earlier release of Berth and is no longer accepted: make one for this node with `berth cluster token --node NAME`"
    )]
    OldRelease,
    #[error(
        "this is not a Berth join token (berth2.<CA fingerprint>.<id>.<secret>; `berth cluster token --node NAME` prints one)"
    )]
    NotAToken,
}

/// What a token's text says, before the server looks it up.
#[derive(Debug, PartialEq, Eq)]
pub struct JoinToken {
    pub ca_fingerprint: String,
    pub id: String,
    secret: String,
}

impl JoinToken {
    /// The secret, which the server compares by its hash.
    pub fn secret(&self) -> &str {
        &self.secret
    }

    pub fn parse(text: &str) -> Result<JoinToken, TokenError> {
        let parts: Vec<&str> = text.trim().split('.').collect();
        let is_hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
        match parts[..] {
            [TOKEN_PREFIX, ca, id, secret] if is_hex(ca, 64) && is_hex(id, 16) && is_hex(secret, 64) => {
                Ok(JoinToken {
                    ca_fingerprint: ca.to_ascii_lowercase(),
                    id: id.to_ascii_lowercase(),
                    secret: secret.to_ascii_lowercase(),
                })
            }
            [OLD_PREFIX, ..] => Err(TokenError::OldRelease),
            _ => Err(TokenError::NotAToken),
        }
    }
}
