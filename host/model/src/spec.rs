//! What the operator declares about a volume.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::Segments;

/// What the operator declared.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeSpec {
    pub name: String,
    /// Where the name is unique; records from before namespaces are in the default one.
    #[serde(default, skip_serializing_if = "crate::namespace::is_default")]
    pub namespace: crate::Namespace,
    pub plugin: String,
    pub required_bytes: i64,
    pub limit_bytes: i64,
    pub access_mode: AccessMode,
    /// Stored as `block: bool`, the spelling of the first store format.
    #[serde(rename = "block", with = "block_flag")]
    pub access_type: AccessType,
    /// For [`AccessType::Mount`] only.
    pub fs_type: String,
    /// For [`AccessType::Mount`] only.
    pub mount_flags: Vec<String>,
    pub parameters: Segments,
    /// A secret's name; its contents are read when a call needs them, never stored.
    pub secret: Option<String>,
    pub requisite_topology: Vec<Segments>,
    pub preferred_topology: Vec<Segments>,
    pub labels: Segments,
    /// What the volume starts from: a snapshot, or a copy of another volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Box<VolumeSource>>,
    /// Parameters the plugin may change after creation (CSI's
    /// ControllerModifyVolume): what the operator wants them to be.
    #[serde(default, skip_serializing_if = "Segments::is_empty")]
    pub mutable_parameters: Segments,
}

impl VolumeSpec {
    /// The volume's name with its namespace.
    pub fn volume_name(&self) -> crate::VolumeName {
        crate::VolumeName::new(self.namespace.clone(), self.name.clone())
    }
}

/// A new volume's content source, named by the operator and resolved to the
/// plugin's id when the volume is declared (so it stays the same source).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeSource {
    pub kind: SourceKind,
    /// The snapshot's or volume's name in Berth.
    pub name: String,
    /// Its id on the plugin; empty until resolved.
    pub id: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SourceKind {
    Snapshot,
    Volume,
}

impl SourceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Snapshot => "snapshot",
            SourceKind::Volume => "volume",
        }
    }
}

/// How a volume may be used across nodes: CSI's access modes, spelled as in
/// `berth:policy`'s WIT (`single-node-writer`, ...).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AccessMode {
    #[default]
    SingleNodeWriter,
    SingleNodeReaderOnly,
    MultiNodeReaderOnly,
    MultiNodeSingleWriter,
    MultiNodeMultiWriter,
    SingleNodeSingleWriter,
    SingleNodeMultiWriter,
}

impl AccessMode {
    pub const ALL: [AccessMode; 7] = [
        AccessMode::SingleNodeWriter,
        AccessMode::SingleNodeReaderOnly,
        AccessMode::MultiNodeReaderOnly,
        AccessMode::MultiNodeSingleWriter,
        AccessMode::MultiNodeMultiWriter,
        AccessMode::SingleNodeSingleWriter,
        AccessMode::SingleNodeMultiWriter,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AccessMode::SingleNodeWriter => "single-node-writer",
            AccessMode::SingleNodeReaderOnly => "single-node-reader-only",
            AccessMode::MultiNodeReaderOnly => "multi-node-reader-only",
            AccessMode::MultiNodeSingleWriter => "multi-node-single-writer",
            AccessMode::MultiNodeMultiWriter => "multi-node-multi-writer",
            AccessMode::SingleNodeSingleWriter => "single-node-single-writer",
            AccessMode::SingleNodeMultiWriter => "single-node-multi-writer",
        }
    }

    /// Whether the volume may be published on one node at a time only.
    pub fn is_single_node(self) -> bool {
        matches!(
            self,
            AccessMode::SingleNodeWriter
                | AccessMode::SingleNodeReaderOnly
                | AccessMode::SingleNodeSingleWriter
                | AccessMode::SingleNodeMultiWriter
        )
    }
}

impl fmt::Display for AccessMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AccessMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        AccessMode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = AccessMode::ALL.iter().map(|m| m.as_str()).collect();
                format!("{s:?} is not one of {}", names.join(", "))
            })
    }
}

/// Whether the volume is a file system (mounted) or a raw block device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum AccessType {
    #[default]
    Mount,
    Block,
}

impl AccessType {
    pub fn as_str(self) -> &'static str {
        match self {
            AccessType::Mount => "mount",
            AccessType::Block => "block",
        }
    }
}

/// [`AccessType`] as the `block` flag records have always carried.
mod block_flag {
    use super::AccessType;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(t: &AccessType, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bool(*t == AccessType::Block)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<AccessType, D::Error> {
        Ok(if bool::deserialize(d)? {
            AccessType::Block
        } else {
            AccessType::Mount
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_modes_keep_their_names_both_ways() {
        for m in AccessMode::ALL {
            assert_eq!(m.as_str().parse::<AccessMode>(), Ok(m));
            assert_eq!(serde_json::to_string(&m).unwrap(), format!("\"{m}\""));
        }
        let err = "rw".parse::<AccessMode>().unwrap_err();
        assert!(
            err.contains("single-node-writer") && err.contains("\"rw\""),
            "{err}"
        );
    }

    #[test]
    fn the_access_type_is_stored_as_the_block_flag() {
        let spec = VolumeSpec {
            access_type: AccessType::Block,
            ..VolumeSpec::default()
        };
        let json = serde_json::to_value(&spec).unwrap();
        assert_eq!(json["block"], true);
        assert_eq!(json["access_mode"], "single-node-writer");
        let back: VolumeSpec = serde_json::from_value(json).unwrap();
        assert_eq!(back, spec);
    }
}
