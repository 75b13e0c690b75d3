//! The key-encryption key: 32 random bytes in each server's state directory
//! (`cluster/kek`, owner-only), never in etcd. The cluster CA's private key is
//! kept in etcd only sealed under it (ChaCha20-Poly1305, bound to the CA's
//! certificate), so a reader of etcd learns nothing that lets it act as the
//! cluster. Every server sharing a prefix needs the same file: the first
//! server makes it; an operator copies it to the others.

use std::path::{Path, PathBuf};

use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use sha2::{Digest, Sha256};

use berth_model::credentials::hex;
use berth_model::files::FileError;
use berth_store::{private_dir, private_file};

const KEY_LEN: usize = 32;

/// Why a key could not be kept, or a value not sealed or opened.
#[derive(Debug, thiserror::Error)]
pub enum KekError {
    #[error(transparent)]
    File(#[from] FileError),
    #[error("{} is not a key-encryption key (64 hex digits)", .0.display())]
    NotAKey(PathBuf),
    #[error("no randomness for {0}")]
    NoRandomness(&'static str),
    #[error("sealing failed")]
    Seal,
    #[error("not a sealed value")]
    NotSealed,
    #[error("it does not open with this key (another key sealed it, or it was altered)")]
    WrongKey,
}

pub struct Kek {
    key: [u8; KEY_LEN],
    path: PathBuf,
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    let text = text.trim();
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

impl Kek {
    /// Where a server keeps it: in the cluster directory beside its CA.
    pub fn path(cluster_dir: &Path) -> PathBuf {
        cluster_dir.join("kek")
    }

    /// The key kept in `cluster_dir`, if there is one.
    pub fn load(cluster_dir: &Path) -> Result<Option<Kek>, KekError> {
        let path = Kek::path(cluster_dir);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(FileError::at("reading", &path)(e).into()),
        };
        let key: [u8; KEY_LEN] = unhex(&text)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| KekError::NotAKey(path.clone()))?;
        Ok(Some(Kek { key, path }))
    }

    /// A new key, written to `cluster_dir` (owner-only).
    pub fn create(cluster_dir: &Path) -> Result<Kek, KekError> {
        private_dir(cluster_dir).map_err(FileError::at("creating", cluster_dir))?;
        let mut key = [0u8; KEY_LEN];
        SystemRandom::new()
            .fill(&mut key)
            .map_err(|_| KekError::NoRandomness("a key-encryption key"))?;
        let path = Kek::path(cluster_dir);
        private_file(&path).map_err(FileError::at("creating", &path))?;
        std::fs::write(&path, format!("{}\n", hex(&key))).map_err(FileError::at("writing", &path))?;
        Ok(Kek { key, path })
    }

    /// A short name for the key (not the key): which one sealed a value.
    pub fn id(&self) -> String {
        hex(&Sha256::digest(self.key))[..16].to_string()
    }

    pub fn file(&self) -> &Path {
        &self.path
    }

    fn sealing_key(&self) -> LessSafeKey {
        LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, &self.key).expect("a 32-byte key"))
    }

    /// `plaintext` sealed, bound to `context`: hex of the nonce and the ciphertext.
    pub fn seal(&self, plaintext: &[u8], context: &str) -> Result<String, KekError> {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new()
            .fill(&mut nonce)
            .map_err(|_| KekError::NoRandomness("a nonce"))?;
        let mut sealed = plaintext.to_vec();
        self.sealing_key()
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(context.as_bytes()),
                &mut sealed,
            )
            .map_err(|_| KekError::Seal)?;
        Ok(format!("{}{}", hex(&nonce), hex(&sealed)))
    }

    /// What [`Kek::seal`] sealed with this key and `context`.
    pub fn open(&self, sealed: &str, context: &str) -> Result<Vec<u8>, KekError> {
        let bytes = unhex(sealed)
            .filter(|b| b.len() > NONCE_LEN)
            .ok_or(KekError::NotSealed)?;
        let (nonce, rest) = bytes.split_at(NONCE_LEN);
        let mut rest = rest.to_vec();
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| KekError::NotSealed)?;
        let plain = self
            .sealing_key()
            .open_in_place(nonce, Aad::from(context.as_bytes()), &mut rest)
            .map_err(|_| KekError::WrongKey)?;
        Ok(plain.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_sealed_opens_only_with_its_key_and_context() {
        let dir = tempfile::tempdir().unwrap();
        assert!(Kek::load(dir.path()).unwrap().is_none());
        let kek = Kek::create(dir.path()).unwrap();
        let again = Kek::load(dir.path()).unwrap().unwrap();
        assert_eq!(kek.id(), again.id());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(kek.file()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);

        let sealed = kek.seal(b"the CA's key", "ca-1").unwrap();
        assert!(!sealed.contains(&hex(b"the CA's key")));
        assert_eq!(again.open(&sealed, "ca-1").unwrap(), b"the CA's key");
        assert!(kek.open(&sealed, "ca-2").is_err(), "bound to its context");
        let other = Kek::create(&dir.path().join("other")).unwrap();
        assert!(other.open(&sealed, "ca-1").is_err());
        let mut altered = sealed.clone();
        altered.replace_range(40..41, if &sealed[40..41] == "0" { "1" } else { "0" });
        assert!(kek.open(&altered, "ca-1").is_err());
    }
}
