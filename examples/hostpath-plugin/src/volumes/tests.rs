//! The sample plugin's volume bookkeeping, tested on a real state directory.

use super::*;

fn new(name: &str, required: i64) -> NewVolume {
    NewVolume {
        name: name.into(),
        required,
        limit: 0,
        parameters: BTreeMap::new(),
        mutable_parameters: BTreeMap::new(),
        accessible_topology: vec![],
        source: None,
        segment_capacity: vec![],
    }
}

fn store() -> (tempfile::TempDir, Volumes) {
    let dir = tempfile::tempdir().unwrap();
    let v = Volumes::open(dir.path(), 10 << 30, false).unwrap();
    (dir, v)
}

#[test]
fn create_is_idempotent_by_name() {
    let (_d, v) = store();
    let (a, made) = v.create(new("pvc-1", 1 << 20), true).unwrap();
    let (b, again) = v.create(new("pvc-1", 1 << 20), true).unwrap();
    assert_eq!(a.id, b.id);
    // The journal's `created`: the first call made it, the second did not.
    assert!(made && !again);
    assert_eq!(v.list().unwrap().len(), 1);
    let err = v.create(new("pvc-1", 2 << 20), true).unwrap_err();
    assert_eq!(err.code(), tonic::Code::AlreadyExists);
}

#[test]
fn ids_that_try_to_escape_are_not_volumes() {
    let (_d, v) = store();
    for id in ["../../etc/passwd", "/etc", "hp-../../x", ""] {
        assert!(v.get(id).unwrap().is_none(), "{id}");
        v.delete(id).unwrap();
    }
}

#[test]
fn capacity_is_enforced() {
    let (_d, v) = store();
    let err = v.create(new("big", 11 << 30), true).unwrap_err();
    assert_eq!(err.code(), tonic::Code::ResourceExhausted);
}

#[test]
fn topology_reachability() {
    let seg = |pairs: &[(&str, &str)]| -> Segments {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let node = seg(&[("zone", "a"), ("rack", "1")]);
    assert!(reachable(&[], &node));
    assert!(reachable(&[seg(&[("zone", "a")])], &node));
    assert!(reachable(&[seg(&[("zone", "b")]), seg(&[("rack", "1")])], &node));
    assert!(!reachable(&[seg(&[("zone", "b")])], &node));
}
