//! Example inputs: a typical volume, node and failure, for tests, benchmarks
//! and the defaults of `berth policy test` case files.

use crate::{
    AccessMode, AccessType, CapacityRange, Code, Failure, Health, Operation, Pairs, PlacementNode, Volume,
};

/// Pairs from string slices.
pub fn pairs(kv: &[(&str, &str)]) -> Pairs {
    kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// A 1 GiB single-node-writer mount volume named `name`, id `uid-<name>`.
pub fn volume(name: &str) -> Volume {
    Volume {
        id: format!("uid-{name}"),
        name: name.into(),
        driver: "hostpath.csi.berth.dev".into(),
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

/// A healthy node named `name` in `topology`, with no labels and no limit.
pub fn node(name: &str, topology: &[(&str, &str)]) -> PlacementNode {
    PlacementNode {
        name: name.into(),
        topology: pairs(topology),
        max_volumes: None,
        published_volumes: 0,
        labels: vec![],
        health: Health::Healthy,
    }
}

/// Failure number `attempt` of `operation` with `code`.
pub fn failure(operation: Operation, code: Code, attempt: u32) -> Failure {
    Failure {
        operation,
        code,
        message: "from the plugin".into(),
        attempt,
        elapsed_ms: 0,
        driver: "hostpath.csi.berth.dev".into(),
        settings: vec![],
    }
}
