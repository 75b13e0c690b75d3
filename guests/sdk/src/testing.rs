//! Builders for policy inputs, for native unit tests of a policy.

use crate::{
    AccessMode, AccessType, Candidates, CapacityRange, Code, Failure, Health, Operation, Pairs, Volume,
};

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

/// A node as a test writes it; [`candidates`] turns a list of them into the
/// placement input, sharing equal topologies and label sets as Berth does.
#[derive(Clone, Debug, Default)]
pub struct TestNode {
    pub name: String,
    pub topology: Pairs,
    pub labels: Pairs,
    pub max_volumes: Option<u64>,
    pub published_volumes: u64,
    pub health: Option<Health>,
}

/// A healthy node with no volumes, no limit and no labels.
pub fn node(name: &str, topology: &[(&str, &str)]) -> TestNode {
    TestNode {
        name: name.to_string(),
        topology: pairs(topology),
        ..Default::default()
    }
}

/// The placement input for `nodes`, in their order: node `i` of the
/// verdicts is `nodes[i]`.
pub fn candidates(nodes: &[TestNode]) -> Candidates {
    fn index(table: &mut Vec<Pairs>, p: &Pairs) -> u32 {
        match table.iter().position(|t| t == p) {
            Some(i) => i as u32,
            None => {
                table.push(p.clone());
                (table.len() - 1) as u32
            }
        }
    }
    let mut c = Candidates {
        topologies: vec![],
        label_sets: vec![],
        topology: vec![],
        labels: vec![],
        max_volumes: vec![],
        published_volumes: vec![],
        health: vec![],
    };
    for n in nodes {
        c.topology.push(index(&mut c.topologies, &n.topology));
        c.labels.push(index(&mut c.label_sets, &n.labels));
        c.max_volumes.push(n.max_volumes.unwrap_or(0));
        c.published_volumes.push(n.published_volumes);
        c.health.push(n.health.unwrap_or(Health::Healthy));
    }
    c
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
