//! Policy modules in OCI registries: a reference (`oci://HOST/REPO@sha256:…`),
//! the WebAssembly artifact as the CNCF TAG-Runtime format lays it out (a
//! `application/vnd.wasm.config.v0+json` config, one `application/wasm`
//! layer), a registry client speaking the distribution API over HTTP/1.1
//! (HTTPS with the system's or a given CA; plain HTTP to loopback only), and
//! the OCI image layout for sites without a registry. Every byte fetched is
//! checked against its digest before anyone uses it.

mod artifact;
mod auth;
mod blob_signature;
mod bundle;
mod digest;
mod error;
mod http;
pub mod layout;
mod reference;
mod refusal;
mod registry;
mod sealed_key;
mod sec1;
pub mod signature;
mod signature_image;

pub use artifact::{Component, LAYER_MEDIA_TYPE, MANIFEST_MEDIA_TYPE, WASM_CONFIG_MEDIA_TYPE};
pub use auth::{Credentials, docker_config_path};
pub use blob_signature::blob_signature_path;
pub use digest::Digest;
pub use error::{FetchError, OciError};
pub use reference::Reference;
pub use registry::{Access, Pulled, Registry};
pub use signature::{PASSWORD_VARIABLE, PublicKey, Signature, SigningKey, Trust};

/// The most a module may weigh: larger layers are refused before they are read.
pub const MODULE_MAX: usize = 64 << 20;
