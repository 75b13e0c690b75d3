//! Wire compatibility with CSI spec v1.12: services and methods by name (they
//! form the gRPC paths), and golden encodings that pin field numbers and types.

use berth_proto::csi::v1 as csi;
use prost::Message;
use prost_types::FileDescriptorSet;

fn csi_file() -> prost_types::FileDescriptorProto {
    FileDescriptorSet::decode(berth_proto::DESCRIPTORS)
        .unwrap()
        .file
        .into_iter()
        .find(|f| f.package() == "csi.v1")
        .expect("csi.v1 is compiled")
}

#[test]
fn services_and_methods_match_the_spec() {
    let expected: [(&str, &[&str]); 5] = [
        ("Identity", &["GetPluginInfo", "GetPluginCapabilities", "Probe"]),
        (
            "Controller",
            &[
                "CreateVolume",
                "DeleteVolume",
                "ControllerPublishVolume",
                "ControllerUnpublishVolume",
                "ValidateVolumeCapabilities",
                "ListVolumes",
                "GetCapacity",
                "ControllerGetCapabilities",
                "CreateSnapshot",
                "DeleteSnapshot",
                "ListSnapshots",
                "ControllerExpandVolume",
                "ControllerGetVolume",
                "ControllerModifyVolume",
                "GetSnapshot",
            ],
        ),
        (
            "GroupController",
            &[
                "GroupControllerGetCapabilities",
                "CreateVolumeGroupSnapshot",
                "DeleteVolumeGroupSnapshot",
                "GetVolumeGroupSnapshot",
            ],
        ),
        ("SnapshotMetadata", &["GetMetadataAllocated", "GetMetadataDelta"]),
        (
            "Node",
            &[
                "NodeStageVolume",
                "NodeUnstageVolume",
                "NodePublishVolume",
                "NodeUnpublishVolume",
                "NodeGetVolumeStats",
                "NodeExpandVolume",
                "NodeGetCapabilities",
                "NodeGetInfo",
            ],
        ),
    ];
    let file = csi_file();
    assert_eq!(file.service.len(), expected.len());
    for (name, methods) in expected {
        let svc = file
            .service
            .iter()
            .find(|s| s.name() == name)
            .unwrap_or_else(|| panic!("no service {name}"));
        let got: Vec<&str> = svc.method.iter().map(|m| m.name()).collect();
        assert_eq!(got, methods, "methods of {name}");
        for m in &svc.method {
            assert_eq!(m.input_type(), format!(".csi.v1.{}Request", m.name()));
            assert_eq!(m.output_type(), format!(".csi.v1.{}Response", m.name()));
        }
    }
    let streaming: Vec<&str> = file
        .service
        .iter()
        .flat_map(|s| &s.method)
        .filter(|m| m.server_streaming())
        .map(|m| m.name())
        .collect();
    assert_eq!(streaming, ["GetMetadataAllocated", "GetMetadataDelta"]);
}

/// Encodes `msg` and compares with bytes written by hand from the spec's field numbers.
fn golden<M: Message + Default + PartialEq + std::fmt::Debug>(msg: M, bytes: &[u8]) {
    assert_eq!(msg.encode_to_vec(), bytes, "encoding of {msg:?}");
    assert_eq!(M::decode(bytes).unwrap(), msg, "decoding back");
}

// Tags: (field << 3) | wire type; 0 = varint, 2 = length-delimited.
#[test]
fn identity_messages() {
    golden(
        csi::GetPluginInfoResponse {
            name: "a.b".into(),
            vendor_version: "1".into(),
            manifest: [("k".into(), "v".into())].into(),
        },
        &[
            0x0a, 3, b'a', b'.', b'b', 0x12, 1, b'1', 0x1a, 6, 0x0a, 1, b'k', 0x12, 1, b'v',
        ],
    );
    golden(csi::ProbeResponse { ready: Some(true) }, &[0x0a, 2, 0x08, 1]);
    golden(
        csi::PluginCapability {
            r#type: Some(csi::plugin_capability::Type::VolumeExpansion(
                csi::plugin_capability::VolumeExpansion { r#type: 2 },
            )),
        },
        &[0x12, 2, 0x08, 2],
    );
}

#[test]
fn create_volume_request_fields() {
    use csi::volume_capability::{AccessMode, AccessType, MountVolume};
    let req = csi::CreateVolumeRequest {
        name: "v".into(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: 1,
            limit_bytes: 2,
        }),
        volume_capabilities: vec![csi::VolumeCapability {
            access_type: Some(AccessType::Mount(MountVolume {
                fs_type: "x".into(),
                mount_flags: vec![],
                volume_mount_group: "g".into(),
            })),
            access_mode: Some(AccessMode { mode: 7 }),
        }],
        parameters: Default::default(),
        secrets: [("s".into(), "t".into())].into(),
        volume_content_source: None,
        accessibility_requirements: Some(csi::TopologyRequirement {
            requisite: vec![],
            preferred: vec![csi::Topology::default()],
        }),
        mutable_parameters: [("m".into(), "n".into())].into(),
    };
    #[rustfmt::skip]
    let bytes = [
        0x0a, 1, b'v',                                   // 1 name
        0x12, 4, 0x08, 1, 0x10, 2,                       // 2 capacity_range {1 required, 2 limit}
        0x1a, 12,                                        // 3 volume_capabilities
            0x12, 6, 0x0a, 1, b'x', 0x1a, 1, b'g',       //   2 mount {1 fs_type, 3 volume_mount_group}
            0x1a, 2, 0x08, 7,                            //   3 access_mode {1 mode = SINGLE_NODE_MULTI_WRITER}
        0x2a, 6, 0x0a, 1, b's', 0x12, 1, b't',           // 5 secrets
        0x3a, 2, 0x12, 0,                                // 7 accessibility_requirements {2 preferred}
        0x42, 6, 0x0a, 1, b'm', 0x12, 1, b'n',           // 8 mutable_parameters
    ];
    golden(req, &bytes);
}

