//! Policy modules named by registry reference: fetched into the policy
//! cache (an OCI image layout beside the store), checked against their
//! digests, before any is compiled; a module already there is checked again
//! and not fetched.

use crate::config::Config;
use berth_oci::{Digest, FetchError, OciError};

/// A module file of a policy set: it must carry its digest (a set stored
/// without one, as only a writer of the store could make, is refused), its
/// bytes must have it, and with `[policy_trust]` it must be signed by a
/// trusted key (`<file>.sig`, cosign's `sign-blob` format; required when
/// signatures are). Returns the SHA-256 (hex) the module is compiled with,
/// and the trusted key's file that signed it, when one did.
fn check_file(
    module: &str,
    path: &std::path::Path,
    digest: Option<&str>,
    trust: &berth_oci::Trust,
) -> Result<(String, Option<std::path::PathBuf>), FetchError> {
    let fail = |error| FetchError {
        module: module.to_string(),
        reference: path.display().to_string(),
        error: Box::new(error),
    };
    let digest = digest.ok_or_else(|| {
        fail(OciError::Reference(
            path.display().to_string(),
            "a module file of a policy set carries its digest; apply the set again (`berth policy apply`)",
        ))
    })?;
    let expected = Digest::parse(digest).map_err(fail)?;
    let bytes = std::fs::read(path).map_err(|e| {
        fail(OciError::File {
            path: path.to_path_buf(),
            why: e.to_string(),
        })
    })?;
    expected
        .check("the module file", &path.display().to_string(), &bytes)
        .map_err(fail)?;
    let mut signed_by = None;
    if (trust.required || !trust.keys.is_empty())
        && let Some(key) = trust.check_file(module, path, &bytes).map_err(fail)?
    {
        tracing::info!(%module, file = %path.display(), key = %key.path.display(), "policy module file signature checked");
        signed_by = Some(key.path.clone());
    }
    Ok((expected.hex().to_string(), signed_by))
}

/// `config` with every module from a registry pointed at its checked file,
/// and every module's bytes pinned to the digest checked.
pub async fn fetch_modules(mut config: Config) -> Result<Config, FetchError> {
    for p in &mut config.policies {
        let Some(reference) = &p.source else {
            let (sha256, signed_by) = check_file(
                &p.module.name,
                &p.module.path,
                p.digest.as_deref(),
                &config.policy_trust,
            )?;
            p.module.sha256 = Some(sha256);
            p.module.signed_by = signed_by;
            continue;
        };
        let (path, signed_by) = berth_oci::layout::fetch(
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
        // The layer's blob is named by its digest.
        p.module.sha256 = path.file_name().map(|n| n.to_string_lossy().into_owned());
        p.module.path = path;
        p.module.signed_by = signed_by;
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_module_file_of_a_set_needs_its_digest_and_those_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.wasm");
        std::fs::write(&path, b"\0asm module").unwrap();
        let open = berth_oci::Trust::default();
        let err = check_file("m", &path, None, &open).unwrap_err().to_string();
        assert!(err.contains("carries its digest"), "{err}");
        let digest = Digest::of(b"\0asm module").to_string();
        let (sha, signed_by) = check_file("m", &path, Some(&digest), &open).unwrap();
        assert_eq!(signed_by, None, "no key trusted, none checked");
        assert_eq!(format!("sha256:{sha}"), digest);
        std::fs::write(&path, b"\0asm swapped").unwrap();
        assert!(check_file("m", &path, Some(&digest), &open).is_err());
        let required = berth_oci::Trust {
            keys: Vec::new(),
            required: true,
        };
        std::fs::write(&path, b"\0asm module").unwrap();
        let err = check_file("m", &path, Some(&digest), &required)
            .unwrap_err()
            .to_string();
        assert!(err.contains("no key is trusted"), "{err}");
    }
}
