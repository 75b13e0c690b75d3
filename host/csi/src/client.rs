//! gRPC client for one CSI plugin socket (Identity, Controller and Node).

use std::io;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::time::Instant;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Uri};

use crate::channel::PluginChannel;
use crate::endpoint::Endpoint;
use crate::error::CallError;
use crate::error::{CsiError, Failure, error_chain};
use crate::proto;
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
    timeout: http::HeaderValue,
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

    async fn call<Req, Resp>(
        &self,
        (call, method): (&'static str, &'static str),
        req: Req,
        names_driver: impl FnOnce(&Resp) -> Option<&str>,
    ) -> Result<Resp, CsiError>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        let started = Instant::now();
        let deadline_passed = || CsiError {
            plugin: self.label.to_string(),
            call,
            failure: Failure::Deadline(self.deadline),
        };
        let answer =
            tokio::time::timeout(self.deadline, self.channel.call(method, &self.timeout, &req)).await;
        if let Ok(Ok(resp)) = &answer
            && let Some(name) = names_driver(resp).filter(|n| !n.is_empty())
        {
            let mut driver = self.driver.write().unwrap_or_else(|p| p.into_inner());
            if driver.as_str() != name {
                *driver = Text::from(name);
            }
        }
        if metrics::get().is_some() {
            let code = match &answer {
                Ok(Ok(_)) => tonic::Code::Ok,
                Ok(Err(CallError::Status(status))) => status.code(),
                Ok(Err(CallError::Channel(_))) => tonic::Code::Unavailable,
                Ok(Err(CallError::Invalid(_))) => tonic::Code::Internal,
                Err(_) => tonic::Code::DeadlineExceeded,
            };
            let driver = self.driver.read().unwrap_or_else(|p| p.into_inner()).clone();
            metrics::csi_call(&driver, method, code, started.elapsed());
        }
        let failure = match answer {
            Ok(Ok(resp)) => return Ok(resp),
            // The plugin saw the same grpc-timeout expire; servers differ in the
            // code they answer with (tonic says CANCELLED), so trust the clock.
            Ok(Err(CallError::Status(status)))
                if matches!(
                    status.code(),
                    tonic::Code::Cancelled | tonic::Code::DeadlineExceeded
                ) && started.elapsed() >= self.deadline =>
            {
                return Err(deadline_passed());
            }
            Ok(Err(CallError::Status(status))) => Failure::Status {
                code: status.code(),
                message: status.message().to_string(),
            },
            // Refused or lost midway: the plugin is unreachable, which is
            // retryable, not a plugin bug.
            Ok(Err(CallError::Channel(e))) => Failure::Unreachable(error_chain(&e)),
            Ok(Err(CallError::Invalid(why))) => Failure::Invalid(why),
            Err(_) => return Err(deadline_passed()),
        };
        Err(CsiError {
            plugin: self.label.to_string(),
            call,
            failure,
        })
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
fn grpc_timeout(deadline: Duration) -> http::HeaderValue {
    let ms = deadline.as_nanos().div_ceil(1_000_000).max(1);
    let text = if ms < 100_000_000 {
        format!("{ms}m")
    } else {
        format!("{}S", deadline.as_secs().clamp(1, 99_999_999))
    };
    http::HeaderValue::try_from(text).expect("digits and a unit are a valid header value")
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
    ($($method:ident ($req:ident) -> $resp:ident as $service:literal $call:literal;)*) => {
        impl CsiClient {
            $(
                pub async fn $method(&self, req: proto::$req) -> Result<proto::$resp, CsiError> {
                    let names = ($call, concat!("/csi.v1.", $service, "/", $call));
                    self.call(names, req, |_| None).await
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
        self.call(names, req, |info: &proto::GetPluginInfoResponse| {
            Some(info.name.as_str())
        })
        .await
    }
}

rpcs! {
    get_plugin_capabilities(GetPluginCapabilitiesRequest) -> GetPluginCapabilitiesResponse as "Identity" "GetPluginCapabilities";
    probe(ProbeRequest) -> ProbeResponse as "Identity" "Probe";
    create_volume(CreateVolumeRequest) -> CreateVolumeResponse as "Controller" "CreateVolume";
    delete_volume(DeleteVolumeRequest) -> DeleteVolumeResponse as "Controller" "DeleteVolume";
    controller_publish_volume(ControllerPublishVolumeRequest) -> ControllerPublishVolumeResponse as "Controller" "ControllerPublishVolume";
    controller_unpublish_volume(ControllerUnpublishVolumeRequest) -> ControllerUnpublishVolumeResponse as "Controller" "ControllerUnpublishVolume";
    validate_volume_capabilities(ValidateVolumeCapabilitiesRequest) -> ValidateVolumeCapabilitiesResponse as "Controller" "ValidateVolumeCapabilities";
    list_volumes(ListVolumesRequest) -> ListVolumesResponse as "Controller" "ListVolumes";
    get_capacity(GetCapacityRequest) -> GetCapacityResponse as "Controller" "GetCapacity";
    controller_get_capabilities(ControllerGetCapabilitiesRequest) -> ControllerGetCapabilitiesResponse as "Controller" "ControllerGetCapabilities";
    controller_get_volume(ControllerGetVolumeRequest) -> ControllerGetVolumeResponse as "Controller" "ControllerGetVolume";
    controller_expand_volume(ControllerExpandVolumeRequest) -> ControllerExpandVolumeResponse as "Controller" "ControllerExpandVolume";
    controller_modify_volume(ControllerModifyVolumeRequest) -> ControllerModifyVolumeResponse as "Controller" "ControllerModifyVolume";
    create_snapshot(CreateSnapshotRequest) -> CreateSnapshotResponse as "Controller" "CreateSnapshot";
    delete_snapshot(DeleteSnapshotRequest) -> DeleteSnapshotResponse as "Controller" "DeleteSnapshot";
    list_snapshots(ListSnapshotsRequest) -> ListSnapshotsResponse as "Controller" "ListSnapshots";
    get_snapshot(GetSnapshotRequest) -> GetSnapshotResponse as "Controller" "GetSnapshot";
    group_controller_get_capabilities(GroupControllerGetCapabilitiesRequest) -> GroupControllerGetCapabilitiesResponse as "GroupController" "GroupControllerGetCapabilities";
    create_volume_group_snapshot(CreateVolumeGroupSnapshotRequest) -> CreateVolumeGroupSnapshotResponse as "GroupController" "CreateVolumeGroupSnapshot";
    delete_volume_group_snapshot(DeleteVolumeGroupSnapshotRequest) -> DeleteVolumeGroupSnapshotResponse as "GroupController" "DeleteVolumeGroupSnapshot";
    get_volume_group_snapshot(GetVolumeGroupSnapshotRequest) -> GetVolumeGroupSnapshotResponse as "GroupController" "GetVolumeGroupSnapshot";
    node_expand_volume(NodeExpandVolumeRequest) -> NodeExpandVolumeResponse as "Node" "NodeExpandVolume";
    node_stage_volume(NodeStageVolumeRequest) -> NodeStageVolumeResponse as "Node" "NodeStageVolume";
    node_unstage_volume(NodeUnstageVolumeRequest) -> NodeUnstageVolumeResponse as "Node" "NodeUnstageVolume";
    node_publish_volume(NodePublishVolumeRequest) -> NodePublishVolumeResponse as "Node" "NodePublishVolume";
    node_unpublish_volume(NodeUnpublishVolumeRequest) -> NodeUnpublishVolumeResponse as "Node" "NodeUnpublishVolume";
    node_get_volume_stats(NodeGetVolumeStatsRequest) -> NodeGetVolumeStatsResponse as "Node" "NodeGetVolumeStats";
    node_get_capabilities(NodeGetCapabilitiesRequest) -> NodeGetCapabilitiesResponse as "Node" "NodeGetCapabilities";
    node_get_info(NodeGetInfoRequest) -> NodeGetInfoResponse as "Node" "NodeGetInfo";
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