#[test]
fn volume_and_publish_fields() {
    golden(
        csi::Volume {
            capacity_bytes: 5,
            volume_id: "i".into(),
            volume_context: Default::default(),
            content_source: None,
            accessible_topology: vec![csi::Topology {
                segments: [("z".into(), "a".into())].into(),
            }],
        },
        &[
            0x08, 5, 0x12, 1, b'i', 0x2a, 8, 0x0a, 6, 0x0a, 1, b'z', 0x12, 1, b'a',
        ],
    );
    golden(
        csi::ControllerPublishVolumeRequest {
            volume_id: "v".into(),
            node_id: "n".into(),
            volume_capability: None,
            readonly: true,
            secrets: Default::default(),
            volume_context: [("c".into(), "d".into())].into(),
        },
        &[
            0x0a, 1, b'v', 0x12, 1, b'n', 0x20, 1, 0x32, 6, 0x0a, 1, b'c', 0x12, 1, b'd',
        ],
    );
    golden(
        csi::ControllerUnpublishVolumeRequest {
            volume_id: "v".into(),
            node_id: "n".into(),
            secrets: [("a".into(), "b".into())].into(),
        },
        &[
            0x0a, 1, b'v', 0x12, 1, b'n', 0x1a, 6, 0x0a, 1, b'a', 0x12, 1, b'b',
        ],
    );
    golden(
        csi::DeleteVolumeRequest {
            volume_id: "v".into(),
            secrets: [("a".into(), "b".into())].into(),
        },
        &[0x0a, 1, b'v', 0x12, 6, 0x0a, 1, b'a', 0x12, 1, b'b'],
    );
}

#[test]
fn node_messages() {
    golden(
        csi::NodeStageVolumeRequest {
            volume_id: "v".into(),
            publish_context: Default::default(),
            staging_target_path: "/s".into(),
            volume_capability: None,
            secrets: [("a".into(), "b".into())].into(),
            volume_context: [("c".into(), "d".into())].into(),
        },
        &[
            0x0a, 1, b'v', 0x1a, 2, b'/', b's', 0x2a, 6, 0x0a, 1, b'a', 0x12, 1, b'b', 0x32, 6, 0x0a, 1,
            b'c', 0x12, 1, b'd',
        ],
    );
    golden(
        csi::NodePublishVolumeRequest {
            volume_id: "v".into(),
            publish_context: [("p".into(), "q".into())].into(),
            staging_target_path: "/s".into(),
            target_path: "/t".into(),
            volume_capability: None,
            readonly: true,
            secrets: Default::default(),
            volume_context: Default::default(),
        },
        &[
            0x0a, 1, b'v', 0x12, 6, 0x0a, 1, b'p', 0x12, 1, b'q', 0x1a, 2, b'/', b's', 0x22, 2, b'/', b't',
            0x30, 1,
        ],
    );
    golden(
        csi::NodeGetInfoResponse {
            node_id: "n1".into(),
            max_volumes_per_node: 3,
            accessible_topology: Some(csi::Topology {
                segments: [("z".into(), "a".into())].into(),
            }),
        },
        &[
            0x0a, 2, b'n', b'1', 0x10, 3, 0x1a, 8, 0x0a, 6, 0x0a, 1, b'z', 0x12, 1, b'a',
        ],
    );
}

#[test]
fn capability_enum_values() {
    use csi::controller_service_capability::rpc::Type as C;
    use csi::node_service_capability::rpc::Type as N;
    use csi::volume_capability::access_mode::Mode;
    assert_eq!(C::PublishUnpublishVolume as i32, 2);
    assert_eq!(C::ListVolumesPublishedNodes as i32, 10);
    assert_eq!(C::SingleNodeMultiWriter as i32, 13);
    assert_eq!(C::ModifyVolume as i32, 14);
    assert_eq!(N::StageUnstageVolume as i32, 1);
    assert_eq!(N::VolumeMountGroup as i32, 6);
    assert_eq!(Mode::MultiNodeMultiWriter as i32, 5);
    assert_eq!(Mode::SingleNodeMultiWriter as i32, 7);
    assert_eq!(
        csi::plugin_capability::service::Type::SnapshotMetadataService as i32,
        4
    );
}
