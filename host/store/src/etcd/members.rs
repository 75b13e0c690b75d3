//! The etcd members as one client: requests passed on to the next member
//! while one is away, and range reads of a whole prefix.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use berth_proto::etcd::etcdserverpb as pb;
use pb::kv_client::KvClient;
use pb::lease_client::LeaseClient;
use tonic::transport::{Channel, Endpoint};

use super::EtcdSettings;
use crate::StoreError;

/// Keys read by the first range request of a prefix; later pages are sized
/// by the bytes the keys read so far took.
const PAGE: i64 = 1000;
/// About how many bytes one page of a range read may carry.
const PAGE_BYTES: usize = 16 << 20;
/// The largest answer taken from etcd, as etcd's own client allows: a page
/// is sized to far less, but a page of a few huge records must still decode.
pub(super) const MAX_ANSWER: usize = i32::MAX as usize;
/// How long one request to etcd may take before the store reports it unavailable.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

pub fn unavailable(settings: &EtcdSettings, message: impl std::fmt::Display) -> StoreError {
    let mut message = message.to_string();
    // Under TLS 1.3 a member that wants a client certificate closes the
    // connection after the handshake: the transport says only that it broke.
    if settings.tls.as_ref().is_some_and(|t| t.identity.is_none()) && message.contains("transport error") {
        message.push_str(
            " (if etcd runs with --client-cert-auth, give this server a client certificate: cert and key in [store])",
        );
    }
    StoreError::Etcd {
        endpoints: settings.endpoints.join(","),
        message,
    }
}

/// The key just past every key that starts with `prefix`.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // All 0xff: every key from `prefix` on.
    vec![0]
}

/// One client per member, tried in turn from the last one that answered: a
/// member that is down or cut off from the quorum is passed over. Every
/// request Berth makes is safe to repeat (puts and deletes of whole values).
#[derive(Clone)]
pub struct Members {
    channels: Arc<Vec<Channel>>,
    current: Arc<AtomicUsize>,
}

impl Members {
    pub fn new(settings: &EtcdSettings) -> Result<Members, StoreError> {
        let mut channels = Vec::new();
        for url in &settings.endpoints {
            let mut endpoint = Endpoint::from_shared(url.clone())
                .map_err(|e| unavailable(settings, format!("{url}: {e}")))?
                .connect_timeout(Duration::from_secs(2))
                .tcp_nodelay(true);
            if let Some(tls) = &settings.tls {
                use tonic::transport::{Certificate, ClientTlsConfig, Identity};
                let mut config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&tls.ca));
                if let Some((cert, key)) = &tls.identity {
                    config = config.identity(Identity::from_pem(cert, key));
                }
                endpoint = endpoint
                    .tls_config(config)
                    .map_err(|e| unavailable(settings, format!("{url}: TLS: {e}")))?;
            }
            channels.push(endpoint.connect_lazy());
        }
        Ok(Members {
            channels: Arc::new(channels),
            current: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// A KV request, passed on to the next member while one is away.
    pub async fn call<T, F, Fut>(&self, call: F) -> Result<T, EtcdError>
    where
        F: Fn(KvClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        self.on_member(|channel| call(KvClient::new(channel).max_decoding_message_size(MAX_ANSWER)))
            .await
    }

    /// A Lease request, likewise.
    pub async fn lease<T, F, Fut>(&self, call: F) -> Result<T, EtcdError>
    where
        F: Fn(LeaseClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        self.on_member(|channel| call(LeaseClient::new(channel))).await
    }

    /// The member last found answering, for a stream of its own.
    pub fn current(&self) -> Channel {
        self.channels[self.current.load(Ordering::Relaxed) % self.channels.len()].clone()
    }

    /// Moves on from the current member (its stream failed).
    pub fn pass_over(&self) {
        self.current.fetch_add(1, Ordering::Relaxed);
    }

    async fn on_member<T, F, Fut>(&self, call: F) -> Result<T, EtcdError>
    where
        F: Fn(Channel) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let n = self.channels.len();
        let first = self.current.load(Ordering::Relaxed);
        let mut failures = Vec::new();
        for k in 0..n {
            let i = (first + k) % n;
            let failure = match tokio::time::timeout(CALL_TIMEOUT, call(self.channels[i].clone())).await {
                Ok(Ok(r)) => {
                    self.current.store(i, Ordering::Relaxed);
                    return Ok(r.into_inner());
                }
                Ok(Err(status)) => {
                    let elsewhere = matches!(
                        status.code(),
                        tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Unknown
                    );
                    // The transport's own cause (a refused handshake, a
                    // certificate etcd wants) is kept, not just "transport error".
                    let refused = EtcdError::Refused {
                        code: status.code(),
                        message: berth_csi::error_chain(&status),
                    };
                    if !elsewhere {
                        return Err(refused);
                    }
                    refused.to_string()
                }
                Err(_) => format!("no answer within {}s", CALL_TIMEOUT.as_secs()),
            };
            failures.push(format!("member {}: {failure}", i + 1));
        }
        Err(EtcdError::NoMember(failures.join("; ")))
    }
}

