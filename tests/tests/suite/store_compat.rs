//! Stores outlive releases: a store written by Berth 0.1.0 (kept as a
//! fixture, with the volume list that release showed for it) opens and is
//! served by this release, with every volume as it was, and its unfinished
//! work carried on.
//!
//! The fixture holds volumes in every state: published read-write and
//! read-only, available (with a size, limit, access mode, file system and
//! mount flags), creating (its controller was down), deleting (its node
//! plugin was down) and failed (a missing secret).

use std::path::Path;

use berth::store::{RedbStore, SCHEMA_VERSION};
use berth_tests::{Cluster, ClusterSpec};
use serde_json::Value;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/store-0.1.0");

fn by_name<'a>(list: &'a [Value], name: &str) -> &'a Value {
    list.iter()
        .find(|v| v["name"] == name)
        .unwrap_or_else(|| panic!("{name} is missing from {list:#?}"))
}

#[test]
fn a_store_written_by_0_1_0_opens_and_is_served() {
    let mut c = Cluster::start(ClusterSpec {
        guests: false,
        ..ClusterSpec::default()
    });
    c.kill_serve();
    let store = c.store_path();
    std::fs::copy(format!("{FIXTURE}.redb"), &store).unwrap();
    assert_eq!(
        RedbStore::recorded_schema(&store).unwrap(),
        Some(1),
        "0.1.0 recorded no version: it reads as version 1"
    );
    let then: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(format!("{FIXTURE}.json")).unwrap()).unwrap();
    // 0.1.0 kept no node records: each in-process agent starts its record
    // from the store's publications and checks it against the node's paths.
    for node in ["node-a", "node-b"] {
        let record = c.volumes_dir.join("nodes").join(node).join("agent.redb");
        let _ = std::fs::remove_file(record);
    }
    // The nodes still show what 0.1.0 published there.
    for v in &then {
        for p in v["publications"].as_array().unwrap() {
            let node = c.volumes_dir.join("nodes").join(p["node"].as_str().unwrap());
            for dir in ["staging", "publish"] {
                let path = node.join(dir).join(v["id"].as_str().unwrap());
                std::fs::create_dir_all(&path).unwrap();
                std::fs::write(path.join("data"), "kept").unwrap();
            }
        }
    }
    c.start_serve();

    let now = c.volumes();
    for old in &then {
        let name = old["name"].as_str().unwrap();
        if name == "deleting" && !now.iter().any(|v| v["name"] == name) {
            continue; // Its delete resumed and finished already.
        }
        let new = by_name(&now, name);
        for field in ["id", "plugin", "csi_name", "access_mode", "labels", "failure"] {
            assert_eq!(new[field], old[field], "{name}.{field}");
        }
        if name != "creating" {
            // Created before the upgrade: the backend is kept as it was.
            for field in ["volume_id", "capacity_bytes", "accessible_topology"] {
                assert_eq!(new[field], old[field], "{name}.{field}");
            }
        }
        if !matches!(name, "creating" | "deleting") {
            assert_eq!(new["state"], old["state"], "{name}");
            assert_eq!(
                new["publications"].as_array().unwrap().len(),
                old["publications"].as_array().unwrap().len(),
                "{name}"
            );
            for (p, q) in new["publications"]
                .as_array()
                .unwrap()
                .iter()
                .zip(old["publications"].as_array().unwrap())
            {
                for field in ["node", "state", "readonly"] {
                    assert_eq!(p[field], q[field], "{name} publication {field}");
                }
            }
        }
    }
    let ro = by_name(&now, "published-ro");
    assert_eq!(ro["publications"][0]["readonly"], true);
    // 0.1.0 kept no owners: its volumes and publications read as made before
    // ownership was recorded, and keep the access every Docker had then.
    for v in &now {
        assert_eq!(v["made_by"], "", "{v:#}");
        assert_eq!(v["docker_scope"], "origin", "{v:#}");
        for p in v["publications"].as_array().unwrap() {
            assert_eq!(p["by"], "", "{v:#}");
        }
    }
    let text = c.ok(&["volume", "get", "published-ro"]);
    assert!(
        text.contains("made before Berth kept it") && text.contains("every node's"),
        "{text}"
    );
    let get: Value = serde_json::from_str(&c.ok(&["volume", "get", "available", "-o", "json"])).unwrap();
    assert_eq!(get["access_mode"], "multi-node-multi-writer");
    // 0.1.0 kept no plugin checks: none is shown.
    let status: Value = serde_json::from_str(&c.ok(&["plugin", "status", "-o", "json"])).unwrap();
    assert_eq!(status[0]["last_check"], Value::Null, "{status:#}");
    // 0.1.0 kept no events: an old volume has none until something happens
    // to it, then its story starts.
    let events = |name: &str| -> Value {
        serde_json::from_str(&c.ok(&["volume", "events", name, "-o", "json"])).unwrap()
    };
    assert_eq!(events("published-ro"), serde_json::json!([]));
    c.ok(&[
        "volume",
        "unpublish",
        "published-ro",
        "--node",
        "node-b",
        "--wait",
    ]);
    let told = events("published-ro");
    assert_eq!(told[0]["seq"], 1);
    assert_eq!(told[0]["message"], "unpublish from node-b");

    // Unfinished work goes on: the create under the name stored by 0.1.0,
    // and the delete.
    c.wait_until("the old create and delete to finish", |v| {
        v.iter()
            .any(|x| x["name"] == "creating" && x["state"] == "available")
            && !v.iter().any(|x| x["name"] == "deleting")
    });
    assert_eq!(c.plugin_volumes(), 1, "one CreateVolume, under the stored name");

    for v in c.volumes() {
        c.ok(&["volume", "delete", "--force", v["name"].as_str().unwrap()]);
    }
    c.wait_until("every volume to be deleted", <[Value]>::is_empty);
    assert_eq!(c.plugin_volumes(), 0);

    // 0.1.0 kept no policy set: none, until one is applied into the same file.
    let status: Value = serde_json::from_str(&c.ok(&["policy", "status", "-o", "json"])).unwrap();
    assert_eq!(status["version"], 0, "{status:#}");
    let set = c.dir.path().join("set.toml");
    std::fs::write(
        &set,
        format!(
            "[[policy]]\nmodule = \"{}\"\n",
            berth_tests::guest("berth_naming_guest").display()
        ),
    )
    .unwrap();
    let applied: Value =
        serde_json::from_str(&c.ok(&["policy", "apply", &set.display().to_string(), "-o", "json"])).unwrap();
    assert_eq!(applied["version"], 1, "{applied:#}");
    c.kill_serve();
    // After a kill -9 the file needs redb's recovery, which a read-only open
    // does not do: open it as `berth serve` would, then look.
    drop(RedbStore::open(&store).unwrap());
    assert_eq!(
        RedbStore::recorded_schema(Path::new(&store)).unwrap(),
        Some(SCHEMA_VERSION),
        "the version is recorded once the store is opened"
    );
}
