//! The cluster CA as every server sharing the prefix must have it (agents
//! trust one CA, whichever server leads): made by the first server to need
//! it, kept in etcd at `<prefix>/cluster/ca` with its private key sealed under
//! the key-encryption key in each server's state directory. A copy of what
//! etcd holds is kept beside that key (`cluster/ca.json`), for an operator
//! to put back should etcd lose it.
//!
//! A CA missing from etcd while nodes hold certificates from it is not made
//! again: every agent would be refused. The server says how to restore it.

use std::path::Path;

use berth_proto::etcd::etcdserverpb as pb;

use super::{Created, Found, Vanished, create_or_read};
use crate::cluster::kek::{Kek, KekError};
use crate::cluster::pki::{ClusterCa, PkiError};
use crate::store::{EtcdError, EtcdSettings, Members, NodeRecord, StoreError, range_all};

/// Why this server has no cluster CA to serve with; each says what to do.
#[derive(Debug, thiserror::Error)]
pub enum SharedCaError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Etcd(#[from] EtcdError),
    #[error(transparent)]
    Kek(#[from] KekError),
    #[error(transparent)]
    Pki(#[from] PkiError),
    #[error(
        "the cluster CA is missing from etcd ({key}) while {certified} node(s) hold certificates from it; a new CA would lock every agent out, so none is made: {how}"
    )]
    Missing {
        key: String,
        certified: usize,
        how: String,
    },
    #[error("the cluster CA in etcd vanished while it was read")]
    Vanished,
    #[error("the cluster CA in etcd is unreadable: {0}")]
    Unreadable(serde_json::Error),
    #[error(
        "the cluster CA's key in etcd is sealed under a key-encryption key this server does not have: copy {} from a server of this cluster (the first one made it) to {}",
        Kek::path(Path::new("<its state directory>/cluster")).display(),
        .0.display()
    )]
    NoKek(std::path::PathBuf),
    #[error(
        "the cluster CA's key in etcd is sealed under key-encryption key {sealed_by}, and {} is {ours}: copy the right file from another server",
        .file.display()
    )]
    OtherKek {
        sealed_by: String,
        file: std::path::PathBuf,
        ours: String,
    },
    #[error("the cluster CA's key in etcd: {0}")]
    Key(String),
    #[error("the cluster CA in etcd has no key")]
    NoKey,
    #[error(transparent)]
    File(#[from] crate::model::files::FileError),
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Kept {
    cert: String,
    /// The key in plain PEM, as releases before sealing wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    key: Option<String>,
    /// The key sealed under the key-encryption key `kek`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sealed_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kek: Option<String>,
}

fn sealed(ca: &ClusterCa, kek: &Kek) -> Result<Vec<u8>, SharedCaError> {
    let kept = Kept {
        cert: ca.cert_pem().to_string(),
        key: None,
        sealed_key: Some(kek.seal(ca.key_pem().as_bytes(), &ca.fingerprint())?),
        kek: Some(kek.id()),
    };
    Ok(serde_json::to_vec(&kept).expect("strings encode"))
}

/// The cluster CA, with this server's key-encryption key from `dir` (the
/// cluster directory in its state directory).
pub async fn shared_ca(settings: &EtcdSettings, dir: &Path) -> Result<ClusterCa, SharedCaError> {
    let kv = Members::new(settings)?;
    let key = settings.key("cluster/ca");
    let backup = dir.join("ca.json");
    let read = pb::RangeRequest {
        key: key.clone(),
        ..Default::default()
    };
    let found = kv
        .call(|mut c| {
            let read = read.clone();
            async move { c.range(read).await }
        })
        .await?
        .kvs
        .into_iter()
        .next();
    let found = match found {
        Some(found) => found,
        None => {
            let certified = nodes_with_certificates(&kv, settings).await?;
            if certified > 0 {
                let how = match backup.exists() {
                    true => format!(
                        "put this server's copy back: etcdctl put {} < {}",
                        String::from_utf8_lossy(&key),
                        backup.display()
                    ),
                    false => "restore it from a backup of etcd, or put back a copy kept by another server (cluster/ca.json in its state directory) with etcdctl put".into(),
                };
                return Err(SharedCaError::Missing {
                    key: String::from_utf8_lossy(&key).into_owned(),
                    certified,
                    how,
                });
            }
            let kek = match Kek::load(dir)? {
                Some(k) => k,
                None => Kek::create(dir)?,
            };
            let made = ClusterCa::generate()?;
            let value = sealed(&made, &kek)?;
            match create_or_read(&kv, &key, value.clone(), 0).await? {
                Created(_) => {
                    keep_copy(&backup, &value)?;
                    tracing::warn!(
                        fingerprint = %made.fingerprint(),
                        kek = %kek.file().display(),
                        "cluster CA made and kept in etcd, its key sealed: copy the key-encryption key file to every other server sharing this prefix"
                    );
                    return Ok(made);
                }
                Found(kept) => kept,
                Vanished => return Err(SharedCaError::Vanished),
            }
        }
    };
    let kept: Kept = serde_json::from_slice(&found.value).map_err(SharedCaError::Unreadable)?;
    match (&kept.sealed_key, &kept.key) {
        (Some(sealed_key), _) => {
            let kek = Kek::load(dir)?.ok_or_else(|| SharedCaError::NoKek(Kek::path(dir)))?;
            if kept.kek.as_deref() != Some(kek.id().as_str()) {
                return Err(SharedCaError::OtherKek {
                    sealed_by: kept.kek.as_deref().unwrap_or("?").to_string(),
                    file: kek.file().to_path_buf(),
                    ours: kek.id(),
                });
            }
            let fingerprint = crate::cluster::pki::fingerprint(&crate::cluster::pki::pem_to_der(&kept.cert)?);
            let key_pem = kek.open(sealed_key, &fingerprint)?;
            let key_pem = String::from_utf8(key_pem).map_err(|e| SharedCaError::Key(e.to_string()))?;
            let ca = ClusterCa::from_pem(&kept.cert, &key_pem)?;
            keep_copy(&backup, &found.value)?;
            Ok(ca)
        }
        (None, Some(plain)) => {
            // Written by a release that kept the key in plain text: sealed now,
            // in place, if nothing changed it meanwhile.
            let ca = ClusterCa::from_pem(&kept.cert, plain)?;
            let kek = match Kek::load(dir)? {
                Some(k) => k,
                None => Kek::create(dir)?,
            };
            let value = sealed(&ca, &kek)?;
            if replace(&kv, &key, found.mod_revision, value.clone()).await? {
                keep_copy(&backup, &value)?;
                tracing::warn!(
                    kek = %kek.file().display(),
                    "the cluster CA's key was kept in etcd in plain text (an earlier release); it is now sealed: copy the key-encryption key file to every other server sharing this prefix"
                );
            }
            Ok(ca)
        }
        (None, None) => Err(SharedCaError::NoKey),
    }
}

/// Keeps what etcd holds of the CA beside the key-encryption key.
fn keep_copy(path: &Path, value: &[u8]) -> Result<(), SharedCaError> {
    use crate::model::files::FileError;
    if let Some(dir) = path.parent() {
        crate::store::private_dir(dir).map_err(FileError::at("creating", dir))?;
    }
    crate::store::private_file(path).map_err(FileError::at("creating", path))?;
    std::fs::write(path, value).map_err(FileError::at("writing", path))?;
    Ok(())
}

/// Nodes registered below the prefix that joined with a certificate.
async fn nodes_with_certificates(kv: &Members, settings: &EtcdSettings) -> Result<usize, EtcdError> {
    let nodes = range_all(kv, settings.key("nodes/").as_slice()).await?;
    Ok(nodes
        .iter()
        .filter(|(_, value)| serde_json::from_slice::<NodeRecord>(value).is_ok_and(|n| n.cert.is_some()))
        .count())
}

/// `key` set to `value` if it was last changed at `revision`.
async fn replace(kv: &Members, key: &[u8], revision: i64, value: Vec<u8>) -> Result<bool, EtcdError> {
    use pb::compare::{CompareResult, CompareTarget, TargetUnion};
    use pb::request_op::Request;
    let txn = pb::TxnRequest {
        compare: vec![pb::Compare {
            result: CompareResult::Equal as i32,
            target: CompareTarget::Mod as i32,
            key: key.to_vec(),
            target_union: Some(TargetUnion::ModRevision(revision)),
            range_end: Vec::new(),
        }],
        success: vec![pb::RequestOp {
            request: Some(Request::RequestPut(pb::PutRequest {
                key: key.to_vec(),
                value,
                ..Default::default()
            })),
        }],
        failure: Vec::new(),
    };
    let answer = kv
        .call(|mut c| {
            let txn = txn.clone();
            async move { c.txn(txn).await }
        })
        .await?;
    Ok(answer.succeeded)
}
