//! Builders for policy inputs, for native unit tests of a policy.

use crate::{
    AccessMode, AccessType, Candidates, CapacityRange, Code, Failure, Health, Operation, Pairs, Volume,
};

crate::shared::samples!("id-");

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
    let mut c = Candidates {
        strings: vec![],
        pair_keys: vec![],
        pair_values: vec![],
        topologies: vec![],
        label_sets: vec![],
        topology: vec![],
        labels: vec![],
        max_volumes: nodes.iter().map(|n| n.max_volumes.unwrap_or(0)).collect(),
        published_volumes: nodes.iter().map(|n| n.published_volumes).collect(),
        health: nodes
            .iter()
            .map(|n| n.health.unwrap_or(Health::Healthy) as u8)
            .collect(),
    };
    let (topologies, topology) = sets(&mut c, nodes.iter().map(|n| &n.topology));
    let (label_sets, labels) = sets(&mut c, nodes.iter().map(|n| &n.labels));
    (c.topologies, c.topology, c.label_sets, c.labels) = (topologies, topology, label_sets, labels);
    c
}

/// Each distinct set once, as a range of pairs after those already in `c`;
/// and each item's index among them.
fn sets<'a>(c: &mut Candidates, items: impl Iterator<Item = &'a Pairs>) -> (Vec<u32>, Vec<u32>) {
    fn string(strings: &mut Vec<String>, s: &str) -> u32 {
        let i = strings.iter().position(|t| t == s).unwrap_or_else(|| {
            strings.push(s.to_string());
            strings.len() - 1
        });
        i as u32
    }
    let mut offsets = vec![c.pair_keys.len() as u32];
    let mut distinct: Vec<&Pairs> = vec![];
    let index = items
        .map(|set| {
            let i = distinct.iter().position(|d| *d == set).unwrap_or_else(|| {
                for (k, v) in set {
                    let k = string(&mut c.strings, k);
                    let v = string(&mut c.strings, v);
                    c.pair_keys.push(k);
                    c.pair_values.push(v);
                }
                offsets.push(c.pair_keys.len() as u32);
                distinct.push(set);
                distinct.len() - 1
            });
            i as u32
        })
        .collect();
    (offsets, index)
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

/// A create-volume of `name` in `namespace` by a token holder, the
/// namespace holding nothing yet.
pub fn admission_request(namespace: &str, name: &str) -> crate::AdmissionRequest {
    let full = match namespace {
        "default" => name.to_string(),
        ns => format!("{ns}/{name}"),
    };
    crate::AdmissionRequest {
        call: crate::Call::CreateVolume,
        caller: crate::Caller {
            identity: "token:0123456789abcdef".to_string(),
            policies: vec![],
        },
        namespace: namespace.to_string(),
        plugin: "hostpath".to_string(),
        volume: volume(&full),
        secret: None,
        usage: crate::Usage {
            volumes: 0,
            bytes: 0,
            snapshots: 0,
        },
        settings: vec![],
    }
}
