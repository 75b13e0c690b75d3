//! `berth plugin probe` against the sample plugin over its real socket.

use berth_tests::{PluginBuilder, berth, test_dir, texts};
use serde_json::Value;

fn probe_json(endpoint: &str) -> Value {
    let out = berth(&["plugin", "probe", endpoint, "--output", "json"]);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "probe failed: {stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

#[test]
fn reports_a_plugin_named_like_the_kubernetes_hostpath_driver() {
    let dir = test_dir();
    let plugin = PluginBuilder::new(dir.path(), "csi")
        .args(&["--name", "hostpath.csi.k8s.io", "--node-id", "node1"])
        .args(&[
            "--topology",
            "topology.hostpath.csi/node=node1",
            "--max-volumes",
            "8",
        ])
        .spawn();

    let out = berth(&["plugin", "probe", &plugin.endpoint()]);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    let row = |key: &str| -> String {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(key).map(|v| v.trim().to_string()))
            .unwrap_or_else(|| panic!("no {key:?} row in:\n{stdout}"))
    };
    assert_eq!(row("plugin "), "hostpath.csi.k8s.io");
    assert_eq!(row("node id "), "node1");
    assert_eq!(row("ready "), "yes");
    assert_eq!(row("max volumes per node "), "8");
    assert_eq!(row("topology "), "topology.hostpath.csi/node=node1");
    assert!(row("controller ").contains("PUBLISH_UNPUBLISH_VOLUME"));
    assert_eq!(
        row("node "),
        "STAGE_UNSTAGE_VOLUME, EXPAND_VOLUME, GET_VOLUME_STATS, VOLUME_CONDITION, SINGLE_NODE_MULTI_WRITER"
    );
}

#[test]
fn every_field_the_plugin_sets_arrives_unchanged() {
    let dir = test_dir();
    let plugin = PluginBuilder::new(dir.path(), "csi")
        .args(&[
            "--name",
            "x.example.com",
            "--vendor-version",
            "9.9.9-rc.1+build.7",
        ])
        .args(&["--node-id", "worker-3.rack-b", "--max-volumes", "250"])
        .args(&["--topology", "zone=eu-1b", "--topology", "region=eu-1"])
        .spawn();

    let fp = probe_json(&plugin.endpoint());
    assert_eq!(fp["name"], "x.example.com");
    assert_eq!(fp["vendor_version"], "9.9.9-rc.1+build.7");
    assert_eq!(fp["ready"], true);
    assert_eq!(fp["endpoint"], plugin.endpoint());
    assert_eq!(fp["manifest"]["mount-mode"], "symlink");
    assert_eq!(
        fp["plugin_capabilities"],
        serde_json::json!([
            "CONTROLLER_SERVICE",
            "VOLUME_ACCESSIBILITY_CONSTRAINTS",
            "GROUP_CONTROLLER_SERVICE",
            "VOLUME_EXPANSION_ONLINE"
        ])
    );
    // The GroupController is asked what it offers.
    assert_eq!(
        fp["controller"]["group_capabilities"],
        serde_json::json!(["CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT"])
    );
    let node = &fp["node"];
    assert_eq!(node["node_id"], "worker-3.rack-b");
    assert_eq!(node["max_volumes_per_node"], 250);
    assert_eq!(
        node["accessible_topology"],
        serde_json::json!({"zone": "eu-1b", "region": "eu-1"})
    );
}

#[test]
fn capabilities_follow_the_plugin_flags() {
    let dir = test_dir();
    let plugin = PluginBuilder::new(dir.path(), "csi")
        .args(&["--publish-unpublish", "false", "--stage-unstage", "false"])
        .args(&["--disable", "EXPAND_VOLUME", "--disable", "GET_VOLUME_STATS"])
        .args(&[
            "--disable",
            "VOLUME_CONDITION",
            "--disable",
            "CREATE_DELETE_SNAPSHOT",
            "--disable",
            "SINGLE_NODE_MULTI_WRITER",
            "--disable",
            "CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT",
        ])
        .spawn();
    let fp = probe_json(&plugin.endpoint());
    assert!(fp["controller"].get("group_capabilities").is_none(), "{fp:#}");
    let controller: Vec<&str> = fp["controller"]["capabilities"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(controller.contains(&"CREATE_DELETE_VOLUME"));
    assert!(!controller.contains(&"PUBLISH_UNPUBLISH_VOLUME"));
    assert!(!controller.contains(&"CREATE_DELETE_SNAPSHOT"));
    assert!(!controller.contains(&"VOLUME_CONDITION"));
    assert!(controller.contains(&"CLONE_VOLUME") && !controller.contains(&"EXPAND_VOLUME"));
    assert_eq!(fp["node"]["capabilities"], serde_json::json!([]));
    assert_eq!(
        fp["node"]["max_volumes_per_node"],
        Value::Null,
        "0 means unlimited"
    );
    assert_eq!(
        fp["plugin_capabilities"],
        serde_json::json!(["CONTROLLER_SERVICE"])
    );
}

#[test]
fn controller_only_and_node_only_plugins() {
    let dir = test_dir();
    let controller = PluginBuilder::new(dir.path(), "ctrl")
        .args(&["--node", "false"])
        .spawn();
    let fp = probe_json(&controller.endpoint());
    assert_eq!(fp["node"], Value::Null);
    assert!(fp["controller"].is_object());

    // `--controller false` is `--mode node`: the process reports the
    // driver's capabilities and serves only the Node service.
    for (i, spelling) in [["--controller", "false"], ["--mode", "node"]].iter().enumerate() {
        let node = PluginBuilder::new(dir.path(), &format!("node{i}"))
            .args(spelling)
            .spawn();
        let fp = probe_json(&node.endpoint());
        assert_eq!(fp["controller"], Value::Null, "{spelling:?}");
        assert_eq!(
            fp["plugin_capabilities"],
            serde_json::json!([
                "CONTROLLER_SERVICE",
                "GROUP_CONTROLLER_SERVICE",
                "VOLUME_EXPANSION_ONLINE"
            ]),
            "{spelling:?}"
        );
        assert_eq!(fp["unserved"], serde_json::json!(["Controller"]), "{spelling:?}");
        assert_eq!(fp["node"]["node_id"], "node1");

        let out = berth(&["plugin", "probe", &node.endpoint()]);
        let (stdout, _) = texts(&out);
        assert!(
            stdout.contains("offered by the driver, not served here"),
            "{stdout}"
        );
    }
}

#[test]
fn a_plugin_that_is_still_initialising_is_reported_not_ready() {
    let dir = test_dir();
    let plugin = PluginBuilder::new(dir.path(), "csi")
        .args(&["--not-ready-for", "1h"])
        .spawn();
    let fp = probe_json(&plugin.endpoint());
    assert_eq!(fp["ready"], false);
}

#[test]
fn waits_for_a_socket_that_appears_later() {
    let dir = test_dir();
    let builder = PluginBuilder::new(dir.path(), "late");
    let endpoint = format!("unix://{}", dir.path().join("late.sock").display());
    let probe = std::thread::spawn(move || berth(&["plugin", "probe", &endpoint, "--wait", "30s"]));
    // The probe is already polling for the socket when the plugin starts.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let _plugin = builder.spawn_unready();
    let out = probe.join().unwrap();
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("hostpath.csi.berth.dev"), "{stdout}");
}

