//! Policy modules in registries: a `[[policy]] module` that is an `oci://`
//! reference (pinned by digest), and `[oci]`, how registries are reached.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::{ConfigError, invalid};
use berth_oci::{Access, Reference};

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

pub(crate) fn access(raw: Option<RawOci>, resolve: impl Fn(&Path) -> PathBuf) -> Access {
    let raw = raw.unwrap_or_default();
    Access {
        ca: raw.ca.as_deref().map(&resolve),
        plain_http: raw.plain_http.unwrap_or(false),
        docker_config: raw.docker_config.as_deref().map(&resolve),
    }
}

/// The registry reference a module names, if it names one: it must be
/// pinned by digest, so that every start runs the same bytes.
pub(crate) fn module_reference(key: &str, module: &Path) -> Result<Option<Reference>, ConfigError> {
    let Some(text) = module.to_str().filter(|t| t.starts_with("oci://")) else {
        return Ok(None);
    };
    let reference = Reference::parse(text).map_err(|e| invalid(key, e))?;
    if reference.digest.is_none() {
        return Err(invalid(
            key,
            format!(
                "{text} names a tag; pin the module by its digest (oci://…@sha256:…), as `berth policy push` and `berth policy pull` print it"
            ),
        ));
    }
    Ok(Some(reference))
}
