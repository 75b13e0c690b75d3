//! Builders for policy inputs, for native unit tests of a policy.

use crate::{AccessMode, AccessType, CapacityRange, Code, Failure, Health, Node, Operation, Pairs, Volume};

/// Pairs from string slices.
pub fn pairs(kv: &[(&str, &str)]) -> Pairs {
    kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// A 1 GiB single-node-writer mount volume named `name`, with no requirements.
pub fn volume(name: &str) -> Volume {
    Volume {
        id: format!("id-{name}"),
        name: name.to_string(),
        driver: "hostpath.csi.berth.dev".to_string(),
        capacity: CapacityRange {
            required_bytes: 1 << 30,
            limit_bytes: 0,
        },
        access_mode: AccessMode::SingleNodeWriter,
        access_type: AccessType::Mount,
        parameters: vec![],
        labels: vec![],
        requisite_topology: vec![],
        preferred_topology: vec![],
    }
}

/// A healthy node with no volumes, no limit and no labels.
pub fn node(name: &str, topology: &[(&str, &str)]) -> Node {
    Node {
        name: name.to_string(),
        node_id: name.to_string(),
        topology: pairs(topology),
        max_volumes: None,
        published_volumes: 0,
        labels: vec![],
        health: Health::Healthy,
    }
}

/// The first failure of `operation` with `code`.
pub fn failure(operation: Operation, code: Code) -> Failure {
    Failure {
        operation,
        code,
        message: format!("{code:?}"),
        attempt: 1,
        elapsed_ms: 0,
        driver: "hostpath.csi.berth.dev".to_string(),
        settings: vec![],
    }
}
