//! Policy modules in registries: a `[[policy]] module` that is an `oci://`
//! reference (pinned by digest), and `[oci]`, how registries are reached.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::{ConfigError, invalid};
use berth_oci::{Access, PublicKey, Reference, Trust};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawOci {
    /// A PEM file of the CA(s) a registry's certificate is checked against.
    ca: Option<PathBuf>,
    /// Plain HTTP, to a registry on loopback only.
    plain_http: Option<bool>,
    /// The Docker config file with registry credentials.
    docker_config: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTrust {
    /// PEM public keys (ECDSA P-256, as `cosign generate-key-pair` writes).
    #[serde(default)]
    keys: Vec<PathBuf>,
    /// Every module from a registry must be signed by one of `keys`.
    #[serde(default)]
    required: bool,
}

/// `[policy_trust]`: the keys read and checked now, so a bad key stops the
/// start with the key at fault, not the first fetch.
pub(crate) fn trust(raw: Option<RawTrust>, resolve: impl Fn(&Path) -> PathBuf) -> Result<Trust, ConfigError> {
    let raw = raw.unwrap_or_default();
    let keys = raw
        .keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            PublicKey::from_pem(&resolve(k)).map_err(|e| invalid(format!("policy_trust.keys[{i}]"), e))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if raw.required && keys.is_empty() {
        return Err(invalid(
            "policy_trust.required",
            "signatures are required but no key is trusted: name the signers' public keys in policy_trust.keys",
        ));
    }
    Ok(Trust {
        keys,
        required: raw.required,
    })
}

pub(crate) fn access(raw: Option<RawOci>, resolve: impl Fn(&Path) -> PathBuf) -> Access {
    let raw = raw.unwrap_or_default();
    Access {
        ca: raw.ca.as_deref().map(&resolve),
        plain_http: raw.plain_http,
        docker_config: raw.docker_config.as_deref().map(&resolve),
    }
}

/// The registry reference a module names, if it names one: it must be
/// pinned by digest, so that every start runs the same bytes (unless
/// `tag_allowed`: a set being applied, whose tags are resolved before it is stored).
pub(crate) fn module_reference(
    key: &str,
    module: &Path,
    tag_allowed: bool,
) -> Result<Option<Reference>, ConfigError> {
    let Some(text) = module.to_str().filter(|t| t.starts_with("oci://")) else {
        return Ok(None);
    };
    let reference = Reference::parse(text).map_err(|e| invalid(key, e))?;
    if reference.digest.is_none() && !tag_allowed {
        return Err(invalid(
            key,
            format!(
                "{text} names a tag; pin the module by its digest (oci://…@sha256:…), as `berth policy push` and `berth policy pull` print it"
            ),
        ));
    }
    Ok(Some(reference))
}
