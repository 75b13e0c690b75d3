//! Client certificates as identities: a certificate the API's client CA
//! issued says who calls by its subject's common name, and the operator
//! binds that name to policies, as a token holds them. The TLS handshake
//! has checked the certificate (its CA, its dates); what is left here is
//! the binding. Unbinding a subject refuses it from the next call on.
//!
//! Invariants:
//! - A subject bound to no policy is no one: its calls are refused as
//!   unauthenticated, whatever its certificate.
//! - A binding names only policies that exist when it is made; a policy
//!   deleted later grants nothing to the subjects still naming it.

use berth_model::clock::now_ms;
use berth_store::{AclCertificateRecord, AclRecord};

use crate::access::{Acl, AclError, Caller, MAX_TOKEN_POLICIES, Unauthenticated};

/// Subjects bound at most.
pub const MAX_CERTIFICATES: usize = 4096;
/// A subject's common name, at most (bytes).
pub const SUBJECT_MAX: usize = 256;

/// Whether `subject` may name a caller: printable, bounded, and no `/`
/// (it is part of a store key).
pub fn valid_subject(subject: &str) -> bool {
    !subject.is_empty()
        && subject.len() <= SUBJECT_MAX
        && subject.chars().all(|c| c.is_ascii_graphic() || c == ' ')
        && !subject.contains('/')
}

impl Acl {
    /// The caller a verified client certificate's subject stands for.
    pub fn authenticate_certificate(&self, subject: &str) -> Result<Caller, Unauthenticated> {
        if !self.read().certificates.contains_key(subject) {
            return Err(Unauthenticated::Unbound {
                subject: subject.to_string(),
            });
        }
        Ok(Caller::Certificate {
            subject: subject.to_string(),
        })
    }

    /// Binds `subject` to `policies` (each must exist), replacing what it
    /// held: its next call has the new grant.
    pub async fn bind_certificate(
        &self,
        subject: String,
        mut policies: Vec<String>,
    ) -> Result<AclCertificateRecord, AclError> {
        if !valid_subject(&subject) {
            return Err(AclError::Subject(subject));
        }
        if policies.is_empty() {
            return Err(AclError::NoGrant);
        }
        if policies.len() > MAX_TOKEN_POLICIES {
            return Err(AclError::TooMany {
                what: "policies of one certificate subject",
                most: MAX_TOKEN_POLICIES,
            });
        }
        policies.sort();
        policies.dedup();
        let _changing = self.changing.lock().await;
        if let Some(missing) = self.missing_policy(&policies) {
            return Err(AclError::NoPolicy(missing.clone()));
        }
        {
            let state = self.read();
            if !state.certificates.contains_key(&subject) && state.certificates.len() >= MAX_CERTIFICATES {
                return Err(AclError::TooMany {
                    what: "bound certificate subjects",
                    most: MAX_CERTIFICATES,
                });
            }
        }
        let record = AclCertificateRecord {
            subject,
            policies,
            modified_ms: now_ms(),
        };
        self.store
            .put_acl(&AclRecord::Certificate(record.clone()))
            .await?;
        self.write()
            .certificates
            .insert(record.subject.clone(), record.clone());
        Ok(record)
    }

    /// Unbinds `subject`: refused from the next call on.
    pub async fn unbind_certificate(&self, subject: &str) -> Result<AclCertificateRecord, AclError> {
        let _changing = self.changing.lock().await;
        let record = self
            .read()
            .certificates
            .get(subject)
            .cloned()
            .ok_or_else(|| AclError::NoCertificate(subject.to_string()))?;
        self.store
            .remove_acl(&AclRecord::Certificate(record.clone()).key())
            .await?;
        self.write().certificates.remove(subject);
        Ok(record)
    }

    /// Every bound subject, by subject.
    pub fn certificates(&self) -> Vec<AclCertificateRecord> {
        self.read().certificates.values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capability::{Needs, VolumeCap};
    use std::sync::Arc;

    #[tokio::test]
    async fn a_bound_subject_holds_its_policies_until_unbound_and_across_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let open = || -> Arc<dyn berth_store::Store> {
            Arc::new(berth_store::RedbStore::open(&dir.path().join("state.redb")).unwrap())
        };
        let acl = Acl::load(open()).unwrap();
        assert!(matches!(
            acl.authenticate_certificate("alice"),
            Err(Unauthenticated::Unbound { .. })
        ));
        assert!(matches!(
            acl.bind_certificate("alice".into(), vec!["team-a".into()]).await,
            Err(AclError::NoPolicy(_))
        ));
        for bad in ["", "a/b", "tab\there", &"x".repeat(SUBJECT_MAX + 1)] {
            assert!(matches!(
                acl.bind_certificate(bad.into(), vec!["team-a".into()]).await,
                Err(AclError::Subject(_))
            ));
        }
        let rules = "[namespace.team-a]\ncapabilities = [\"list\", \"read\"]\n".to_string();
        acl.apply_policy("team-a".into(), String::new(), rules)
            .await
            .unwrap();
        acl.bind_certificate("alice".into(), vec!["team-a".into()])
            .await
            .unwrap();
        let alice = acl.authenticate_certificate("alice").unwrap();
        assert_eq!(alice.identity(), "cert:alice");
        assert!(acl.allows(&alice, Needs::Volumes(VolumeCap::Read), "team-a"));
        assert!(!acl.allows(&alice, Needs::Volumes(VolumeCap::Write), "team-a"));
        assert!(!acl.allows(&alice, Needs::Volumes(VolumeCap::Read), "team-b"));

        drop(acl);
        let acl = Acl::load(open()).unwrap();
        let alice = acl.authenticate_certificate("alice").unwrap();
        assert!(acl.allows(&alice, Needs::Volumes(VolumeCap::List), "team-a"));
        acl.unbind_certificate("alice").await.unwrap();
        assert!(acl.authenticate_certificate("alice").is_err());
        assert!(!acl.allows(&alice, Needs::Caller, ""));
        assert!(matches!(
            acl.unbind_certificate("alice").await,
            Err(AclError::NoCertificate(_))
        ));
    }
}
