//! EC private keys in SEC 1 form (RFC 5915, PEM `EC PRIVATE KEY`, what
//! `openssl ecparam -genkey` and `openssl ec` write) rewrapped as PKCS#8,
//! the form the signing code reads: just enough DER for that one shape.

/// `1.2.840.10045.2.1`, id-ecPublicKey.
const EC_PUBLIC_KEY: &[u8] = &[0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
/// `1.2.840.10045.3.1.7`, prime256v1 (P-256).
const P256: &[u8] = &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];

const SEQUENCE: u8 = 0x30;
const INTEGER: u8 = 0x02;
const OCTET_STRING: u8 = 0x04;
const PARAMETERS: u8 = 0xa0;
const PUBLIC_KEY: u8 = 0xa1;

/// One DER element: its tag, its contents, and what follows it.
fn element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 2 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0usize, |l, b| (l << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

fn encode(tag: u8, contents: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    match contents.len() {
        n if n < 0x80 => out.push(n as u8),
        n if n < 0x100 => out.extend([0x81, n as u8]),
        n => out.extend([0x82, (n >> 8) as u8, n as u8]),
    }
    out.extend_from_slice(contents);
    out
}

/// A P-256 `ECPrivateKey` as a PKCS#8 `PrivateKeyInfo`; why not, when it
/// is not one (another curve, no public key, not DER).
pub fn to_pkcs8(sec1: &[u8]) -> Result<Vec<u8>, &'static str> {
    const NOT: &str = "not an EC private key in SEC 1 form";
    let (tag, key, rest) = element(sec1).ok_or(NOT)?;
    if tag != SEQUENCE || !rest.is_empty() {
        return Err(NOT);
    }
    let (tag, version, key) = element(key).ok_or(NOT)?;
    if tag != INTEGER || version != [1] {
        return Err(NOT);
    }
    let (tag, private, mut key) = element(key).ok_or(NOT)?;
    if tag != OCTET_STRING {
        return Err(NOT);
    }
    let mut public = None;
    while !key.is_empty() {
        let (tag, contents, rest) = element(key).ok_or(NOT)?;
        match tag {
            PARAMETERS if contents != P256 => {
                return Err("not a P-256 key (ECDSA P-256 is what cosign signs with)");
            }
            PARAMETERS => {}
            PUBLIC_KEY => public = Some(contents),
            _ => return Err(NOT),
        }
        key = rest;
    }
    let public = public.ok_or("the key holds no public key: `openssl ec -in KEY -out KEY` adds it")?;
    // The inner key without its parameters: they move to the algorithm.
    let mut inner = encode(INTEGER, &[1]);
    inner.extend(encode(OCTET_STRING, private));
    inner.extend(encode(PUBLIC_KEY, public));
    let mut algorithm = EC_PUBLIC_KEY.to_vec();
    algorithm.extend_from_slice(P256);
    let mut info = encode(INTEGER, &[0]);
    info.extend(encode(SEQUENCE, &algorithm));
    info.extend(encode(OCTET_STRING, &encode(SEQUENCE, &inner)));
    Ok(encode(SEQUENCE, &info))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_not_a_sec1_key_is_refused() {
        assert!(to_pkcs8(b"").is_err());
        assert!(to_pkcs8(&[0x30, 0x03, 0x02, 0x01, 0x00]).is_err(), "version 0");
        assert!(
            to_pkcs8(&[0x30, 0x05, 0x02, 0x01, 0x01, 0x04, 0x00])
                .unwrap_err()
                .contains("public key")
        );
    }
}
