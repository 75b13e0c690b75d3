//! `berth store check`: the embedded store's own check, for a server that
//! is stopped. redb's integrity check (its checksums and page tree; a file
//! it must repair is repaired, as the next start would), then every record
//! read back as a start would read it. Nothing else is written.

use std::path::Path;

use super::{ACL, CHECKS, NODES, POLICY, TOKENS, VOLUMES, guarded, open_read, read_all};
use redb::{ReadableDatabase, ReadableTable};

use crate::{StoreError, decode, failed};

/// What the check found.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct StoreCheck {
    /// redb's integrity check found damage and repaired it (the last
    /// transaction written in full is what is left).
    pub repaired: bool,
    pub volumes: usize,
    pub nodes: usize,
    pub join_tokens: usize,
    pub acl_records: usize,
    pub policy_sets: usize,
    pub plugin_checks: usize,
    /// Records that do not read back (each named, with why).
    pub unreadable: Vec<String>,
}

/// Checks the store file at `path`; an error when it cannot be opened (a
/// server holds it, say) or is damaged past repair.
pub fn check_file(path: &Path) -> Result<StoreCheck, StoreError> {
    let open_error = |message: String| StoreError::Open {
        path: path.to_path_buf(),
        message,
    };
    if !path.exists() {
        return Err(open_error("there is no store file there".into()));
    }
    guarded(path, || {
        let mut db = redb::Database::open(path).map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => open_error(
                "a running berth serve holds it: stop it first (the check needs the file alone)".into(),
            ),
            e => open_error(e.to_string()),
        })?;
        let passed = db
            .check_integrity()
            .map_err(|e| open_error(format!("damaged past repair ({e}): restore it from a backup")))?;
        let mut found = StoreCheck {
            repaired: !passed,
            ..StoreCheck::default()
        };
        let txn = db.begin_read().map_err(failed)?;
        if let Some(table) = open_read(&txn, VOLUMES)? {
            for entry in table.iter().map_err(failed)? {
                let (key, value) = entry.map_err(failed)?;
                match decode(key.value(), value.value()) {
                    Ok(_) => found.volumes += 1,
                    Err(e) => found.unreadable.push(e.to_string()),
                }
            }
        }
        drop(txn);
        let mut json = |table, what: &str| match read_all::<serde_json::Value>(&db, table, what) {
            Ok(all) => all.len(),
            Err(e) => {
                found.unreadable.push(e.to_string());
                0
            }
        };
        let (nodes, tokens, acl, policy) = (
            json(NODES, "node"),
            json(TOKENS, "join token"),
            json(ACL, "ACL record"),
            json(POLICY, "policy set"),
        );
        let checks = json(CHECKS, "plugin check");
        found.nodes = nodes;
        found.join_tokens = tokens;
        found.acl_records = acl;
        found.policy_sets = policy;
        found.plugin_checks = checks;
        // Typed reads, as a start makes them: a record of the wrong shape is named.
        for e in [
            read_all::<crate::NodeRecord>(&db, NODES, "node").err(),
            read_all::<crate::TokenRecord>(&db, TOKENS, "join token").err(),
            read_all::<crate::AclRecord>(&db, ACL, "ACL record").err(),
            read_all::<crate::PolicySetRecord>(&db, POLICY, "policy set").err(),
            read_all::<crate::PluginCheckRecord>(&db, CHECKS, "plugin check").err(),
        ]
        .into_iter()
        .flatten()
        {
            found.unreadable.push(e.to_string());
        }
        found.unreadable.dedup();
        Ok(found)
    })
}
