//! Built-in naming: `<prefix>-<sha256 of the volume id, 32 hex digits>`.

use sha2::{Digest, Sha256};

use crate::Volume;
use crate::answer::MAX_NAME_BYTES;

#[derive(Clone, Debug)]
pub struct BuiltinNaming {
    /// Put before the hash; cut so that the name stays within 128 bytes.
    pub prefix: String,
}

impl Default for BuiltinNaming {
    fn default() -> Self {
        BuiltinNaming {
            prefix: "berth".into(),
        }
    }
}

const HASH_HEX: usize = 32;

impl BuiltinNaming {
    /// Stable for a volume's whole life (it hashes Berth's id, not the
    /// operator's name) and unique in practice.
    pub fn volume_name(&self, volume: &Volume) -> String {
        let digest = Sha256::digest(volume.id.as_bytes());
        let mut name = String::with_capacity(MAX_NAME_BYTES);
        let room = MAX_NAME_BYTES - HASH_HEX - 1;
        let mut cut = self.prefix.len().min(room);
        while !self.prefix.is_char_boundary(cut) {
            cut -= 1;
        }
        name.push_str(&self.prefix[..cut]);
        if !name.is_empty() {
            name.push('-');
        }
        for b in &digest[..HASH_HEX / 2] {
            use std::fmt::Write;
            let _ = write!(name, "{b:02x}");
        }
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::samples::volume;
    use crate::validate_volume_name;

    #[test]
    fn prefix_and_hash_within_the_limit() {
        let naming = BuiltinNaming::default();
        let name = naming.volume_name(&volume("data"));
        assert!(name.starts_with("berth-"));
        assert_eq!(name.len(), "berth-".len() + 32);
        assert_eq!(name, naming.volume_name(&volume("data")), "stable");
        assert_ne!(name, naming.volume_name(&volume("other")));
        let long = BuiltinNaming {
            prefix: "é".repeat(100),
        };
        let name = long.volume_name(&volume("x"));
        assert!(name.len() <= 128);
        validate_volume_name(&name).unwrap();
        let bare = BuiltinNaming {
            prefix: String::new(),
        };
        assert_eq!(bare.volume_name(&volume("x")).len(), 32);
    }
}
