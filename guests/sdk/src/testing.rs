//! Builders for policy inputs, for native unit tests of a policy.

use crate::{
    AccessMode, AccessType, Candidate, Candidates, CapacityRange, Code, Failure, Health, Operation, Pairs,
    Volume,
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

/// The placement input for `nodes`.
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
    let (mut topologies, mut label_sets) = (Vec::new(), Vec::new());
    let nodes = nodes
        .iter()
        .map(|n| Candidate {
            name: n.name.clone(),
            topology: index(&mut topologies, &n.topology),
            labels: index(&mut label_sets, &n.labels),
            max_volumes: n.max_volumes,
            published_volumes: n.published_volumes,
            health: n.health.unwrap_or(Health::Healthy),
        })
        .collect();
    Candidates {
        topologies,
        label_sets,
        nodes,
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
