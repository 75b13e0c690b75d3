//! The cluster's policy set: the `[[policy]]` tables every server runs,
//! stored with a version (etcd or the embedded file), every module pinned
//! by digest so a failover never runs an older or different set. A term
//! puts the stored set in service; with none stored, `berth.toml`'s tables
//! seed it.

use std::path::Path;
use std::sync::Arc;

use crate::api::ReloadError;
use crate::config::Config;
use crate::config::policy_set::SetDraft;
use crate::store::{PolicySetRecord, Store};
use berth_oci::{Digest, FetchError, OciError, Reference, Registry};

fn fetch_error(module: &str, reference: &str, error: OciError) -> ReloadError {
    ReloadError::Fetch(FetchError {
        module: module.to_string(),
        reference: reference.to_string(),
        error: Box::new(error),
    })
}

/// `draft` with every module pinned: a registry tag resolved to the
/// manifest it names now, a file to its SHA-256 as it is now.
pub async fn pin(mut draft: SetDraft, config: &Config) -> Result<SetDraft, ReloadError> {
    for (i, table) in draft.tables.iter_mut().enumerate() {
        // Named by the table they come from: `policy[i]`.
        let at = format!("policy[{i}]");
        if table.module.starts_with("oci://") {
            let reference =
                Reference::parse(&table.module).map_err(|e| fetch_error(&at, &table.module, e))?;
            if reference.digest.is_none() {
                let digest = Registry::new(&reference, &config.oci)
                    .map_err(|e| fetch_error(&at, &table.module, e))?
                    .resolve(&reference)
                    .await
                    .map_err(|e| fetch_error(&at, &table.module, e))?;
                table.module = reference.pinned(digest).to_string();
            }
        } else {
            let path = Path::new(&table.module);
            let bytes = std::fs::read(path).map_err(|e| {
                fetch_error(
                    &at,
                    &table.module,
                    OciError::File {
                        path: path.to_path_buf(),
                        why: e.to_string(),
                    },
                )
            })?;
            let digest = Digest::of(&bytes).to_string();
            match &table.digest {
                Some(pinned) if *pinned != digest => {
                    return Err(fetch_error(
                        &at,
                        &table.module,
                        OciError::DigestMismatch {
                            what: "the module file",
                            at: table.module.clone(),
                            expected: pinned.clone(),
                            actual: digest,
                        },
                    ));
                }
                _ => table.digest = Some(digest),
            }
        }
    }
    Ok(draft)
}

/// This server's config with the set of `text` as its modules, each
/// fetched and checked (a registry module against its digest and the
/// trusted keys, a file against its SHA-256).
pub async fn effective(config: &Config, text: &str) -> Result<Config, ReloadError> {
    let draft = SetDraft::parse(text, Path::new("/"))?;
    let mut config = config.clone();
    config.policies = draft.policies()?;
    Ok(super::modules::fetch_modules(config).await?)
}

/// The set a term puts in service: the stored one, or `berth.toml`'s tables
/// stored as the first version when none is.
pub async fn in_service(
    config: Config,
    store: &Arc<dyn Store>,
    server: &str,
) -> Result<(Config, Option<PolicySetRecord>), ReloadError> {
    if let Some(set) = store.load_policy_set()? {
        if let Some(own) = config.policy_set.clone() {
            // Pinning hashes every module file (and may ask a registry): off
            // the takeover's path, for a warning only.
            let (config, stored) = (config.clone(), set.text.clone());
            tokio::spawn(async move {
                if pin(own, &config).await.is_ok_and(|p| p.text() != stored) {
                    tracing::warn!(
                        "berth.toml's [[policy]] tables are not the cluster's policy set; the set is what runs (`berth policy reload` applies the file's)"
                    );
                }
            });
        }
        let effective = effective(&config, &set.text).await?;
        tracing::info!(version = set.version, applied_by = %set.applied_by, "policy set in service");
        return Ok((effective, Some(set)));
    }
    let Some(own) = config.policy_set.clone() else {
        return Ok((config, None));
    };
    let text = pin(own, &config).await?.text();
    let effective = effective(&config, &text).await?;
    let set = PolicySetRecord::first(text, server, "seeded from berth.toml".into());
    store.put_policy_set(&set).await?;
    tracing::info!(
        version = 1,
        "policy set stored from berth.toml's [[policy]] tables"
    );
    Ok((effective, Some(set)))
}

/// Puts the set a takeover would run on this server's disk and checks it:
/// every module fetched, checked and compiled (into the compiled-code cache,
/// with the term's engine settings), then dropped. The set is the stored one,
/// or this server's own `[[policy]]` tables while none is stored.
pub async fn prepare(config: &Config, stored: Option<&PolicySetRecord>) -> Result<String, ReloadError> {
    let text = match stored {
        Some(set) => set.text.clone(),
        None => match &config.policy_set {
            Some(own) => pin(own.clone(), config).await?.text(),
            None => String::new(),
        },
    };
    let effective = effective(config, &text).await?;
    tokio::task::spawn_blocking(move || {
        // The term's own settings: the pools a module needs, and the
        // compiled code a takeover then maps.
        let options = super::engine_options(&effective);
        let engine =
            crate::policy::PolicyEngine::new(options).map_err(|e| ReloadError::Engine(format!("{e:#}")))?;
        let policies =
            crate::policy::Policies::new(Arc::new(engine), crate::policy::builtin::Builtins::default());
        super::put_modules(&policies, &effective)?;
        Ok(text)
    })
    .await
    .map_err(ReloadError::Stopped)?
}
