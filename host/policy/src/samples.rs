//! Example inputs: a typical volume, node and failure, for tests, benchmarks
//! and the defaults of `berth policy test` case files.

use crate::{
    AccessMode, AccessType, CapacityRange, Code, Failure, Health, Operation, Pairs, PlacementNode, Volume,
};

crate::shared::samples!("uid-");

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
