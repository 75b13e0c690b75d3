//! An ACL token's text, `berthacl.<accessor>.<secret>`: the accessor (16 hex
//! digits) is public — it lists, revokes and audits the token — and the
//! secret (64 hex digits) is known only to its holder; the store keeps its
//! SHA-256. Anything else presented as a token is refused before any
//! lookup, and compared in constant time after one.

use rand::Rng;
use sha2::{Digest, Sha256};

use berth_model::credentials::hex;

/// What every token starts with.
pub const PREFIX: &str = "berthacl";
const ACCESSOR_HEX: usize = 16;
const SECRET_HEX: usize = 64;

/// A token's parts, read from its text.
#[derive(Debug, PartialEq, Eq)]
pub struct Bearer<'a> {
    pub accessor: &'a str,
    pub secret: &'a str,
}

/// A token just made: its text is shown once, never kept.
#[derive(Debug)]
pub struct Minted {
    pub accessor: String,
    pub text: String,
    pub secret_sha256: String,
}

fn lower_hex(text: &str, len: usize) -> bool {
    text.len() == len && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A token's parts, or `None` for text that is no token.
pub fn read(text: &str) -> Option<Bearer<'_>> {
    let mut parts = text.split('.');
    let (Some(PREFIX), Some(accessor), Some(secret), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    (lower_hex(accessor, ACCESSOR_HEX) && lower_hex(secret, SECRET_HEX))
        .then_some(Bearer { accessor, secret })
}

pub fn sha256_hex(text: &str) -> String {
    hex(&Sha256::digest(text.as_bytes()))
}

/// Whether `secret` hashes to `stored`, compared in constant time.
pub fn secret_is(secret: &str, stored: &str) -> bool {
    let hashed = sha256_hex(secret);
    hashed
        .bytes()
        .zip(stored.bytes())
        .fold(hashed.len() ^ stored.len(), |d, (x, y)| d | usize::from(x ^ y))
        == 0
}

/// A new token from the system's randomness.
pub fn mint() -> Minted {
    let mut rng = rand::rng();
    let accessor: [u8; ACCESSOR_HEX / 2] = rng.random();
    let secret: [u8; SECRET_HEX / 2] = rng.random();
    let (accessor, secret) = (hex(&accessor), hex(&secret));
    Minted {
        text: format!("{PREFIX}.{accessor}.{secret}"),
        secret_sha256: sha256_hex(&secret),
        accessor,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minted_token_reads_back_and_its_secret_matches_only_its_hash() {
        let minted = mint();
        let bearer = read(&minted.text).unwrap();
        assert_eq!(bearer.accessor, minted.accessor);
        assert!(secret_is(bearer.secret, &minted.secret_sha256));
        assert!(!secret_is(bearer.secret, &mint().secret_sha256));
        assert_ne!(mint().text, minted.text);
    }

    #[test]
    fn forged_and_cut_tokens_are_no_tokens() {
        let t = mint().text;
        let cut = &t[..t.len() - 1];
        let upper = t.to_uppercase();
        let extra = format!("{t}.x");
        let other_prefix = t.replacen(PREFIX, "berth2", 1);
        for bad in [
            "",
            "berthacl",
            "berthacl..",
            cut,
            &upper,
            &extra,
            &other_prefix,
            "Bearer x",
        ] {
            assert_eq!(read(bad), None, "{bad}");
        }
    }
}
