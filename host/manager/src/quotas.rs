//! Quotas per namespace: how many volumes, bytes and snapshots a namespace
//! may hold. A new volume is admitted under the table's lock, and a growth
//! or a snapshot takes its room there before it is written (the table's
//! reservations), so concurrent requests (on one server, or through several
//! on etcd, where the leader answers all) never pass a quota together. A quota lowered
//! below what a namespace holds refuses new requests and touches nothing
//! that exists.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use berth_store::{AclRecord, QuotaRecord, Store, StoreError};

/// What a namespace holds (or a request would add).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub volumes: u64,
    /// The bytes its volumes ask for (their required bytes).
    pub bytes: u64,
    pub snapshots: u64,
}

impl Usage {
    pub(crate) fn add(&mut self, other: &Usage, add: bool) {
        if add {
            self.volumes += other.volumes;
            self.bytes += other.bytes;
            self.snapshots += other.snapshots;
        } else {
            self.volumes = self.volumes.saturating_sub(other.volumes);
            self.bytes = self.bytes.saturating_sub(other.bytes);
            self.snapshots = self.snapshots.saturating_sub(other.snapshots);
        }
    }
}

/// A request refused because its namespace would pass a quota.
#[derive(Debug, thiserror::Error)]
#[error(
    "namespace {namespace:?} may hold at most {limit} {what}: it holds {used}, and the request asks for {asked} more"
)]
pub struct OverQuota {
    pub namespace: String,
    pub what: &'static str,
    pub limit: u64,
    pub used: u64,
    pub asked: u64,
}

/// Whether `quota` lets `namespace`, holding `used`, take `more`.
pub fn admits(quota: &QuotaRecord, used: &Usage, more: &Usage) -> Result<(), OverQuota> {
    for (what, limit, used, asked) in [
        ("volumes", quota.volumes, used.volumes, more.volumes),
        ("bytes", quota.bytes, used.bytes, more.bytes),
        ("snapshots", quota.snapshots, used.snapshots, more.snapshots),
    ] {
        if let Some(limit) = limit
            && asked > 0
            && used.saturating_add(asked) > limit
        {
            return Err(OverQuota {
                namespace: quota.namespace.clone(),
                what,
                limit,
                used,
                asked,
            });
        }
    }
    Ok(())
}

/// The quotas, by namespace, as stored.
pub struct Quotas {
    store: Arc<dyn Store>,
    by_namespace: RwLock<HashMap<String, QuotaRecord>>,
}

impl Quotas {
    pub(crate) fn load(store: Arc<dyn Store>) -> Result<Quotas, StoreError> {
        let by_namespace = store
            .load_acl()?
            .into_iter()
            .filter_map(|r| match r {
                AclRecord::Quota(q) => Some((q.namespace.clone(), q)),
                _ => None,
            })
            .collect();
        Ok(Quotas {
            store,
            by_namespace: RwLock::new(by_namespace),
        })
    }

    /// The namespace's quota, if it has one.
    pub fn get(&self, namespace: &str) -> Option<QuotaRecord> {
        self.by_namespace
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(namespace)
            .cloned()
    }

    /// Sets a namespace's quota (one with no limit removes it), durably
    /// first.
    pub async fn set(&self, quota: QuotaRecord) -> Result<(), StoreError> {
        let record = AclRecord::Quota(quota.clone());
        let unlimited = quota.volumes.is_none() && quota.bytes.is_none() && quota.snapshots.is_none();
        if unlimited {
            self.store.remove_acl(&record.key()).await?;
        } else {
            self.store.put_acl(&record).await?;
        }
        let mut all = self.by_namespace.write().unwrap_or_else(|p| p.into_inner());
        match unlimited {
            true => all.remove(&quota.namespace),
            false => all.insert(quota.namespace.clone(), quota),
        };
        Ok(())
    }

    /// Every quota set.
    pub fn all(&self) -> Vec<QuotaRecord> {
        let mut all: Vec<QuotaRecord> = self
            .by_namespace
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        all.sort_by(|a, b| a.namespace.cmp(&b.namespace));
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quota_refuses_what_would_pass_it_and_only_that() {
        let quota = QuotaRecord {
            namespace: "team-a".into(),
            volumes: Some(2),
            bytes: Some(10),
            snapshots: None,
        };
        let used = Usage {
            volumes: 1,
            bytes: 4,
            snapshots: 50,
        };
        let one = |bytes| Usage {
            volumes: 1,
            bytes,
            snapshots: 0,
        };
        assert!(admits(&quota, &used, &one(6)).is_ok());
        let e = admits(&quota, &used, &one(7)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "namespace \"team-a\" may hold at most 10 bytes: it holds 4, and the request asks for 7 more"
        );
        let full = Usage { volumes: 2, ..used };
        assert_eq!(admits(&quota, &full, &one(0)).unwrap_err().what, "volumes");
        // Lowered below what is held: nothing new, but a request asking for
        // nothing more (a snapshot here) is not refused for it.
        let lowered = QuotaRecord {
            volumes: Some(0),
            ..quota
        };
        assert!(
            admits(
                &lowered,
                &full,
                &Usage {
                    snapshots: 1,
                    ..Usage::default()
                }
            )
            .is_ok()
        );
    }
}
