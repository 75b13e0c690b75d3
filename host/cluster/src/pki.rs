//! The cluster's own certificate authority: made on the first start with a
//! TLS cluster endpoint, kept in the state directory (owner-only). It issues
//! the server's certificate on every start and each agent's when it joins.
//!
//! Join tokens, which carry the CA's fingerprint for the agent to pin, are
//! in `tokens.rs`.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, DnType, ExtendedKeyUsagePurpose,
    IsCa, Issuer, KeyPair, KeyUsagePurpose,
};

use berth_store::{private_dir, private_file};

/// The common name of every server's certificate. A node's certificate
/// names the node, and node names have no spaces, so none can be mistaken
/// for a server's.
const SERVER_NAME: &str = "berth serve";

/// Whether `der` (a certificate the handshake already checked against the
/// cluster CA) is a server's: its name is the servers' and it may serve.
pub fn is_server_certificate(der: &[u8]) -> bool {
    use x509_parser::prelude::{FromDer, X509Certificate};
    let Ok((_, cert)) = X509Certificate::from_der(der) else {
        return false;
    };
    let named = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        == Some(SERVER_NAME);
    let serves = cert
        .extended_key_usage()
        .ok()
        .flatten()
        .is_some_and(|eku| eku.value.server_auth);
    named && serves
}

/// The first common name of a certificate's subject (DER), if it reads.
pub fn common_name(der: &[u8]) -> Option<String> {
    use x509_parser::prelude::{FromDer, X509Certificate};
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    let cn = cert.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_string)
}

pub use berth_model::credentials::fingerprint;
use berth_model::files::FileError;

pub struct ClusterCa {
    cert_pem: String,
    cert_der: Vec<u8>,
    key: KeyPair,
}

/// Why the cluster CA could not be read, made or used.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error(transparent)]
    File(#[from] FileError),
    #[error("a certificate is not valid PEM: {0}")]
    Pem(#[from] rustls::pki_types::pem::Error),
    /// Making, reading or signing a certificate or key: what was being done.
    #[error("{doing}: {source}")]
    Certificate {
        doing: String,
        #[source]
        source: rcgen::Error,
    },
    #[error("{}: {error}", dir.display())]
    In { dir: PathBuf, error: Box<PkiError> },
}

fn certificate(doing: impl Into<String>) -> impl FnOnce(rcgen::Error) -> PkiError {
    let doing = doing.into();
    move |source| PkiError::Certificate { doing, source }
}

fn write_private(path: &Path, text: &str) -> Result<(), PkiError> {
    private_file(path).map_err(FileError::at("creating", path))?;
    Ok(std::fs::write(path, text).map_err(FileError::at("writing", path))?)
}

fn read(path: &Path) -> Result<String, PkiError> {
    Ok(std::fs::read_to_string(path).map_err(FileError::at("reading", path))?)
}

/// The DER form of the first certificate in `pem`.
pub fn pem_to_der(pem: &str) -> Result<Vec<u8>, PkiError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    Ok(CertificateDer::from_pem_slice(pem.as_bytes()).map(|c| c.to_vec())?)
}

impl ClusterCa {
    /// The CA in `dir` (`ca.pem`, `ca.key`), made there first if it is not.
    pub fn load_or_create(dir: &Path) -> Result<ClusterCa, PkiError> {
        private_dir(dir).map_err(FileError::at("creating", dir))?;
        let (cert_path, key_path) = (dir.join("ca.pem"), dir.join("ca.key"));
        if cert_path.exists() && key_path.exists() {
            return ClusterCa::from_pem(&read(&cert_path)?, &read(&key_path)?).map_err(|e| PkiError::In {
                dir: dir.to_path_buf(),
                error: Box::new(e),
            });
        }
        let ca = ClusterCa::generate()?;
        write_private(&key_path, &ca.key_pem())?;
        write_private(&cert_path, &ca.cert_pem)?;
        tracing::info!(ca = %cert_path.display(), fingerprint = %ca.fingerprint(), "CA made (a new CA: its certificate is ca.pem)");
        Ok(ca)
    }

