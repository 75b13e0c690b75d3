//! Rust types and tonic stubs generated from `proto/`, plus gRPC code names.

pub mod code;

/// The Container Storage Interface, package `csi.v1`.
pub mod csi {
    pub mod v1 {
        #![allow(clippy::all, missing_docs)]
        tonic::include_proto!("csi.v1");
    }
}

/// Berth's own API, package `berth.v1`.
pub mod berth {
    pub mod v1 {
        #![allow(clippy::all, missing_docs)]
        tonic::include_proto!("berth.v1");
    }
}

/// The part of etcd's v3 API the etcd store uses, packages `etcdserverpb`
/// and `mvccpb`.
pub mod etcd {
    pub mod mvccpb {
        #![allow(clippy::all, missing_docs)]
        tonic::include_proto!("mvccpb");
    }
    pub mod etcdserverpb {
        #![allow(clippy::all, missing_docs)]
        tonic::include_proto!("etcdserverpb");
    }
}

/// The compiled descriptors of every .proto file, as a `FileDescriptorSet`.
pub const DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/descriptors.bin"));
