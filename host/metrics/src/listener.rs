//! Listening where strangers can connect (the TLS cluster endpoint, the
//! metrics endpoint): a cap on connections at once, overall and from one
//! address, so idle connections cannot use up the process's descriptors;
//! a pause that grows after an accept error (out of descriptors) instead of
//! a busy loop; and, for TLS, a handshake that must finish in time, with at
//! most [`HANDSHAKES_AT_ONCE`] under way (admission), and places of their
//! own for peers whose hello offers a protocol named by the caller (Berth's
//! servers passing calls on to the leader).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// Raises this process's soft limit on open descriptors to its hard limit
/// (as Go's runtime does for every program): the default soft limit, 1,024,
/// is what a few idle strangers could otherwise use up. Returns the soft
/// limit now in force.
pub fn raise_descriptor_limit() -> u64 {
    // SAFETY: getrlimit/setrlimit write only the struct passed in.
    unsafe {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 1024;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit.rlim_cur = limit.rlim_max;
            }
        }
        limit.rlim_cur
    }
}

/// TLS handshakes worked on at once on an endpoint (once the peer has sent
/// its first bytes): a reconnecting fleet (thousands after a leader dies) is
/// taken in at the pace the CPU allows, while the API and the sessions
/// already open keep being served.
pub const HANDSHAKES_AT_ONCE: usize = 32;

/// Handshakes worked on at once for peers whose hello offers the
/// endpoint's own protocol ([`tls_incoming`]'s `own`): beside the fleet's,
/// not behind it. Anyone may offer it; a stranger who does so competes for
/// these few places only, and the handshake's other checks still apply.
pub const OWN_HANDSHAKES_AT_ONCE: usize = 4;

/// How much of a hello is looked at for the protocols it offers.
const HELLO_PEEK: usize = 2048;

/// How many connections a listener holds at once.
#[derive(Clone, Copy, Debug)]
pub struct Caps {
    pub total: usize,
    pub per_address: usize,
}

#[derive(Default)]
struct Open {
    total: usize,
    by_address: HashMap<IpAddr, usize>,
}

/// The connections open now, against the caps.
pub struct Limiter {
    caps: Caps,
    open: Mutex<Open>,
}

/// One admitted connection's place; given back when dropped.
pub struct Admitted {
    limiter: Arc<Limiter>,
    ip: IpAddr,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut open = self.limiter.open.lock().unwrap_or_else(|p| p.into_inner());
        open.total -= 1;
        if let Some(n) = open.by_address.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.by_address.remove(&self.ip);
            }
        }
    }
}

impl Limiter {
    pub fn new(caps: Caps) -> Arc<Limiter> {
        Arc::new(Limiter {
            caps,
            open: Mutex::default(),
        })
    }

    /// A place for a connection from `ip`, if the caps allow one.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<Admitted> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let from_ip = open.by_address.get(&ip).copied().unwrap_or(0);
        if open.total >= self.caps.total || from_ip >= self.caps.per_address {
            return None;
        }
        open.total += 1;
        open.by_address.insert(ip, from_ip + 1);
        Some(Admitted {
            limiter: self.clone(),
            ip,
        })
    }

    pub fn open(&self) -> usize {
        self.open.lock().unwrap_or_else(|p| p.into_inner()).total
    }
}

