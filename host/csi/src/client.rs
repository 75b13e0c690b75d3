//! gRPC client for one CSI plugin socket (Identity, Controller and Node).

use std::future::Future;
use std::io;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::time::Instant;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Uri};

use crate::channel::PluginChannel;
use crate::endpoint::Endpoint;
use crate::error::{CsiError, Failure};
use crate::proto;
use crate::proto::controller_client::ControllerClient;
use crate::proto::group_controller_client::GroupControllerClient;
use crate::proto::identity_client::IdentityClient;
use crate::proto::node_client::NodeClient;
use berth_metrics::{self as metrics, Text};

/// How a client talks to its plugin.
#[derive(Clone, Copy, Debug)]
pub struct ClientOptions {
    /// Deadline for each RPC; sent to the plugin as `grpc-timeout` and enforced here.
    pub deadline: Duration,
    /// How long `connect` waits for the socket to appear and accept connections.
    pub wait: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            deadline: crate::DEFAULT_DEADLINE,
            wait: Duration::from_secs(10),
        }
    }
}

/// A cheap-to-clone handle on one plugin socket. The underlying channel
/// reconnects by itself, so a client outlives plugin restarts.
#[derive(Clone, Debug)]
pub struct CsiClient {
    endpoint: Endpoint,
    label: Arc<str>,
    /// The driver name for metrics: learnt from the plugin's own
    /// GetPluginInfo, `unknown-driver` until then (as the CSI sidecars do).
    driver: Arc<RwLock<Text>>,
    channel: PluginChannel,
    deadline: Duration,
    /// The deadline as `grpc-timeout` says it, made once: not formatted on every call.
    timeout: tonic::metadata::AsciiMetadataValue,
}

impl CsiClient {
    /// Waits (up to `options.wait`) until the socket accepts a connection, then
    /// returns a client. A socket that does not exist yet is waited for; a path
    /// that is not a socket, or not accessible, fails at once.
    pub async fn connect(endpoint: Endpoint, options: ClientOptions) -> Result<Self, CsiError> {
        wait_for_socket(&endpoint, options.wait).await?;
        Ok(Self::lazy(endpoint, options))
    }

