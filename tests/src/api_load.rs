//! The API driven hard, as the end-to-end benchmark drives it: every
//! volume created and published (then deleted) with a bounded number of
//! requests in flight, through any channel — the API socket, or the TLS API
//! with an ACL token.

use std::sync::Arc;

use berth_proto::berth::v1 as api;
use berth_proto::berth::v1::berth_client::BerthClient;
use tokio::sync::Semaphore;

/// Requests in flight at once from the driver.
pub const IN_FLIGHT: usize = 64;

/// What an API client needs of its channel here.
pub trait Channel:
    tonic::client::GrpcService<
        tonic::body::Body,
        ResponseBody: http_body::Body<Data = bytes::Bytes, Error: Into<tonic::codegen::StdError> + Send>
                          + Send
                          + 'static,
        Future: Send,
    > + Clone
    + Send
    + Sync
    + 'static
{
}

impl<T> Channel for T where
    T: tonic::client::GrpcService<
            tonic::body::Body,
            ResponseBody: http_body::Body<
                Data = bytes::Bytes,
                Error: Into<tonic::codegen::StdError> + Send,
            > + Send
                              + 'static,
            Future: Send,
        > + Clone
        + Send
        + Sync
        + 'static
{
}

/// Runs `f(i)` for `i` in `0..n`, at most [`IN_FLIGHT`] at once.
pub async fn each<T: Send + 'static>(
    n: usize,
    mut f: impl FnMut(usize) -> tokio::task::JoinHandle<T>,
) -> Vec<T> {
    let limit = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let permit = limit.clone().acquire_owned().await.unwrap();
        let handle = f(i);
        tasks.push(tokio::spawn(async move {
            let out = handle.await.unwrap();
            drop(permit);
            out
        }));
    }
    let mut out = Vec::with_capacity(n);
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

/// The name of volume `i`.
pub fn volume(i: usize) -> String {
    format!("vol-{i:06}")
}

/// Volume `i`'s spec: 1 MiB of the sample plugin.
pub fn spec(i: usize) -> api::VolumeSpec {
    api::VolumeSpec {
        name: volume(i),
        plugin: "hostpath".into(),
        required_bytes: 1 << 20,
        ..Default::default()
    }
}

/// Creates volumes `0..n` (recorded; the plugin creates them behind).
pub async fn create<T: Channel>(client: &BerthClient<T>, n: usize) {
    create_and_publish(client, n, &[]).await;
}

/// Creates volumes `0..n` of 1 MiB and publishes each on a node, in turn
/// (none: created only).
pub async fn create_and_publish<T: Channel>(
    client: &BerthClient<T>,
    n: usize,
    nodes: &'static [&'static str],
) {
    each(n, |i| {
        let mut cl = client.clone();
        tokio::spawn(async move {
            let spec = Some(spec(i));
            cl.create_volume(api::CreateVolumeRequest { spec })
                .await
                .expect("create");
            if nodes.is_empty() {
                return;
            }
            cl.publish_volume(api::PublishVolumeRequest {
                name: volume(i),
                node: nodes[i % nodes.len()].into(),
                readonly: false,
            })
            .await
            .expect("publish");
        })
    })
    .await;
}

/// Deletes volumes `0..n` (with force: unpublished first).
pub async fn delete<T: Channel>(client: &BerthClient<T>, n: usize) {
    each(n, |i| {
        let mut cl = client.clone();
        tokio::spawn(async move {
            cl.delete_volume(api::DeleteVolumeRequest {
                name: volume(i),
                force: true,
            })
            .await
            .expect("delete");
        })
    })
    .await;
}

/// Adds a token to every call.
#[derive(Clone)]
pub struct Bearer(tonic::metadata::MetadataValue<tonic::metadata::Ascii>);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        request.metadata_mut().insert("authorization", self.0.clone());
        Ok(request)
    }
}

/// A client of the TLS API on loopback `port`, checked against `ca`, with `token`.
pub async fn remote(
    port: u16,
    ca: &std::path::Path,
    token: &str,
) -> BerthClient<tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Bearer>> {
    remote_as(port, ca, token, None).await
}

/// [`remote`], presenting a client certificate (`cert`, `key`, PEM) too.
pub async fn remote_as(
    port: u16,
    ca: &std::path::Path,
    token: &str,
    identity: Option<(String, String)>,
) -> BerthClient<tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Bearer>> {
    use tonic::transport::{Certificate, ClientTlsConfig, Identity};
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(std::fs::read(ca).expect("the API's CA")))
        .domain_name("localhost");
    if let Some((cert, key)) = identity {
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    let channel = tonic::transport::Channel::from_shared(format!("https://127.0.0.1:{port}"))
        .unwrap()
        .tls_config(tls)
        .expect("TLS settings")
        .connect()
        .await
        .expect("connecting to the TLS API");
    let bearer = Bearer(format!("Bearer {token}").parse().expect("a token's characters"));
    BerthClient::with_interceptor(channel, bearer)
}

/// A token whose policy grants volume calls in the default namespace.
pub fn volume_token(c: &crate::Cluster) -> String {
    let rules = c.dir.path().join("load.toml");
    std::fs::write(
        &rules,
        "[namespace.default]\ncapabilities = [\"list\", \"read\", \"write\", \"mount\"]\n",
    )
    .unwrap();
    c.ok(&["acl", "policy", "apply", "load", rules.to_str().unwrap()]);
    let args = [
        "acl",
        "token",
        "create",
        "--name",
        "load",
        "--policy",
        "load",
        "--secret-only",
    ];
    c.ok(&args).trim().to_string()
}