/// The next connection the caps admit. Connections past a cap are closed
/// at once (logged once a second at most); after an accept error the
/// listener pauses, 10 ms doubling to 1 s, so a process out of descriptors
/// waits for some to be freed instead of spinning.
pub async fn accept(
    listener: &TcpListener,
    limiter: &Arc<Limiter>,
    what: &str,
) -> (TcpStream, SocketAddr, Admitted) {
    let mut pause = Duration::from_millis(10);
    let mut last_warned: Option<tokio::time::Instant> = None;
    let mut refused = 0u64;
    loop {
        match listener.accept().await {
            Ok((tcp, peer)) => {
                pause = Duration::from_millis(10);
                match limiter.admit(peer.ip()) {
                    Some(place) => return (tcp, peer, place),
                    None => {
                        refused += 1;
                        drop(tcp);
                        if last_warned.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                            tracing::warn!(
                                endpoint = what,
                                %peer,
                                open = limiter.open(),
                                total_cap = limiter.caps.total,
                                per_address_cap = limiter.caps.per_address,
                                refused,
                                "connection refused: too many open"
                            );
                            last_warned = Some(tokio::time::Instant::now());
                        }
                    }
                }
            }
            Err(e) => {
                tracing::warn!(endpoint = what, error = %e, pause = ?pause, "accept failed; pausing");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        }
    }
}

/// An accepted TCP connection holding its place under the caps, as the
/// gRPC server sees it (its peer address known, for refusals and logs).
pub struct Held {
    tcp: TcpStream,
    _place: Admitted,
}

impl Held {
    pub fn new(tcp: TcpStream, place: Admitted) -> Held {
        Held { tcp, _place: place }
    }
}

impl AsyncRead for Held {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for Held {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }
}

impl tonic::transport::server::Connected for Held {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.tcp.connect_info()
    }
}