    /// A client that connects on first use and never waits up front.
    pub fn lazy(endpoint: Endpoint, options: ClientOptions) -> Self {
        let channel = PluginChannel::new(endpoint.path());
        CsiClient {
            label: endpoint.to_string().into(),
            driver: Arc::new(RwLock::new(Text::from_static("unknown-driver"))),
            endpoint,
            channel,
            deadline: options.deadline,
            timeout: grpc_timeout(options.deadline),
        }
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// Names the plugin in errors by something better than its socket path.
    pub fn set_label(&mut self, label: &str) {
        self.label = format!("{label} ({})", self.endpoint).into();
    }

    async fn call<Req, Resp, F, Fut>(
        &self,
        (call, method): (&'static str, &'static str),
        req: Req,
        f: F,
        names_driver: impl FnOnce(&Resp) -> Option<&str>,
    ) -> Result<Resp, CsiError>
    where
        F: FnOnce(PluginChannel, tonic::Request<Req>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<Resp>, tonic::Status>>,
    {
        let mut request = tonic::Request::new(req);
        request
            .metadata_mut()
            .insert("grpc-timeout", self.timeout.clone());
        let started = Instant::now();
        let deadline_passed = || CsiError {
            plugin: self.label.to_string(),
            call,
            failure: Failure::Deadline(self.deadline),
        };
        let answer = tokio::time::timeout(self.deadline, f(self.channel.clone(), request)).await;
        if let Ok(Ok(resp)) = &answer
            && let Some(name) = names_driver(resp.get_ref()).filter(|n| !n.is_empty())
        {
            let mut driver = self.driver.write().unwrap_or_else(|p| p.into_inner());
            if driver.as_str() != name {
                *driver = Text::from(name);
            }
        }
        if metrics::get().is_some() {
            let code = match &answer {
                Ok(Ok(_)) => tonic::Code::Ok,
                Ok(Err(status)) => status.code(),
                Err(_) => tonic::Code::DeadlineExceeded,
            };
            let driver = self.driver.read().unwrap_or_else(|p| p.into_inner()).clone();
            metrics::csi_call(&driver, method, code, started.elapsed());
        }
        match answer {
            Ok(Ok(resp)) => Ok(resp.into_inner()),
            // The plugin saw the same grpc-timeout expire; servers differ in the
            // code they answer with (tonic says CANCELLED), so trust the clock.
            Ok(Err(status))
                if matches!(
                    status.code(),
                    tonic::Code::Cancelled | tonic::Code::DeadlineExceeded
                ) && started.elapsed() >= self.deadline =>
            {
                Err(deadline_passed())
            }
            Ok(Err(status)) => Err(CsiError::from_status(&self.label, call, status)),
            Err(_) => Err(deadline_passed()),
        }
    }

    /// Every volume ListVolumes returns, following `next_token` page by page.
    pub async fn list_all_volumes(&self) -> Result<Vec<proto::Volume>, CsiError> {
        let mut volumes = Vec::new();
        let mut token = String::new();
        // A plugin that hands back the same token forever must not hang the caller.
        for _ in 0..100_000 {
            let page = self
                .list_volumes(proto::ListVolumesRequest {
                    max_entries: 1000,
                    starting_token: token,
                })
                .await?;
            volumes.extend(page.entries.into_iter().filter_map(|e| e.volume));
            if page.next_token.is_empty() {
                return Ok(volumes);
            }
            token = page.next_token;
        }
        Err(self.invalid("ListVolumes", "next_token never ran out after 100,000 pages"))
    }

    pub fn invalid(&self, call: &'static str, why: impl Into<String>) -> CsiError {
        CsiError::invalid(&self.label, call, why)
    }
}

/// `deadline` in gRPC's `grpc-timeout` form: whole milliseconds (rounded up),
/// or seconds past what eight digits of milliseconds hold.
fn grpc_timeout(deadline: Duration) -> tonic::metadata::AsciiMetadataValue {
    let ms = deadline.as_nanos().div_ceil(1_000_000).max(1);
    let text = if ms < 100_000_000 {
        format!("{ms}m")
    } else {
        format!("{}S", deadline.as_secs().clamp(1, 99_999_999))
    };
    text.parse().expect("digits and a unit are valid metadata")
}

/// A gRPC channel to a unix socket that connects on first use and reconnects
/// after failures.
pub fn unix_channel(path: &std::path::Path) -> Channel {
    let path = path.to_path_buf();
    // The URI is required by tonic but unused: the connector dials the socket.
    tonic::transport::Endpoint::from_static("http://unix.socket").connect_with_connector_lazy(
        tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { Ok::<_, io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
        }),
    )
}

/// One wrapper per CSI method, each with the deadline and error context applied.
macro_rules! rpcs {
    ($($client:ident :: $method:ident ($req:ident) -> $resp:ident as $service:literal $call:literal;)*) => {
        impl CsiClient {
            $(
                pub async fn $method(&self, req: proto::$req) -> Result<proto::$resp, CsiError> {
                    let names = ($call, concat!("/csi.v1.", $service, "/", $call));
                    self.call(names, req, |ch, r| async move { $client::new(ch).$method(r).await }, |_| None).await
                }
            )*
        }
    };
}

impl CsiClient {
    /// Also names the driver in this client's metrics, from the answer.
    pub async fn get_plugin_info(
        &self,
        req: proto::GetPluginInfoRequest,
    ) -> Result<proto::GetPluginInfoResponse, CsiError> {
        let names = ("GetPluginInfo", "/csi.v1.Identity/GetPluginInfo");
        self.call(
            names,
            req,
            |ch, r| async move { IdentityClient::new(ch).get_plugin_info(r).await },
            |info: &proto::GetPluginInfoResponse| Some(info.name.as_str()),
        )
        .await
    }
}

rpcs! {
    IdentityClient::get_plugin_capabilities(GetPluginCapabilitiesRequest) -> GetPluginCapabilitiesResponse as "Identity" "GetPluginCapabilities";
    IdentityClient::probe(ProbeRequest) -> ProbeResponse as "Identity" "Probe";
    ControllerClient::create_volume(CreateVolumeRequest) -> CreateVolumeResponse as "Controller" "CreateVolume";
    ControllerClient::delete_volume(DeleteVolumeRequest) -> DeleteVolumeResponse as "Controller" "DeleteVolume";
    ControllerClient::controller_publish_volume(ControllerPublishVolumeRequest) -> ControllerPublishVolumeResponse as "Controller" "ControllerPublishVolume";
    ControllerClient::controller_unpublish_volume(ControllerUnpublishVolumeRequest) -> ControllerUnpublishVolumeResponse as "Controller" "ControllerUnpublishVolume";
    ControllerClient::validate_volume_capabilities(ValidateVolumeCapabilitiesRequest) -> ValidateVolumeCapabilitiesResponse as "Controller" "ValidateVolumeCapabilities";
    ControllerClient::list_volumes(ListVolumesRequest) -> ListVolumesResponse as "Controller" "ListVolumes";
    ControllerClient::get_capacity(GetCapacityRequest) -> GetCapacityResponse as "Controller" "GetCapacity";
    ControllerClient::controller_get_capabilities(ControllerGetCapabilitiesRequest) -> ControllerGetCapabilitiesResponse as "Controller" "ControllerGetCapabilities";
    ControllerClient::controller_get_volume(ControllerGetVolumeRequest) -> ControllerGetVolumeResponse as "Controller" "ControllerGetVolume";
    ControllerClient::controller_expand_volume(ControllerExpandVolumeRequest) -> ControllerExpandVolumeResponse as "Controller" "ControllerExpandVolume";
    ControllerClient::controller_modify_volume(ControllerModifyVolumeRequest) -> ControllerModifyVolumeResponse as "Controller" "ControllerModifyVolume";
    ControllerClient::create_snapshot(CreateSnapshotRequest) -> CreateSnapshotResponse as "Controller" "CreateSnapshot";
    ControllerClient::delete_snapshot(DeleteSnapshotRequest) -> DeleteSnapshotResponse as "Controller" "DeleteSnapshot";
    ControllerClient::list_snapshots(ListSnapshotsRequest) -> ListSnapshotsResponse as "Controller" "ListSnapshots";
    ControllerClient::get_snapshot(GetSnapshotRequest) -> GetSnapshotResponse as "Controller" "GetSnapshot";
    GroupControllerClient::group_controller_get_capabilities(GroupControllerGetCapabilitiesRequest) -> GroupControllerGetCapabilitiesResponse as "GroupController" "GroupControllerGetCapabilities";
    GroupControllerClient::create_volume_group_snapshot(CreateVolumeGroupSnapshotRequest) -> CreateVolumeGroupSnapshotResponse as "GroupController" "CreateVolumeGroupSnapshot";
    GroupControllerClient::delete_volume_group_snapshot(DeleteVolumeGroupSnapshotRequest) -> DeleteVolumeGroupSnapshotResponse as "GroupController" "DeleteVolumeGroupSnapshot";
    GroupControllerClient::get_volume_group_snapshot(GetVolumeGroupSnapshotRequest) -> GetVolumeGroupSnapshotResponse as "GroupController" "GetVolumeGroupSnapshot";
    NodeClient::node_expand_volume(NodeExpandVolumeRequest) -> NodeExpandVolumeResponse as "Node" "NodeExpandVolume";
    NodeClient::node_stage_volume(NodeStageVolumeRequest) -> NodeStageVolumeResponse as "Node" "NodeStageVolume";
    NodeClient::node_unstage_volume(NodeUnstageVolumeRequest) -> NodeUnstageVolumeResponse as "Node" "NodeUnstageVolume";
    NodeClient::node_publish_volume(NodePublishVolumeRequest) -> NodePublishVolumeResponse as "Node" "NodePublishVolume";
    NodeClient::node_unpublish_volume(NodeUnpublishVolumeRequest) -> NodeUnpublishVolumeResponse as "Node" "NodeUnpublishVolume";
    NodeClient::node_get_volume_stats(NodeGetVolumeStatsRequest) -> NodeGetVolumeStatsResponse as "Node" "NodeGetVolumeStats";
    NodeClient::node_get_capabilities(NodeGetCapabilitiesRequest) -> NodeGetCapabilitiesResponse as "Node" "NodeGetCapabilities";
    NodeClient::node_get_info(NodeGetInfoRequest) -> NodeGetInfoResponse as "Node" "NodeGetInfo";
}

async fn wait_for_socket(endpoint: &Endpoint, wait: Duration) -> Result<(), CsiError> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(20);
    loop {
        let last = match UnixStream::connect(endpoint.path()).await {
            Ok(_) => return Ok(()),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
                ) =>
            {
                e
            }
            Err(e) => return Err(unreachable(endpoint, describe_connect_error(endpoint, &e))),
        };
        let waited = started.elapsed();
        if waited >= wait {
            let why = describe_connect_error(endpoint, &last);
            return Err(unreachable(
                endpoint,
                format!("{why} (waited {})", humantime::format_duration(wait)),
            ));
        }
        tokio::time::sleep(pause.min(wait - waited)).await;
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}