/// Why a request to etcd failed.
#[derive(Clone, Debug, thiserror::Error)]
pub enum EtcdError {
    /// A member answered with an error that another member would answer too.
    #[error("{code:?}: {message}")]
    Refused { code: tonic::Code, message: String },
    /// Every member was away: what each said.
    #[error("Unavailable: no member answered ({0})")]
    NoMember(String),
    /// A leader's transaction failed its fence: another server leads.
    #[error("{}", super::DEPOSED)]
    Deposed,
    /// The writer key kept changing under this store's transactions:
    /// another writer shares the prefix.
    #[error("another writer keeps changing {0}: is a second server writing this prefix without leadership?")]
    Contended(String),
}

/// Every key and value below `prefix`, read page by page at one revision.
pub async fn range_all(kv: &Members, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>, EtcdError> {
    range_all_at(kv, prefix).await.map(|(read, _)| read)
}

/// [`range_all`], with the revision it was read at.
pub async fn range_all_at(kv: &Members, prefix: &[u8]) -> Result<(Vec<(Vec<u8>, Vec<u8>)>, i64), EtcdError> {
    let range_end = prefix_end(prefix);
    let mut key = prefix.to_vec();
    let mut revision = 0;
    let mut out = Vec::new();
    let mut limit = PAGE;
    loop {
        let request = pb::RangeRequest {
            key: key.clone(),
            range_end: range_end.clone(),
            limit,
            revision,
            ..Default::default()
        };
        let page = kv
            .call(|mut c| {
                let request = request.clone();
                async move { c.range(request).await }
            })
            .await?;
        if revision == 0 {
            revision = page.header.map_or(0, |h| h.revision);
        }
        let more = page.more;
        let Some(last) = page.kvs.last().map(|kv| kv.key.clone()) else {
            break;
        };
        let bytes: usize = page.kvs.iter().map(|kv| kv.key.len() + kv.value.len()).sum();
        let keys = page.kvs.len();
        out.extend(page.kvs.into_iter().map(|kv| (kv.key, kv.value)));
        if !more {
            break;
        }
        limit = page_limit(bytes, keys);
        // The next page starts just after the last key read.
        key = last;
        key.push(0);
    }
    Ok((out, revision))
}

/// Keys for the next page, so that it carries about [`PAGE_BYTES`] at the
/// size the last page's keys had.
fn page_limit(bytes: usize, keys: usize) -> i64 {
    let each = (bytes / keys.max(1)).max(1);
    (PAGE_BYTES / each).clamp(1, PAGE as usize) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_sized_by_bytes() {
        assert_eq!(page_limit(1000 * 300, 1000), PAGE, "small records: full pages");
        assert_eq!(
            page_limit(100 * (64 << 10), 100),
            256,
            "64 KiB records: 16 MiB pages"
        );
        assert_eq!(page_limit(2 << 30, 1), 1, "never less than one key");
    }

    #[test]
    fn a_prefix_ends_just_past_its_last_key() {
        assert_eq!(prefix_end(b"/berth/volumes/"), b"/berth/volumes0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
    }
}
