//! Policy modules named by registry reference: fetched into the policy
//! cache (an OCI image layout beside the store), checked against their
//! digests, before any is compiled; a module already there is checked again
//! and not fetched.

use crate::config::Config;
use berth_oci::{Digest, FetchError, OciError};

/// A module file pinned by a policy set must still be those bytes.
fn check_file(module: &str, path: &std::path::Path, digest: &str) -> Result<(), FetchError> {
    let fail = |error| FetchError {
        module: module.to_string(),
        reference: path.display().to_string(),
        error: Box::new(error),
    };
    let expected = Digest::parse(digest).map_err(fail)?;
    let bytes = std::fs::read(path).map_err(|e| {
        fail(OciError::File {
            path: path.to_path_buf(),
            why: e.to_string(),
        })
    })?;
    expected
        .check("the module file", &path.display().to_string(), &bytes)
        .map_err(fail)
}

/// `config` with every module from a registry pointed at its checked file.
pub async fn fetch_modules(mut config: Config) -> Result<Config, FetchError> {
    for p in &mut config.policies {
        if let (None, Some(digest)) = (&p.source, &p.digest) {
            check_file(&p.module.name, &p.module.path, digest)?;
        }
        let Some(reference) = &p.source else { continue };
        let path = berth_oci::layout::fetch(
            &config.policy_cache,
            &p.module.name,
            reference,
            &config.oci,
            &config.policy_trust,
        )
        .await
        .map_err(|error| FetchError {
            module: p.module.name.clone(),
            reference: reference.to_string(),
            error: Box::new(error),
        })?;
        tracing::info!(module = %p.module.name, %reference, path = %path.display(), "policy module fetched and checked");
        p.module.path = path;
    }
    Ok(config)
}
