//! What a TLS peer's first message (its ClientHello) offers, read from
//! bytes peeked before the handshake: whether it offers an application
//! protocol (ALPN) by name. Admission uses it to keep places for Berth's
//! own servers. Nothing here trusts the bytes: a short, truncated or
//! malformed hello offers nothing, and nothing is read past what was given.

/// A TLS record holding a handshake message.
const HANDSHAKE_RECORD: u8 = 22;
/// The handshake message a client starts with.
const CLIENT_HELLO: u8 = 1;
/// The application-layer protocol negotiation extension.
const ALPN: usize = 16;

/// Whether the ClientHello at the start of `bytes` offers `protocol`.
pub fn offers_protocol(bytes: &[u8], protocol: &[u8]) -> bool {
    alpn(bytes).is_some_and(|mut offered| {
        while let Some(name) = offered.vector8() {
            if name == protocol {
                return true;
            }
        }
        false
    })
}

/// The ALPN extension's list of names, when the hello has one.
fn alpn(bytes: &[u8]) -> Option<Reader<'_>> {
    let mut record = Reader(bytes);
    if record.u8()? != HANDSHAKE_RECORD {
        return None;
    }
    record.skip(2)?;
    let len = record.u16()?;
    // A hello cut short by the peek is read as far as it goes.
    let mut hello = record.take(len).unwrap_or(record);
    if hello.u8()? != CLIENT_HELLO {
        return None;
    }
    // Length, version and random; then session id, cipher suites and
    // compression methods, each with its length.
    hello.skip(3 + 2 + 32)?;
    hello.vector8()?;
    hello.vector16()?;
    hello.vector8()?;
    // Extensions cut short by the peek are read as far as they go too.
    let mut extensions = hello.vector16().unwrap_or(hello);
    while !extensions.0.is_empty() {
        let kind = extensions.u16()?;
        let mut body = extensions.vector16()?;
        if kind == ALPN {
            return body.vector16();
        }
    }
    None
}

/// Bytes read from the front, every read checked against what is left.
#[derive(Clone, Copy)]
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<Reader<'a>> {
        let (taken, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(Reader(taken))
    }

    fn skip(&mut self, n: usize) -> Option<()> {
        self.take(n).map(|_| ())
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|r| r.0[0])
    }

    fn u16(&mut self) -> Option<usize> {
        self.take(2)
            .map(|r| usize::from(u16::from_be_bytes([r.0[0], r.0[1]])))
    }

    /// A vector with a one-byte length, as bytes.
    fn vector8(&mut self) -> Option<&'a [u8]> {
        let len = usize::from(self.u8()?);
        self.take(len).map(|r| r.0)
    }

    /// A vector with a two-byte length.
    fn vector16(&mut self) -> Option<Reader<'a>> {
        let len = self.u16()?;
        self.take(len)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::Arc;
    use tokio_rustls::rustls;

    /// The first bytes rustls sends as a client offering `protocols`.
    pub(crate) fn hello(protocols: &[&[u8]]) -> Vec<u8> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        config.alpn_protocols = protocols.iter().map(|p| p.to_vec()).collect();
        let name = "server.example".try_into().unwrap();
        let mut client = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
        let mut bytes = Vec::new();
        client.write_tls(&mut bytes).unwrap();
        bytes
    }

    #[test]
    fn a_protocol_is_found_among_those_offered_and_only_there() {
        let offered = hello(&[b"h2", b"berth-server"]);
        assert!(offers_protocol(&offered, b"berth-server"));
        assert!(offers_protocol(&offered, b"h2"));
        assert!(!offers_protocol(&offered, b"berth"));
        assert!(!offers_protocol(&hello(&[b"h2"]), b"berth-server"));
        assert!(!offers_protocol(&hello(&[]), b"h2"));
    }

    #[test]
    fn cut_or_broken_hellos_offer_nothing_and_never_panic() {
        // rustls orders a hello's extensions at random; a hello cut after
        // its ALPN extension still offers what it listed, which can only be
        // seen on one where ALPN is not the last extension.
        let shortest = |offered: &[u8]| {
            (0..=offered.len()).find(|&end| offers_protocol(&offered[..end], b"berth-server"))
        };
        let offered = (0..200)
            .map(|_| hello(&[b"h2", b"berth-server"]))
            .find(|offered| shortest(offered).is_some_and(|end| end < offered.len()))
            .expect("no hello cut after its ALPN extension offers it");
        for end in 0..offered.len() {
            let _ = offers_protocol(&offered[..end], b"berth-server");
        }
        let cut = shortest(&offered).unwrap();
        assert!((cut..=offered.len()).all(|end| offers_protocol(&offered[..end], b"berth-server")));
        // A quarter of the hello does not reach its extensions.
        assert!(!offers_protocol(&offered[..offered.len() / 4], b"berth-server"));
        let mut flipped = offered.clone();
        for i in 0..flipped.len() {
            flipped[i] ^= 0xff;
            let _ = offers_protocol(&flipped, b"berth-server");
            flipped[i] ^= 0xff;
        }
        assert!(!offers_protocol(b"GET / HTTP/1.1\r\n\r\n", b"h2"));
        assert!(!offers_protocol(&[], b"h2"));
    }
}