#[test]
fn a_missing_socket_fails_after_the_wait_with_a_clear_message() {
    let dir = test_dir();
    let endpoint = format!("unix://{}", dir.path().join("absent.sock").display());
    let out = berth(&["plugin", "probe", &endpoint, "--wait", "200ms"]);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr.contains("absent.sock does not exist"), "{stderr}");
    assert!(stderr.contains("waited 200ms"), "{stderr}");
}

#[test]
fn a_socket_left_by_a_crashed_plugin_is_reported_as_not_listening() {
    let dir = test_dir();
    let mut plugin = PluginBuilder::new(dir.path(), "csi").spawn();
    plugin.kill();
    assert!(plugin.socket.exists(), "SIGKILL leaves the socket file behind");
    let out = berth(&["plugin", "probe", &plugin.endpoint()]);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr.contains("nothing is listening"), "{stderr}");
}

#[test]
fn a_non_unix_endpoint_is_a_usage_error() {
    let out = berth(&["plugin", "probe", "tcp://127.0.0.1:9000"]);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr.contains("unix sockets"), "{stderr}");
}

#[test]
fn a_hanging_call_fails_at_the_deadline_naming_the_call() {
    let dir = test_dir();
    let plugin = PluginBuilder::new(dir.path(), "csi")
        .args(&["--hang-rate", "1", "--fault-calls", "Probe"])
        .spawn();
    let out = berth(&["plugin", "probe", &plugin.endpoint(), "--timeout", "300ms"]);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr.contains("Probe: DEADLINE_EXCEEDED"), "{stderr}");
    assert!(stderr.contains(&plugin.endpoint()), "names the plugin: {stderr}");
}

#[test]
fn a_plugin_error_keeps_its_grpc_code_and_message() {
    let dir = test_dir();
    let plugin = PluginBuilder::new(dir.path(), "csi")
        .args(&["--fault", "FAILED_PRECONDITION=1", "--fault-calls", "NodeGetInfo"])
        .spawn();
    let out = berth(&["plugin", "probe", &plugin.endpoint()]);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.contains("NodeGetInfo: FAILED_PRECONDITION: injected fault in NodeGetInfo"),
        "{stderr}"
    );
}

#[test]
fn answers_that_break_the_spec_are_rejected_with_the_rule() {
    let cases = [
        (
            "empty-name",
            "GetPluginInfo: invalid answer: plugin name is empty",
        ),
        ("bad-name", "only letters, digits, '-' and '.' are allowed"),
        (
            "empty-version",
            "GetPluginInfo: invalid answer: vendor_version is empty",
        ),
        ("empty-node-id", "NodeGetInfo: invalid answer: node_id is empty"),
        ("negative-max-volumes", "max_volumes_per_node is -1"),
    ];
    let dir = test_dir();
    for (misbehaviour, expected) in cases {
        let plugin = PluginBuilder::new(dir.path(), misbehaviour)
            .args(&["--misbehave", misbehaviour])
            .spawn();
        let out = berth(&["plugin", "probe", &plugin.endpoint()]);
        let (_, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(1), "{misbehaviour}: {stderr}");
        assert!(stderr.contains(expected), "{misbehaviour}: {stderr}");
    }
}

#[test]
fn help_explains_every_subcommand() {
    for args in [
        vec!["--help"],
        vec!["plugin", "--help"],
        vec!["plugin", "probe", "--help"],
    ] {
        let out = berth(&args);
        let (stdout, _) = texts(&out);
        assert!(out.status.success(), "{args:?}");
        assert!(stdout.contains("Usage:"), "{args:?}: {stdout}");
    }
    let (stdout, _) = texts(&berth(&["plugin", "probe", "--help"]));
    for flag in ["--timeout", "--wait", "--output", "unix:///"] {
        assert!(stdout.contains(flag), "probe --help lacks {flag}: {stdout}");
    }
}
