//! Who made a volume and who may use it: the tenancy rules every surface
//! (the API, a node's `NodeVolumes`, Docker's socket) enforces.
//!
//! Invariants:
//! - A volume made through the API is outside every Docker's scope until
//!   an operator marks it ([`DockerScope`]); one made through a node's
//!   Docker is in every node's Docker scope (the plugin's scope is global).
//! - A Docker user removes only volumes made through Docker, and undoes
//!   only publications its own node's Docker asked for: an operator's
//!   publication is never undone by Docker.
//! - Records written before ownership was kept read as [`Origin::Before`]:
//!   they keep the access every Docker had then (see [`DockerScope::ByOrigin`]).

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Who asked for a volume, or for a publication of it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Origin {
    /// Recorded before Berth kept who made what (the field is absent).
    #[default]
    Before,
    /// A caller of the Berth API: a local user, an operator, a server.
    Api,
    /// The Docker (or Podman) of the node named.
    Docker(Arc<str>),
}

impl Origin {
    pub fn docker(node: &str) -> Origin {
        Origin::Docker(node.into())
    }

    pub fn is_before(&self) -> bool {
        matches!(self, Origin::Before)
    }

    /// Whether this is some node's Docker, or a record from before Docker
    /// and the API were told apart (either could have made it).
    pub fn may_be_docker(&self) -> bool {
        matches!(self, Origin::Docker(_) | Origin::Before)
    }

    /// Whether a request from `node`'s Docker may undo what this origin asked
    /// for: its own, or a record from before origins were kept.
    pub fn undoable_by_docker_of(&self, node: &str) -> bool {
        match self {
            Origin::Before => true,
            Origin::Api => false,
            Origin::Docker(n) => &**n == node,
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Before => f.write_str(""),
            Origin::Api => f.write_str("api"),
            Origin::Docker(node) => write!(f, "docker:{node}"),
        }
    }
}

/// Which nodes' Docker may see and publish a volume.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DockerScope {
    /// As its origin says: a volume made through Docker is every node's
    /// Docker's; one made through the API is none's; one recorded before
    /// origins were kept is every node's (as every Docker saw every volume then).
    #[default]
    ByOrigin,
    /// No node's Docker.
    Nobody,
    /// Every node's Docker.
    Everywhere,
    /// The Docker of these nodes.
    Nodes(Arc<[String]>),
}

impl DockerScope {
    pub fn is_by_origin(&self) -> bool {
        matches!(self, DockerScope::ByOrigin)
    }

    /// Whether `node`'s Docker may see and publish a volume of this scope
    /// made by `made_by`.
    pub fn admits(&self, made_by: &Origin, node: &str) -> bool {
        match self {
            DockerScope::ByOrigin => made_by.may_be_docker(),
            DockerScope::Nobody => false,
            DockerScope::Everywhere => true,
            DockerScope::Nodes(nodes) => nodes.iter().any(|n| n == node),
        }
    }
}

/// The most nodes one scope names.
pub const SCOPE_NODES_MAX: usize = 256;

/// A scope as it is written on the command line and in the API: `origin`
/// (or empty), `none`, `all`, or node names separated by commas.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScopeError {
    #[error("{0:?} is not a node name (give origin, none, all, or node names separated by commas)")]
    Node(String),
    #[error("a Docker scope names at most {SCOPE_NODES_MAX} nodes")]
    TooMany,
}

impl FromStr for DockerScope {
    type Err = ScopeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "" | "origin" => Ok(DockerScope::ByOrigin),
            "none" => Ok(DockerScope::Nobody),
            "all" => Ok(DockerScope::Everywhere),
            list => {
                let mut nodes: Vec<String> = Vec::new();
                for n in list.split(',').map(str::trim) {
                    if crate::bounds::name(n).is_err() || matches!(n, "origin" | "none" | "all") {
                        return Err(ScopeError::Node(crate::text::echo(n)));
                    }
                    if !nodes.iter().any(|m| m == n) {
                        nodes.push(n.to_string());
                    }
                }
                if nodes.len() > SCOPE_NODES_MAX {
                    return Err(ScopeError::TooMany);
                }
                nodes.sort();
                Ok(DockerScope::Nodes(nodes.into()))
            }
        }
    }
}

impl fmt::Display for DockerScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DockerScope::ByOrigin => f.write_str("origin"),
            DockerScope::Nobody => f.write_str("none"),
            DockerScope::Everywhere => f.write_str("all"),
            DockerScope::Nodes(nodes) => f.write_str(&nodes.join(",")),
        }
    }
}

pub(crate) fn is_before(o: &Origin) -> bool {
    o.is_before()
}

pub(crate) fn is_by_origin(s: &DockerScope) -> bool {
    s.is_by_origin()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_admit_by_origin_or_as_marked() {
        let api = Origin::Api;
        let docker = Origin::docker("node-a");
        let before = Origin::Before;
        let by_origin = DockerScope::ByOrigin;
        assert!(
            !by_origin.admits(&api, "node-a"),
            "the API's own volumes stay the API's"
        );
        assert!(by_origin.admits(&docker, "node-b"), "Docker's scope is global");
        assert!(
            by_origin.admits(&before, "node-b"),
            "records from before keep their access"
        );
        let marked: DockerScope = "node-b, node-c,node-b".parse().unwrap();
        assert_eq!(marked.to_string(), "node-b,node-c");
        assert!(marked.admits(&api, "node-b") && !marked.admits(&api, "node-a"));
        assert!(!DockerScope::Nobody.admits(&docker, "node-a"));
        assert!(DockerScope::Everywhere.admits(&api, "node-z"));
        for bad in ["../x", "a b", "node-a,", "all,node-a"] {
            assert!(bad.parse::<DockerScope>().is_err(), "{bad}");
        }
    }

    #[test]
    fn only_a_nodes_own_docker_undoes_what_it_asked_for() {
        assert!(Origin::docker("node-a").undoable_by_docker_of("node-a"));
        assert!(!Origin::docker("node-a").undoable_by_docker_of("node-b"));
        assert!(!Origin::Api.undoable_by_docker_of("node-a"));
        assert!(Origin::Before.undoable_by_docker_of("node-a"));
    }

    #[test]
    fn origins_and_scopes_are_stored_by_name() {
        assert_eq!(serde_json::to_string(&Origin::Api).unwrap(), "\"api\"");
        assert_eq!(
            serde_json::to_string(&Origin::docker("node-a")).unwrap(),
            r#"{"docker":"node-a"}"#
        );
        let scope: DockerScope = "node-a".parse().unwrap();
        let json = serde_json::to_string(&scope).unwrap();
        assert_eq!(json, r#"{"nodes":["node-a"]}"#);
        assert_eq!(serde_json::from_str::<DockerScope>(&json).unwrap(), scope);
    }
}