fn describe_connect_error(endpoint: &Endpoint, e: &io::Error) -> String {
    let path = endpoint.path().display();
    match e.kind() {
        io::ErrorKind::NotFound => format!("socket {path} does not exist"),
        io::ErrorKind::ConnectionRefused => {
            format!("nothing is listening on {path} (connection refused)")
        }
        io::ErrorKind::PermissionDenied => format!("no permission to connect to {path}"),
        _ => format!("cannot connect to {path}: {e}"),
    }
}

fn unreachable(endpoint: &Endpoint, why: String) -> CsiError {
    CsiError {
        plugin: endpoint.to_string(),
        call: "connect",
        failure: Failure::Unreachable(why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_is_sent_as_grpc_says_a_timeout() {
        let header = |d| grpc_timeout(d).to_str().unwrap().to_string();
        assert_eq!(header(Duration::from_secs(30)), "30000m");
        assert_eq!(header(Duration::from_micros(1500)), "2m", "rounded up");
        assert_eq!(header(Duration::ZERO), "1m", "never zero");
        assert_eq!(
            header(Duration::from_secs(200_000)),
            "200000S",
            "past eight digits of ms"
        );
        // At most eight digits, never shorter than the deadline, never a second longer.
        for d in [
            Duration::from_millis(250),
            Duration::from_secs(30),
            Duration::from_secs(200_000),
        ] {
            let text = header(d);
            let (n, unit) = text.split_at(text.len() - 1);
            let n: u64 = n.parse().unwrap();
            assert!(n <= 99_999_999 && text.len() <= 9, "{text}");
            let back = match unit {
                "m" => Duration::from_millis(n),
                "S" => Duration::from_secs(n),
                _ => unreachable!(),
            };
            assert!(back >= d && back - d < Duration::from_secs(1), "{text} for {d:?}");
        }
    }
}
