//! Compiles the .proto files with protox (pure Rust), so no system `protoc` is needed.

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "csi/v1/csi.proto",
        "berth/v1/berth.proto",
        "berth/v1/cluster.proto",
        "etcd/etcdserverpb/rpc.proto",
    ];
    for f in files.iter().chain(&["etcd/mvccpb/kv.proto"]) {
        println!("cargo:rerun-if-changed={f}");
    }
    let descriptors = protox::compile(files, ["."])?;
    // Kept for tests that check services and fields against the spec.
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("descriptors.bin"), descriptors.encode_to_vec())?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
