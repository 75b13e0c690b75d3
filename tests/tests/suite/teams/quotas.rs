//! A namespace's quota on one server.

use super::*;

/// A namespace's quota: volumes, bytes and snapshots refused past it, with
/// the reason; lowered below what is held, it refuses anything new and
/// leaves what exists alone; `namespace status` shows usage against it.
#[test]
fn a_quota_refuses_what_would_pass_it_and_touches_nothing_held() {
    let c = Cluster::start(ClusterSpec::default());
    c.ok(&[
        "namespace",
        "quota",
        "team-q",
        "--volumes",
        "2",
        "--bytes",
        "2GiB",
        "--snapshots",
        "1",
    ]);
    let create = |name: &str, size: &str| {
        let args = [
            "volume",
            "-n",
            "team-q",
            "create",
            name,
            "--plugin",
            "hostpath",
            "--size",
            size,
            "--requisite",
            "zone=a",
            "--wait",
        ];
        c.berth(&args)
    };
    let exhausted = |out: Output, what: &str| {
        let (_, stderr) = texts(&out);
        assert!(!out.status.success(), "not refused");
        assert!(
            stderr.contains("RESOURCE_EXHAUSTED") && stderr.contains("at most") && stderr.contains(what),
            "{stderr}"
        );
    };
    assert!(create("a", "1GiB").status.success());
    exhausted(create("b", "2GiB"), "bytes");
    assert!(create("b", "1GiB").status.success());
    exhausted(create("c", "1MiB"), "2 volumes");
    exhausted(
        c.berth(&["volume", "-n", "team-q", "expand", "a", "--size", "2GiB"]),
        "bytes",
    );
    c.ok(&[
        "snapshot", "-n", "team-q", "create", "s1", "--volume", "a", "--wait",
    ]);
    exhausted(
        c.berth(&["snapshot", "-n", "team-q", "create", "s2", "--volume", "a"]),
        "snapshots",
    );
    // Another namespace is not held to it.
    c.ok(&[
        "volume",
        "-n",
        "team-r",
        "create",
        "c",
        "--plugin",
        "hostpath",
        "--size",
        "3GiB",
        "--requisite",
        "zone=a",
    ]);

    c.ok(&["namespace", "quota", "team-q", "--volumes", "1"]);
    let status: Value =
        serde_json::from_str(&c.ok(&["namespace", "-n", "team-q", "status", "-o", "json"])).unwrap();
    let q = &status[0];
    assert_eq!(
        (
            q["volumes"].as_u64(),
            q["bytes"].as_u64(),
            q["snapshots"].as_u64()
        ),
        (Some(2), Some(2 << 30), Some(1))
    );
    assert_eq!(q["quota"]["volumes"], 1);
    assert!(q["quota"].get("bytes").is_none(), "{q}");
    assert_eq!(get(&c, "team-q", "a")["state"], "available");
    exhausted(create("d", "1MiB"), "volumes");
    // Without limits the quota is gone.
    c.ok(&["namespace", "quota", "team-q"]);
    assert!(create("d", "1MiB").status.success());
    let every: Vec<Value> =
        serde_json::from_str(&c.ok(&["namespace", "-n", "*", "status", "-o", "json"])).unwrap();
    let names: Vec<&str> = every.iter().map(|n| n["namespace"].as_str().unwrap()).collect();
    assert_eq!(names, ["team-q", "team-r"]);
}

/// `message` as a call in namespace team-g.
fn in_team<M>(message: M) -> tonic::Request<M> {
    let mut request = tonic::Request::new(message);
    request
        .metadata_mut()
        .insert("berth-namespace", "team-g".parse().unwrap());
    request
}

/// Growths and snapshots racing for a quota's last room: eight of each
/// sent at once through the API socket, and exactly as many pass as the
/// quota has room for (each takes its room before it is written).
#[test]
fn growths_and_snapshots_racing_for_a_quota_never_pass_it() {
    use berth_proto::berth::v1 as api;
    const MIB: i64 = 1 << 20;
    let c = Cluster::start(ClusterSpec::default());
    let names: Vec<String> = (0..8).map(|i| format!("v{i}")).collect();
    for name in &names {
        let args = [
            "volume",
            "-n",
            "team-g",
            "create",
            name,
            "--plugin",
            "hostpath",
            "--size",
            "64MiB",
            "--requisite",
            "zone=a",
            "--wait",
        ];
        c.ok(&args);
    }
    // Room for three growths of 64 MiB and three snapshots.
    c.ok(&[
        "namespace",
        "quota",
        "team-g",
        "--bytes",
        &format!("{}MiB", (8 + 3) * 64),
        "--snapshots",
        "3",
    ]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (grown, snapped) = rt.block_on(async {
        let client = c.client();
        let growths = names.iter().map(|name| {
            let mut client = client.clone();
            let request = in_team(api::ExpandVolumeRequest {
                name: name.clone(),
                required_bytes: 128 * MIB,
            });
            async move {
                client
                    .expand_volume(request)
                    .await
                    .map(drop)
                    .map_err(|s| s.code())
            }
        });
        let snapshots = names.iter().map(|name| {
            let mut client = client.clone();
            let request = in_team(api::CreateSnapshotRequest {
                name: format!("s-{name}"),
                volume: name.clone(),
            });
            async move {
                client
                    .create_snapshot(request)
                    .await
                    .map(drop)
                    .map_err(|s| s.code())
            }
        });
        // Every call sent at once, each in a task of its own.
        let growths: Vec<_> = growths.map(tokio::spawn).collect();
        let snapshots: Vec<_> = snapshots.map(tokio::spawn).collect();
        let mut outcomes = (Vec::new(), Vec::new());
        for call in growths {
            outcomes.0.push(call.await.unwrap());
        }
        for call in snapshots {
            outcomes.1.push(call.await.unwrap());
        }
        outcomes
    });
    for (what, outcomes) in [("growths", &grown), ("snapshots", &snapped)] {
        let passed = outcomes.iter().filter(|o| o.is_ok()).count();
        assert_eq!(passed, 3, "{what}: {outcomes:?}");
        assert!(
            outcomes
                .iter()
                .all(|o| matches!(o, Ok(()) | Err(tonic::Code::ResourceExhausted))),
            "{what}: {outcomes:?}"
        );
    }
    let status: Value =
        serde_json::from_str(&c.ok(&["namespace", "-n", "team-g", "status", "-o", "json"])).unwrap();
    assert_eq!(status[0]["bytes"].as_i64(), Some((8 + 3) * 64 * MIB));
    assert_eq!(status[0]["snapshots"], 3);
}
