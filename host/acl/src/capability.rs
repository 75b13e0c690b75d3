//! What a call needs: a capability on volumes in a namespace, a level in
//! an area beyond namespaces, or only to be a known caller.

use std::fmt;

use serde::Deserialize;

/// What a caller may do with a namespace's volumes (and their snapshots).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VolumeCap {
    /// See which volumes there are (ListVolumes, ListSnapshots).
    List,
    /// Read one volume or snapshot (GetVolume, VolumeHealth).
    Read,
    /// Change volumes: create, delete, expand, modify, snapshot, import,
    /// forget, retry, Docker scope.
    Write,
    /// Publish and unpublish.
    Mount,
}

impl VolumeCap {
    pub const ALL: [VolumeCap; 4] = [
        VolumeCap::List,
        VolumeCap::Read,
        VolumeCap::Write,
        VolumeCap::Mount,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            VolumeCap::List => "list",
            VolumeCap::Read => "read",
            VolumeCap::Write => "write",
            VolumeCap::Mount => "mount",
        }
    }
}

/// What lies beyond namespaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Area {
    /// Nodes and join tokens.
    Node,
    /// Plugins: their status and orphans.
    Plugin,
    /// The policy set: apply, shadow, promote, roll back, decisions.
    Policy,
    /// The cluster itself and the ACLs.
    Operator,
}

impl Area {
    pub fn as_str(self) -> &'static str {
        match self {
            Area::Node => "node",
            Area::Plugin => "plugin",
            Area::Policy => "policy",
            Area::Operator => "operator",
        }
    }
}

/// How far a caller may go in an area: `write` includes `read`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    Read,
    Write,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Read => "read",
            Level::Write => "write",
        }
    }
}

/// What one call of the API needs of its caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Needs {
    /// A capability in the call's namespace.
    Volumes(VolumeCap),
    /// A level in an area.
    Area(Area, Level),
    /// Only to be a known caller (a token asking about itself).
    Caller,
}

impl fmt::Display for Needs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Needs::Volumes(cap) => write!(f, "namespace capability {:?}", cap.as_str()),
            Needs::Area(area, level) => write!(f, "{} = {:?}", area.as_str(), level.as_str()),
            Needs::Caller => f.write_str("a valid token"),
        }
    }
}
