//! What the server and a node's agent share about a node: how far a volume
//! is on it (one type for the agent's record, the wire and the manager) and
//! where the agent stages and publishes.

use std::path::{Path, PathBuf};

use berth_proto::berth::v1::NodeLevel as WireLevel;
use serde::{Deserialize, Serialize};

use super::bounds::{self, OutOfBounds};

/// The header naming the calling node on the cluster's unix endpoint, for
/// the node-bounded volume calls (on the TLS endpoint, the certificate does).
pub const NODE_HEADER: &str = "berth-node";

/// The header with which a caller of the whole Berth API (`berth serve`'s
/// own Docker plugin, on the API socket) asks to be bounded to a node's
/// Docker: its volume calls are then judged as that Docker's.
pub const DOCKER_NODE_HEADER: &str = "berth-docker-node";

/// How far a volume is on a node, in the order steps take it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodeLevel {
    #[default]
    Absent,
    Staged,
    Published,
}

impl NodeLevel {
    /// The cluster protocol's value; an unknown one reads as `Absent`.
    pub fn from_wire(level: i32) -> NodeLevel {
        match WireLevel::try_from(level) {
            Ok(WireLevel::Staged) => NodeLevel::Staged,
            Ok(WireLevel::Published) => NodeLevel::Published,
            _ => NodeLevel::Absent,
        }
    }

    pub fn to_wire(self) -> i32 {
        (match self {
            NodeLevel::Absent => WireLevel::Absent,
            NodeLevel::Staged => WireLevel::Staged,
            NodeLevel::Published => WireLevel::Published,
        }) as i32
    }
}

/// A node agent's two directories; each volume's paths are its Berth id
/// below them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Paths {
    pub staging_dir: PathBuf,
    pub publish_dir: PathBuf,
}

impl Paths {
    /// The two directories below `dir`, as `[[node]] dir` has always had them.
    pub fn under(dir: &Path) -> Paths {
        Paths {
            staging_dir: dir.join("staging"),
            publish_dir: dir.join("publish"),
        }
    }

    /// The volume's staging path; refused unless the id is one plain path
    /// component, so the path stays inside the staging directory.
    pub fn staging(&self, berth_id: &str) -> Result<PathBuf, OutOfBounds> {
        bounds::plain("volume id", berth_id)?;
        Ok(self.staging_dir.join(berth_id))
    }

    /// The volume's target path, inside the publish directory as `staging`.
    pub fn target(&self, berth_id: &str) -> Result<PathBuf, OutOfBounds> {
        bounds::plain("volume id", berth_id)?;
        Ok(self.publish_dir.join(berth_id))
    }

    /// Whether `path` (as a server sent it) is a volume's path of these
    /// directories: a plain name directly below one of them.
    pub fn holds(&self, path: &str) -> bool {
        let path = Path::new(path);
        let inside = path
            .parent()
            .is_some_and(|p| p == self.staging_dir || p == self.publish_dir);
        let named = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| bounds::plain("volume id", n).is_ok());
        inside && named
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_volume_path_stays_below_its_directory() {
        let p = Paths::under(Path::new("/var/lib/berth/node"));
        assert_eq!(
            p.target("0194a1b2").unwrap(),
            Path::new("/var/lib/berth/node/publish/0194a1b2")
        );
        for bad in ["../x", "..", "a/b", "/etc"] {
            assert!(p.staging(bad).is_err() && p.target(bad).is_err(), "{bad}");
        }
        assert!(p.holds("/var/lib/berth/node/publish/0194a1b2"));
        assert!(p.holds("/var/lib/berth/node/staging/0194a1b2"));
        for outside in [
            "/var/lib/berth/node/publish/../../../etc",
            "/var/lib/berth/node/publish",
            "/etc/passwd",
            "/var/lib/berth/node/publish/a/b",
        ] {
            assert!(!p.holds(outside), "{outside}");
        }
    }

    #[test]
    fn levels_cross_the_wire_and_back() {
        for l in [NodeLevel::Absent, NodeLevel::Staged, NodeLevel::Published] {
            assert_eq!(NodeLevel::from_wire(l.to_wire()), l);
        }
        assert_eq!(NodeLevel::from_wire(99), NodeLevel::Absent);
    }
}
