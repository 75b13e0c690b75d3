//! What every gRPC tool expects beside the API, on the same socket: the
//! standard health service (`grpc.health.v1.Health`, for supervisors and
//! probes) and reflection (`grpc.reflection.v1`, so `grpcurl -unix` lists
//! and calls `berth.v1.Berth` without a copy of the protos).

use berth_proto::berth::v1::berth_server::SERVICE_NAME;
use tonic_health::ServingStatus;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_reflection::server::v1::{ServerReflection, ServerReflectionServer};

/// The health service, reporting the API (and the server as a whole) as serving.
pub async fn health() -> HealthServer<impl Health> {
    let (reporter, service) = tonic_health::server::health_reporter();
    reporter.set_service_status("", ServingStatus::Serving).await;
    reporter
        .set_service_status(SERVICE_NAME, ServingStatus::Serving)
        .await;
    service
}

/// Reflection over the descriptors the build compiled: the API, health and
/// reflection itself are listed (not the CSI or etcd services Berth calls).
pub fn reflection() -> Result<ServerReflectionServer<impl ServerReflection>, tonic_reflection::server::Error>
{
    tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(berth_proto::DESCRIPTORS)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .with_service_name(SERVICE_NAME)
        .with_service_name("grpc.health.v1.Health")
        .with_service_name("grpc.reflection.v1.ServerReflection")
        .build_v1()
}