    /// A CA from its certificate and private key.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<ClusterCa, PkiError> {
        let key = KeyPair::from_pem(key_pem).map_err(certificate("the CA's key"))?;
        let cert_der = pem_to_der(cert_pem)?;
        Ok(ClusterCa {
            cert_pem: cert_pem.to_string(),
            cert_der,
            key,
        })
    }

    /// A new CA, valid until 2100.
    pub fn generate() -> Result<ClusterCa, PkiError> {
        let key = KeyPair::generate().map_err(certificate("making the cluster CA's key"))?;
        let mut params =
            CertificateParams::new(Vec::<String>::new()).map_err(certificate("making the cluster CA"))?;
        params
            .distinguished_name
            .push(DnType::CommonName, "Berth cluster CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
        params.not_after = rcgen::date_time_ymd(2100, 1, 1);
        let cert = params
            .self_signed(&key)
            .map_err(certificate("making the cluster CA"))?;
        Ok(ClusterCa {
            cert_pem: cert.pem(),
            cert_der: cert.der().to_vec(),
            key,
        })
    }

    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    pub fn fingerprint(&self) -> String {
        fingerprint(&self.cert_der)
    }

    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    fn issuer(&self) -> Result<Issuer<'_, &KeyPair>, PkiError> {
        Issuer::from_ca_cert_pem(&self.cert_pem, &self.key).map_err(certificate("reading the cluster CA"))
    }

    /// The server's certificate chain (its own, then the CA's) and key, for
    /// `names`: what its TLS endpoint presents, and what it presents as a
    /// client when it passes an API call on to the leader.
    pub fn server_identity(&self, names: &[String]) -> Result<(String, String), PkiError> {
        let key = KeyPair::generate().map_err(certificate("making the server's key"))?;
        let mut params = CertificateParams::new(names.to_vec()).map_err(certificate("cluster_names"))?;
        params.distinguished_name.push(DnType::CommonName, SERVER_NAME);
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.not_after = rcgen::date_time_ymd(2100, 1, 1);
        let cert = params
            .signed_by(&key, &self.issuer()?)
            .map_err(certificate("issuing the server's certificate"))?;
        Ok((format!("{}{}", cert.pem(), self.cert_pem), key.serialize_pem()))
    }

    /// An agent's certificate from its request, for `node` whatever it
    /// asked: a client certificate, never a CA. Returns it and its fingerprint.
    pub fn sign_agent(&self, node: &str, csr_pem: &str) -> Result<(String, String), PkiError> {
        let mut csr = CertificateSigningRequestParams::from_pem(csr_pem)
            .map_err(certificate("the certificate request is not valid"))?;
        let mut params = CertificateParams::new(Vec::<String>::new())
            .map_err(certificate(format!("issuing node {node:?}'s certificate")))?;
        params.distinguished_name.push(DnType::CommonName, node);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.not_after = rcgen::date_time_ymd(2100, 1, 1);
        csr.params = params;
        let cert = csr
            .signed_by(&self.issuer()?)
            .map_err(certificate(format!("issuing node {node:?}'s certificate")))?;
        Ok((cert.pem(), fingerprint(cert.der())))
    }
}

/// Where a server keeps its cluster CA: beside its store.
pub fn ca_dir(state: &Path) -> PathBuf {
    state.parent().unwrap_or(Path::new(".")).join("cluster")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ca_is_made_once_and_kept_for_its_owner() {
        let dir = tempfile::tempdir().unwrap();
        let ca = ClusterCa::load_or_create(&dir.path().join("cluster")).unwrap();
        let again = ClusterCa::load_or_create(&dir.path().join("cluster")).unwrap();
        assert_eq!(ca.fingerprint(), again.fingerprint(), "the CA is kept");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("cluster/ca.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn an_agent_gets_a_client_certificate_for_its_node() {
        let dir = tempfile::tempdir().unwrap();
        let ca = ClusterCa::load_or_create(dir.path()).unwrap();
        let key = KeyPair::generate().unwrap();
        let csr = CertificateParams::new(vec!["ignored.example".to_string()])
            .unwrap()
            .serialize_request(&key)
            .unwrap()
            .pem()
            .unwrap();
        let (cert, fp) = ca.sign_agent("node-a", &csr).unwrap();
        assert_eq!(fingerprint(&pem_to_der(&cert).unwrap()), fp);
        assert!(ca.sign_agent("node-a", "garbage").is_err());
        let (chain, _) = ca.server_identity(&["127.0.0.1".into()]).unwrap();
        assert_eq!(chain.matches("BEGIN CERTIFICATE").count(), 2, "leaf and CA");
    }
}
