//! The whole lifecycle through the CLI and API, with real `berth serve`,
//! plugin processes and guests: every capability combination, retries without
//! duplicates, give-up and operator retry, crashes mid-flight, bad input.

use std::os::unix::fs::PermissionsExt;

use berth_tests::{Cluster, ClusterSpec, berth, test_dir, texts};
use serde_json::Value;

fn state_of(volumes: &[Value], name: &str) -> String {
    volumes
        .iter()
        .find(|v| v["name"] == name)
        .map(|v| v["state"].as_str().unwrap().to_string())
        .unwrap_or_else(|| "absent".into())
}

/// Creates a volume in zone a whose calls take the secret `backend`.
fn create_with_secret(c: &Cluster, name: &str, extra: &[&str]) -> String {
    let mut args = vec![
        "volume",
        "create",
        name,
        "--plugin",
        "hostpath",
        "--secret",
        "backend",
        "--requisite",
        "zone=a",
    ];
    args.extend_from_slice(extra);
    c.ok(&args)
}

/// Gives the server a secret `name` holding `token=<value>`, owner-only.
fn write_secret(c: &Cluster, name: &str, value: &str) {
    let path = c.dir.path().join("secrets").join(name);
    std::fs::write(&path, format!("token={value}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

fn volume(c: &Cluster, name: &str) -> Value {
    serde_json::from_str(&c.ok(&["volume", "get", name, "-o", "json"])).unwrap()
}

/// Create, publish on a named node, use it, unpublish, publish by placement,
/// delete; then nothing is left on the plugin or the node.
fn lifecycle(c: &Cluster) {
    c.ok(&[
        "volume",
        "create",
        "data",
        "--plugin",
        "hostpath",
        "--size",
        "64MiB",
        "--requisite",
        "zone=a",
        "--wait",
    ]);
    let v = volume(c, "data");
    assert_eq!(v["state"], "available");
    assert!(
        v["csi_name"].as_str().unwrap().starts_with("pv-data-"),
        "named by the guest: {v}"
    );
    let volume_id = v["volume_id"].as_str().unwrap().to_string();

    c.ok(&["volume", "publish", "data", "--node", "node-a", "--wait"]);
    let v = volume(c, "data");
    let target = v["publications"][0]["target_path"].as_str().unwrap().to_string();
    std::fs::write(format!("{target}/hello"), "from a pod").unwrap();
    let stored = std::fs::read_to_string(c.volume_data(&volume_id).join("hello")).unwrap();
    assert_eq!(stored, "from a pod");

    c.ok(&["volume", "unpublish", "data", "--node", "node-a", "--wait"]);
    assert!(
        !std::path::Path::new(&target).exists(),
        "the target is gone after unpublish"
    );
    assert_eq!(volume(c, "data")["publications"], serde_json::json!([]));

    // The volume lives in zone a: placement must choose node-a again.
    c.ok(&["volume", "publish", "data", "--wait"]);
    assert_eq!(volume(c, "data")["publications"][0]["node"], "node-a");

    c.ok(&["volume", "delete", "--force", "data", "--wait"]);
    assert_eq!(c.volumes().len(), 0);
    assert_eq!(c.plugin_volumes(), 0, "the plugin's volume is deleted too");
    assert!(!c.volume_data(&volume_id).exists());
}

#[test]
fn the_whole_lifecycle_for_each_capability_combination() {
    for (publish, stage) in [
        ("true", "true"),
        ("true", "false"),
        ("false", "true"),
        ("false", "false"),
    ] {
        let c = Cluster::start(ClusterSpec {
            plugin_args: vec!["--publish-unpublish", publish, "--stage-unstage", stage],
            ..Default::default()
        });
        let caps = c.ok(&["plugin", "status"]);
        assert_eq!(
            caps.contains("PUBLISH_UNPUBLISH_VOLUME"),
            publish == "true",
            "{caps}"
        );
        lifecycle(&c);
    }
}

#[test]
fn retries_never_create_a_volume_twice() {
    let c = Cluster::start(ClusterSpec {
        plugin_args: vec![
            "--fault",
            "UNAVAILABLE=0.4",
            "--fault",
            "DEADLINE_EXCEEDED=0.1",
            "--fault-calls",
            "CreateVolume,ControllerPublishVolume,NodeStageVolume,NodePublishVolume",
            "--seed",
            "11",
        ],
        ..Default::default()
    });
    for i in 0..12 {
        // Published on node-a below: they must live in its zone.
        c.ok(&[
            "volume",
            "create",
            &format!("v{i}"),
            "--plugin",
            "hostpath",
            "--requisite",
            "zone=a",
        ]);
    }
    for i in 0..4 {
        c.ok(&["volume", "publish", &format!("v{i}"), "--node", "node-a"]);
    }
    c.wait_until("all created, four published", |vs| {
        vs.len() == 12
            && vs
                .iter()
                .all(|v| matches!(v["state"].as_str(), Some("available" | "published")))
            && vs.iter().filter(|v| v["state"] == "published").count() == 4
    });
    assert_eq!(c.plugin_volumes(), 12, "one backend volume per Berth volume");
    assert!(
        c.log().contains("step failed"),
        "faults were injected and retried"
    );
}

#[test]
fn a_give_up_waits_for_the_operator_and_secrets_stay_secret() {
    const SECRET: &str = "s3cr3t-Value-7f1c";
    let mut c = Cluster::start(ClusterSpec {
        plugin_args: vec!["--require-secret", &format!("token={SECRET}")],
        ..Default::default()
    });
    let mut outputs = String::new();
    outputs += &create_with_secret(&c, "vault", &[]);
    c.wait_until("a give-up", |vs| state_of(vs, "vault") == "failed");
    let v = volume(&c, "vault");
    let failure = v["failure"].as_str().unwrap();
    assert!(
        failure.contains("CreateVolume") && failure.contains("backend"),
        "{failure}"
    );
    // Not progressing, and saying what it waits for.
    assert!(
        v["waiting"]
            .as_str()
            .unwrap()
            .contains("waiting for an operator: `berth volume retry vault`"),
        "{v}"
    );
    let status: serde_json::Value = serde_json::from_str(&c.ok(&["status", "-o", "json"])).unwrap();
    assert_eq!(status["waiting"], 1, "{status}");

    // The operator provides the secret, then retries.
    write_secret(&c, "backend", SECRET);
    outputs += &c.ok(&["volume", "retry", "vault", "--wait"]);
    outputs += &c.ok(&[
        "volume", "publish", "vault", "--node", "node-a", "--wait", "-o", "json",
    ]);
    outputs += &c.ok(&["volume", "get", "vault"]);
    outputs += &c.ok(&["volume", "list", "-o", "json"]);
    assert_eq!(volume(&c, "vault")["state"], "published");
    // Growing it reaches the node with the secret too (NodeExpandVolume's secrets).
    outputs += &c.ok(&["volume", "expand", "vault", "--size", "2GiB", "--wait"]);
    let node_log = c.nodes[0].1.log_text();
    assert!(node_log.contains("volume expanded on the node"), "{node_log}");

    c.kill_serve();
    let state = std::fs::read(c.dir.path().join("state/berth.redb")).unwrap();
    let in_state = state.windows(SECRET.len()).any(|w| w == SECRET.as_bytes());
    assert!(!in_state, "the secret's value is in the state file");
    assert!(!c.log().contains(SECRET), "the secret's value is in the log");
    assert!(!outputs.contains(SECRET), "the secret's value is in CLI output");
}

#[test]
fn a_crash_mid_flight_loses_nothing_and_duplicates_nothing() {
    let mut c = Cluster::start(ClusterSpec {
        plugin_args: vec!["--latency", "30ms"],
        ..Default::default()
    });
    for i in 0..16 {
        // Published on node-a below: they must live in its zone.
        c.ok(&[
            "volume",
            "create",
            &format!("v{i}"),
            "--plugin",
            "hostpath",
            "--requisite",
            "zone=a",
        ]);
    }
    c.wait_until("some created", |vs| {
        vs.iter().filter(|v| v["state"] == "available").count() >= 4
    });
    for i in 0..6 {
        c.ok(&["volume", "publish", &format!("v{i}"), "--node", "node-a"]);
    }
    c.kill_serve();
    c.start_serve();
    c.wait_until("everything converged", |vs| {
        vs.len() == 16
            && vs
                .iter()
                .all(|v| matches!(v["state"].as_str(), Some("available" | "published")))
            && vs.iter().filter(|v| v["state"] == "published").count() == 6
    });
    assert_eq!(c.plugin_volumes(), 16);
    // Another crash in the middle of deleting everything.
    for i in 0..16 {
        c.ok(&["volume", "delete", "--force", &format!("v{i}")]);
    }
    c.kill_serve();
    c.start_serve();
    c.wait_until("everything deleted", |vs| vs.is_empty());
    assert_eq!(c.plugin_volumes(), 0);
}

#[test]
fn a_plugin_named_hostpath_csi_k8s_io_on_node1() {
    // One process serving Controller and Node, as many drivers do.
    let dir = test_dir();
    let plugin = berth_tests::PluginBuilder::new(dir.path(), "csi")
        .args(&["--name", "hostpath.csi.k8s.io", "--node-id", "node1"])
        .spawn();
    let config = dir.path().join("berth.toml");
    std::fs::write(
        &config,
        format!(
            "fingerprint_interval = \"500ms\"\n[[plugin]]\nname = \"k8s-hostpath\"\ndriver = \"hostpath.csi.k8s.io\"\ncontroller = \"{0}\"\n[[node]]\nname = \"node1\"\ndir = \"node1\"\nplugins = {{ k8s-hostpath = \"{0}\" }}\n",
            plugin.endpoint()
        ),
    )
    .unwrap();
    let mut serve = std::process::Command::new(berth_tests::bin("berth"))
        .args(["serve", "-c"])
        .arg(&config)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let api = dir.path().join("berth-state/berth.sock");
    let run = |args: &[&str]| {
        let out = std::process::Command::new(berth_tests::bin("berth"))
            .args(args)
            .env("BERTH_API", &api)
            .output()
            .unwrap();
        let (o, e) = texts(&out);
        assert!(out.status.success(), "{args:?}: {o}{e}");
        o
    };
    for _ in 0..200 {
        if api.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    assert!(run(&["plugin", "status"]).contains("hostpath.csi.k8s.io"));
    run(&["volume", "create", "pvc-1", "--plugin", "k8s-hostpath", "--wait"]);
    run(&["volume", "publish", "pvc-1", "--wait"]);
    let got = run(&["volume", "get", "pvc-1", "-o", "json"]);
    let v: Value = serde_json::from_str(&got).unwrap();
    assert_eq!(v["publications"][0]["node"], "node1");
    assert!(
        v["csi_name"].as_str().unwrap().starts_with("berth-"),
        "built-in naming: {v}"
    );
    run(&["volume", "delete", "--force", "pvc-1", "--wait"]);
    let _ = serve.kill();
    let _ = serve.wait();
}

#[test]
fn bad_requests_name_the_field_at_fault() {
    let c = Cluster::start(ClusterSpec::default());
    let mode = std::fs::metadata(&c.api).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the API socket is for its owner only");
    let cases: [(&[&str], &str); 6] = [
        (
            &["volume", "create", "x", "--plugin", "nope"],
            "plugin: no plugin named \"nope\"",
        ),
        (
            &[
                "volume",
                "create",
                "x",
                "--plugin",
                "hostpath",
                "--access-mode",
                "rw",
            ],
            "access_mode: \"rw\"",
        ),
        (
            &[
                "volume", "create", "x", "--plugin", "hostpath", "--size", "2GiB", "--limit", "1GiB",
            ],
            "required_bytes",
        ),
        (
            &[
                "volume", "create", "x", "--plugin", "hostpath", "--secret", "../etc",
            ],
            "secret:",
        ),
        (
            &["volume", "publish", "missing", "--node", "node-a"],
            "no volume named \"missing\"",
        ),
        (&["volume", "get", "missing"], "NOT_FOUND"),
    ];
    for (args, expected) in cases {
        let out = c.berth(args);
        let (_, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    c.ok(&["volume", "create", "x", "--plugin", "hostpath", "--wait"]);
    let out = c.berth(&["volume", "publish", "x", "--node", "node-z"]);
    assert!(texts(&out).1.contains("node: there is no node named \"node-z\""));
    let out = c.berth(&["volume", "create", "x", "--plugin", "hostpath", "--size", "1GiB"]);
    let stderr = texts(&out).1;
    assert!(
        stderr.contains("already exists with a different spec"),
        "{stderr}"
    );
    assert!(
        stderr.contains("ALREADY_EXISTS"),
        "a name collision answers ALREADY_EXISTS: {stderr}"
    );
    // The same request again is not an error.
    c.ok(&["volume", "create", "x", "--plugin", "hostpath"]);
    // A volume that gave up can still be deleted.
    c.ok(&[
        "volume", "create", "doomed", "--plugin", "hostpath", "--secret", "absent",
    ]);
    c.wait_until("a give-up", |vs| state_of(vs, "doomed") == "failed");
    c.ok(&["volume", "delete", "doomed", "--wait"]);
    assert_eq!(c.plugin_volumes(), 1, "only x is on the plugin");
}

#[test]
fn a_create_the_plugin_refused_is_deleted_without_a_trace() {
    // The plugin answers CreateVolume with UNAUTHENTICATED: the call was made,
    // and refused; deleting must not wait for a create that cannot succeed.
    let c = Cluster::start(ClusterSpec {
        plugin_args: vec!["--require-secret", "token=x"],
        ..Default::default()
    });
    c.ok(&["volume", "create", "refused", "--plugin", "hostpath"]);
    c.wait_until("a give-up", |vs| state_of(vs, "refused") == "failed");
    assert!(
        volume(&c, "refused")["failure"]
            .as_str()
            .unwrap()
            .contains("UNAUTHENTICATED")
    );
    c.ok(&["volume", "delete", "refused", "--wait"]);
    assert_eq!(c.plugin_volumes(), 0);
}

#[test]
fn a_bad_config_names_the_key_at_fault() {
    let dir = test_dir();
    let config = dir.path().join("berth.toml");
    for (text, expected) in [
        ("workers = 0\n[[plugin]]\nname = \"p\"\n", "workers: 0"),
        ("[[plugin]]\nname = \"p\"\ncontroler = \"/x.sock\"\n", "controler"),
        (
            "[[plugin]]\nname = \"p\"\n[[node]]\nname = \"n\"\ndir = \"n\"\nplugins = { q = \"/q.sock\" }\n",
            "node[0].plugins.q",
        ),
        (
            "[[plugin]]\nname = \"p\"\n[[policy]]\nmodule = \"missing.wasm\"\n",
            "policy[0]",
        ),
    ] {
        std::fs::write(&config, text).unwrap();
        let out = berth(&["serve", "-c", config.to_str().unwrap()]);
        let (_, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(1), "{text}: {stderr}");
        assert!(stderr.contains(expected), "{text}: {stderr}");
    }
}

#[test]
fn secrets_never_reach_a_guest() {
    const SECRET: &str = "g0t-Cha-91ab";
    // A guest that shows its whole input: a naming request as a refusal, a
    // failure as a give-up. CreateVolume always fails, after the secret was sent.
    let extra = format!(
        "[[policy]]\nmodule = \"{}\"\ndecisions = [\"naming\", \"retry\"]\nsettings = {{ behaviour = \"dump-input\" }}\n",
        berth_tests::guest("berth_hostile_guest").display()
    );
    let c = Cluster::start(ClusterSpec {
        guests: false,
        extra: &extra,
        plugin_args: vec![
            "--require-secret",
            &format!("token={SECRET}"),
            "--fault-calls",
            "CreateVolume",
            "--fault",
            "INVALID_ARGUMENT=1",
        ],
        ..Default::default()
    });
    write_secret(&c, "backend", SECRET);
    for (name, label) in [("named", "dump=naming"), ("created", "dump=no")] {
        create_with_secret(&c, name, &["--label", label]);
    }
    c.wait_until("both fail", |vs| {
        state_of(vs, "named") == "failed" && state_of(vs, "created") == "failed"
    });
    let naming = volume(&c, "named")["failure"].as_str().unwrap().to_string();
    let retry = volume(&c, "created")["failure"].as_str().unwrap().to_string();
    assert!(
        naming.contains("input NamingRequest"),
        "the guest showed its input: {naming}"
    );
    assert!(
        retry.contains("input Failure") && retry.contains("INVALID_ARGUMENT"),
        "{retry}"
    );
    for input in [&naming, &retry] {
        assert!(!input.contains(SECRET), "a guest saw the secret: {input}");
    }
}

/// Deleting a volume in use is refused, naming where it is published, and
/// nothing is unpublished; `--force` unpublishes it, then deletes it.
#[test]
fn a_published_volume_is_deleted_only_with_force() {
    let c = Cluster::start(ClusterSpec {
        guests: false,
        ..ClusterSpec::default()
    });
    c.ok(&["volume", "create", "busy", "--plugin", "hostpath", "--wait"]);
    c.ok(&["volume", "publish", "busy", "--node", "node-a", "--wait"]);
    let out = c.berth(&["volume", "delete", "busy", "-o", "json"]);
    let (_, err) = berth_tests::texts(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let doc: serde_json::Value = serde_json::from_str(err.trim()).unwrap();
    assert_eq!(doc["error"]["code"], "FAILED_PRECONDITION", "{doc}");
    let message = doc["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("node-a") && message.contains("--force"),
        "{message}"
    );
    let v: serde_json::Value = serde_json::from_str(&c.ok(&["volume", "get", "busy", "-o", "json"])).unwrap();
    assert_eq!(v["state"], "published", "nothing was undone: {v}");

    c.ok(&["volume", "delete", "busy", "--force", "--wait"]);
    assert_eq!(c.plugin_volumes(), 0);
}