/// TLS connections on `listener`, each handshake done within `handshake`
/// (a peer that connects and then says nothing is dropped), under `caps`.
/// The handshakes run beside the accept loop; finished ones wait in a
/// small queue for the server to take them.
pub fn tls_incoming(
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    caps: Caps,
    handshake: Duration,
    own: Option<&'static [u8]>,
    what: &'static str,
) -> tokio_stream::wrappers::ReceiverStream<std::io::Result<tokio_rustls::server::TlsStream<Held>>> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let limiter = Limiter::new(caps);
    let admission = Admission {
        fleet: Arc::new(tokio::sync::Semaphore::new(HANDSHAKES_AT_ONCE)),
        own: own.map(|protocol| {
            (
                protocol,
                Arc::new(tokio::sync::Semaphore::new(OWN_HANDSHAKES_AT_ONCE)),
            )
        }),
    };
    let admission = Arc::new(admission);
    tokio::spawn(async move {
        loop {
            let (tcp, peer, place) = tokio::select! {
                accepted = accept(&listener, &limiter, what) => accepted,
                () = tx.closed() => return,
            };
            // Small messages both ways: Nagle's algorithm would hold each one back.
            let _ = tcp.set_nodelay(true);
            let (acceptor, tx, admission) = (acceptor.clone(), tx.clone(), admission.clone());
            tokio::spawn(async move {
                let deadline = tokio::time::Instant::now() + handshake;
                // Admission: a handshake is worked on only with a permit, so a
                // reconnecting fleet is taken in at the pace the CPU allows while
                // the API and open sessions go on. A permit is asked for once
                // the peer has said something: idle strangers hold none.
                let permit = async {
                    // `readable` may wake without data; a byte peeked is the peer's.
                    match tcp.peek(&mut [0u8; 1]).await {
                        Ok(1..) => admission.places(&tcp).await.acquire_owned().await.ok(),
                        Ok(0) | Err(_) => None,
                    }
                };
                let Ok(Some(permit)) = tokio::time::timeout_at(deadline, permit).await else {
                    return tracing::debug!(endpoint = what, %peer, "TLS handshake not begun in time; closed");
                };
                let handshaken =
                    tokio::time::timeout_at(deadline, acceptor.accept(Held::new(tcp, place))).await;
                drop(permit);
                match handshaken {
                    Ok(Ok(tls)) => {
                        let _ = tx.send(Ok(tls)).await;
                    }
                    Ok(Err(e)) => tracing::debug!(endpoint = what, %peer, error = %e, "TLS handshake failed"),
                    Err(_) => {
                        tracing::debug!(endpoint = what, %peer, "TLS handshake not finished in time; closed")
                    }
                }
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// The places handshakes take: the fleet's, and the endpoint's own
/// protocol's with places of its own.
struct Admission {
    fleet: Arc<tokio::sync::Semaphore>,
    own: Option<(&'static [u8], Arc<tokio::sync::Semaphore>)>,
}

impl Admission {
    /// Where a peer that has begun its hello waits for a place.
    async fn places(&self, tcp: &TcpStream) -> Arc<tokio::sync::Semaphore> {
        if let Some((protocol, places)) = &self.own {
            let mut hello = vec![0u8; HELLO_PEEK];
            if let Ok(n) = tcp.peek(&mut hello).await
                && crate::client_hello::offers_protocol(&hello[..n], protocol)
            {
                return places.clone();
            }
        }
        self.fleet.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_are_capped_overall_and_per_address_and_places_come_back() {
        let l = Limiter::new(Caps {
            total: 3,
            per_address: 2,
        });
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let c: IpAddr = "10.0.0.3".parse().unwrap();
        let a1 = l.admit(a).unwrap();
        let _a2 = l.admit(a).unwrap();
        assert!(l.admit(a).is_none(), "per address");
        let _b1 = l.admit(b).unwrap();
        assert!(l.admit(c).is_none(), "overall");
        drop(a1);
        let _c1 = l.admit(c).unwrap();
        assert_eq!(l.open(), 3);
    }

    /// A TLS endpoint for "localhost" with a certificate of its own, and a
    /// client configuration that trusts it, offering `protocols`.
    fn endpoint_and_client(protocols: &[&[u8]]) -> (tokio_rustls::TlsAcceptor, tokio_rustls::TlsConnector) {
        use tokio_rustls::rustls;
        let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(made.signing_key.serialize_der().into());
        let mut server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![made.cert.der().clone()], key)
            .unwrap();
        server.alpn_protocols = vec![b"h2".to_vec()];
        let mut roots = rustls::RootCertStore::empty();
        roots.add(made.cert.der().clone()).unwrap();
        let mut client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.alpn_protocols = protocols.iter().map(|p| p.to_vec()).collect();
        (
            tokio_rustls::TlsAcceptor::from(Arc::new(server)),
            tokio_rustls::TlsConnector::from(Arc::new(client)),
        )
    }

    #[tokio::test]
    async fn a_hello_offering_the_endpoints_own_protocol_is_not_held_behind_the_fleets() {
        use tokio::io::AsyncWriteExt;
        use tokio_stream::StreamExt;
        let (acceptor, client) = endpoint_and_client(&[b"h2", b"berth-server"]);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let caps = Caps {
            total: 1000,
            per_address: 1000,
        };
        let handshake = Duration::from_secs(600);
        let mut incoming = tls_incoming(listener, acceptor, caps, handshake, Some(b"berth-server"), "test");

        // Every place of the fleet's taken by peers that say hello, are
        // answered, and then say nothing more; more of them wait.
        let fleet_hello = crate::client_hello::tests::hello(&[b"h2"]);
        let mut stalled = Vec::new();
        for _ in 0..HANDSHAKES_AT_ONCE + 8 {
            let mut tcp = TcpStream::connect(address).await.unwrap();
            tcp.write_all(&fleet_hello).await.unwrap();
            stalled.push(tcp);
        }
        let mut answered = 0;
        for tcp in &stalled[..HANDSHAKES_AT_ONCE] {
            tcp.readable().await.unwrap();
            answered += 1;
        }
        assert_eq!(answered, HANDSHAKES_AT_ONCE);

        // A server's hello is worked on at once, not after the fleet's
        // handshakes time out (ten minutes here).
        let server = async {
            let tcp = TcpStream::connect(address).await.unwrap();
            let name = "localhost".try_into().unwrap();
            let tls = client.connect(name, tcp).await.unwrap();
            assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
            incoming.next().await.unwrap().unwrap()
        };
        tokio::time::timeout(Duration::from_secs(60), server)
            .await
            .expect("a server's handshake was held behind the fleet's");
        drop(stalled);
    }
}
