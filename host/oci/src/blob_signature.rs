//! Signatures of module files (`required = true` covers modules given by
//! path): `<file>.sig` beside the file, base64 of the DER signature over its
//! bytes, as `cosign sign-blob --key` writes it.

use std::path::{Path, PathBuf};

use base64::Engine as _;

use crate::signature::Rejected;
use crate::{OciError, PublicKey, Trust};

/// Where a module file's signature is kept: `<file>.sig`, base64 of the DER
/// signature over the file's bytes, as `cosign sign-blob --key` writes it.
pub fn blob_signature_path(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_os_string();
    name.push(".sig");
    PathBuf::from(name)
}

/// The most a blob signature file may weigh (one is about 100 bytes).
const BLOB_SIGNATURE_MAX: u64 = 4 << 10;

impl Trust {
    /// The key that signed module file `file` (whose bytes are `bytes`), by
    /// the signature beside it (`<file>.sig`, cosign's `sign-blob` format);
    /// an error naming `module` when none did and one must have.
    pub fn check_file(
        &self,
        module: &str,
        file: &Path,
        bytes: &[u8],
    ) -> Result<Option<&PublicKey>, OciError> {
        let at = blob_signature_path(file);
        let mut seen = Vec::new();
        match std::fs::metadata(&at) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(OciError::file(&at, e)),
            Ok(m) if m.len() > BLOB_SIGNATURE_MAX => seen.push(Rejected::Skipped(format!(
                "{} is larger than {BLOB_SIGNATURE_MAX} bytes",
                at.display()
            ))),
            Ok(_) => {
                let text = std::fs::read_to_string(&at).map_err(|e| OciError::file(&at, e))?;
                let b64 = base64::engine::general_purpose::STANDARD;
                match b64.decode(text.trim()) {
                    Err(_) => seen.push(Rejected::Skipped(format!("{} is not base64", at.display()))),
                    Ok(sig) => match self.keys.iter().find(|k| k.verifies(bytes, &sig)) {
                        Some(key) => return Ok(Some(key)),
                        None => seen.push(Rejected::Skipped(format!(
                            "{} is not by a key trusted",
                            at.display()
                        ))),
                    },
                }
            }
        }
        self.none_verified(module, seen)
    }
}
