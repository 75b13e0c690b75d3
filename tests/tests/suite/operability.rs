//! What operators' tools expect of a gRPC service, asked with those tools'
//! own protocols over the real API socket: health and reflection.

use berth_tests::{Cluster, ClusterSpec};
use prost::Message;
use serde_json::Value;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_reflection::pb::v1::ServerReflectionRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

fn asked(api: &std::path::Path, request: MessageRequest) -> MessageResponse {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut client = ServerReflectionClient::new(berth::csi::unix_channel(api));
        let mut answers = client
            // A stream of one request.
            .server_reflection_info(tonic::codegen::tokio_stream::iter([ServerReflectionRequest {
                host: String::new(),
                message_request: Some(request),
            }]))
            .await
            .unwrap()
            .into_inner();
        answers
            .message()
            .await
            .unwrap()
            .unwrap()
            .message_response
            .unwrap()
    })
}

#[test]
fn a_reflection_client_lists_and_describes_the_api_and_health_answers() {
    let c = Cluster::start(ClusterSpec {
        guests: false,
        ..ClusterSpec::default()
    });
    let MessageResponse::ListServicesResponse(list) =
        asked(&c.api, MessageRequest::ListServices(String::new()))
    else {
        panic!("not a service list");
    };
    let mut names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "berth.v1.Berth",
            "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection"
        ],
        "the API and the standard services, not the CSI or etcd services Berth calls"
    );

    // The API's own description, as grpcurl fetches it before a call.
    let MessageResponse::FileDescriptorResponse(files) = asked(
        &c.api,
        MessageRequest::FileContainingSymbol("berth.v1.Berth".into()),
    ) else {
        panic!("not a file descriptor");
    };
    let methods: Vec<String> = files
        .file_descriptor_proto
        .iter()
        .map(|bytes| prost_types::FileDescriptorProto::decode(bytes.as_slice()).unwrap())
        .flat_map(|f| f.service)
        .filter(|s| s.name() == "Berth")
        .flat_map(|s| s.method)
        .map(|m| m.name().to_string())
        .collect();
    for wanted in ["CreateVolume", "PublishVolume", "Summary"] {
        assert!(methods.iter().any(|m| m == wanted), "{wanted} in {methods:?}");
    }

    let rt = tokio::runtime::Runtime::new().unwrap();
    let status = rt.block_on(async {
        let mut health = HealthClient::new(berth::csi::unix_channel(&c.api));
        health
            .check(tonic_health::pb::HealthCheckRequest {
                service: "berth.v1.Berth".into(),
            })
            .await
            .unwrap()
            .into_inner()
            .status
    });
    assert_eq!(status, ServingStatus::Serving as i32);
}

/// `BERTH_LOG_FORMAT=json`: one JSON object a line, and a failed CSI call's
/// line carries the volume, the step and the attempt, to follow one volume.
#[test]
fn json_logs_carry_the_volume_the_step_and_the_attempt() {
    let mut c = Cluster::start(ClusterSpec {
        guests: false,
        plugin_args: vec!["--fault-calls", "CreateVolume", "--fault", "UNAVAILABLE=1.0"],
        ..ClusterSpec::default()
    });
    c.kill_serve();
    let log = c.dir.path().join("serve-json.log");
    let file = std::fs::File::create(&log).unwrap();
    let mut serve = std::process::Command::new(berth_tests::bin("berth"))
        .args(["serve", "--config"])
        .arg(&c.config)
        .env("BERTH_LOG_FORMAT", "json")
        .env("BERTH_LOG", "info")
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::os::unix::net::UnixStream::connect(&c.api).is_err() {
        assert!(std::time::Instant::now() < deadline, "the API never came up");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    c.ok(&["volume", "create", "logged", "--plugin", "hostpath"]);
    let id = c.volumes()[0]["id"].as_str().unwrap().to_string();
    assert!(!id.is_empty());
    let failed = |text: &str| -> Vec<serde_json::Value> {
        text.lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .filter(|v| v["message"] == "step failed")
            .collect()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let lines = loop {
        let lines = failed(&std::fs::read_to_string(&log).unwrap());
        if lines.len() >= 2 {
            break lines;
        }
        assert!(std::time::Instant::now() < deadline, "no failed steps logged");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let _ = serve.kill();
    let _ = serve.wait();
    for (n, line) in lines.iter().take(2).enumerate() {
        assert_eq!(line["volume"], "logged", "{line}");
        assert_eq!(line["id"], id.as_str(), "the id, as the agents log it: {line}");
        assert_eq!(line["step"], "CreateVolume", "{line}");
        assert_eq!(line["attempt"], (n + 1) as u64, "{line}");
        assert!(line["level"] == "INFO" || line["level"] == "WARN", "{line}");
    }
}

/// `berth serve` answers its first request once its in-process nodes are
/// connected: the first `node list` shows every node ready and every node
/// plugin fingerprinted, never "unknown" while the agents start.
#[test]
fn the_first_answer_comes_with_the_in_process_nodes_ready() {
    let c = Cluster::start(ClusterSpec {
        nodes: vec![("node-a", "a"), ("node-b", "b"), ("node-c", "a")],
        guests: false,
        ..ClusterSpec::default()
    });
    let nodes = c.node_list();
    assert_eq!(nodes.len(), 3, "{nodes:?}");
    for n in &nodes {
        assert_eq!(n.state, "ready", "{nodes:?}");
        assert!(
            !n.plugins.is_empty() && n.plugins.iter().all(|p| p.health == "healthy"),
            "{nodes:?}"
        );
    }
}

/// An in-process agent slow to start (its node plugin takes seconds over
/// its first answer) does not hold the API for the whole of its start: the
/// first answer shows its node unknown, and the node is ready once the
/// agent has connected.
#[test]
fn a_slow_in_process_agent_does_not_hold_the_api() {
    let c = Cluster::start(ClusterSpec {
        nodes: vec![("node-a", "a")],
        guests: false,
        node_args: vec!["--latency", "8s", "--fault-calls", "GetPluginInfo"],
        ..ClusterSpec::default()
    });
    let first = c.node_list();
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(
        first[0].state, "unknown",
        "answered before the agent connected: {first:?}"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while c.node_state("node-a").as_deref() != Some("ready") {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}\n{}",
            c.node_list(),
            c.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// `berth serve --check` says whether a configuration is valid and exits,
/// naming the key at fault; nothing is started.
#[test]
fn serve_check_validates_a_configuration_and_exits() {
    let dir = berth_tests::test_dir();
    let config = dir.path().join("berth.toml");
    let init = berth_tests::berth(&["init", &config.display().to_string()]);
    assert!(init.status.success(), "{:?}", berth_tests::texts(&init));
    let out = berth_tests::berth(&["serve", "--check", "--config", &config.display().to_string()]);
    let (stdout, stderr) = berth_tests::texts(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("valid") && stdout.contains("1 plugin(s), 1 node(s)"),
        "{stdout}"
    );
    assert!(
        !dir.path().join("state").exists(),
        "nothing started, nothing made"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&config).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o640, "init writes the config for its owner");
    std::fs::write(&config, "state = \"s.redb\"\nworkers = \"many\"\n").unwrap();
    let out = berth_tests::berth(&["serve", "--check", "--config", &config.display().to_string()]);
    let (_, stderr) = berth_tests::texts(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr.contains("workers"), "{stderr}");
    // Every unknown key, in the order of the file (the first only, and the
    // later line first, before).
    std::fs::write(
        &config,
        "zebra = 1\nstate = \"s.redb\"\napple = 2\n[[plugin]]\nname = \"p\"\ncontroller = \"c.sock\"\n",
    )
    .unwrap();
    let out = berth_tests::berth(&["serve", "--check", "--config", &config.display().to_string()]);
    let (_, stderr) = berth_tests::texts(&out);
    assert_eq!(out.status.code(), Some(1));
    let at = |key: &str| stderr.find(&format!("unknown field `{key}`"));
    assert!(
        matches!((at("zebra"), at("apple")), (Some(z), Some(a)) if z < a),
        "{stderr}"
    );
}

/// `berth init` under a umask that would let anyone write still writes a
/// config only its owner may change; `berth serve` without one says how to
/// get one.
#[test]
fn init_writes_an_owners_config_and_serve_without_one_says_so() {
    use std::os::unix::fs::PermissionsExt;
    let dir = berth_tests::test_dir();
    let config = dir.path().join("open.toml");
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("umask 000; exec \"$0\" init {}", config.display()))
        .arg(berth_tests::bin("berth"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}", berth_tests::texts(&out));
    let mode = std::fs::metadata(&config).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o640);
    let missing = dir.path().join("missing.toml").display().to_string();
    let out = berth_tests::berth(&["serve", "--config", &missing]);
    let (_, stderr) = berth_tests::texts(&out);
    assert!(!out.status.success());
    assert!(stderr.contains(&format!("berth init {missing}")), "{stderr}");
}

/// `volume unpublish` without `--node` takes the one node a volume is
/// published on, and asks which when there are several.
#[test]
fn unpublish_without_a_node_takes_the_only_one() {
    let c = Cluster::start(ClusterSpec {
        controller_topology: None,
        ..ClusterSpec::default()
    });
    c.ok(&[
        "volume",
        "create",
        "shared",
        "--plugin",
        "hostpath",
        "--access-mode",
        "multi-node-multi-writer",
        "--wait",
    ]);
    c.ok(&["volume", "publish", "shared", "--node", "node-a", "--wait"]);
    c.ok(&["volume", "publish", "shared", "--node", "node-b", "--wait"]);
    let out = c.berth(&["volume", "unpublish", "shared"]);
    let (_, stderr) = berth_tests::texts(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains("node-a, node-b") && stderr.contains("--node"),
        "{stderr}"
    );
    c.ok(&["volume", "unpublish", "shared", "--node", "node-b", "--wait"]);
    c.ok(&["volume", "unpublish", "shared", "--wait"]);
    let v: serde_json::Value =
        serde_json::from_str(&c.ok(&["volume", "get", "shared", "-o", "json"])).unwrap();
    assert_eq!(v["publications"], serde_json::json!([]), "{v:#}");
    let out = c.berth(&["volume", "unpublish", "shared"]);
    let (_, stderr) = berth_tests::texts(&out);
    assert!(
        !out.status.success() && stderr.contains("not published"),
        "{stderr}"
    );
}

/// Sizes as Kubernetes and Docker users write them reach the API as the
/// bytes they mean; a bare number and a negative size are refused before
/// any call, and with `-o json` the refusal is JSON too (exit status 2).
#[test]
fn sizes_are_quantities_and_usage_errors_follow_the_output_format() {
    let c = Cluster::start(ClusterSpec {
        guests: false,
        ..ClusterSpec::default()
    });
    for (name, size, bytes) in [
        ("ten-g", "10G", 10_000_000_000u64),
        ("ten-gb", "10GB", 10_000_000_000),
        ("ten-gib", "10gib", 10 << 30),
        ("half-mi", "0.5Mi", 1 << 19),
    ] {
        c.ok(&["volume", "create", name, "--plugin", "hostpath", "--size", size]);
        let v: serde_json::Value =
            serde_json::from_str(&c.ok(&["volume", "get", name, "-o", "json"])).unwrap();
        assert_eq!(v["required_bytes"], bytes, "{size}: {v}");
    }

    let out = c.berth(&["volume", "create", "bare", "--plugin", "hostpath", "--size", "10"]);
    let (_, err) = berth_tests::texts(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("no unit") && err.contains("10B"), "{err}");

    let out = c.berth(&[
        "volume", "create", "neg", "--plugin", "hostpath", "--size", "-5GiB", "-o", "json",
    ]);
    let (stdout, err) = berth_tests::texts(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(stdout.is_empty(), "{stdout}");
    let doc: serde_json::Value = serde_json::from_str(err.trim()).unwrap_or_else(|e| panic!("{e}: {err}"));
    assert!(doc["error"]["code"].is_null(), "{doc}");
    assert!(
        doc["error"]["message"].as_str().unwrap().contains("negative"),
        "{doc}"
    );
    // Neither refused size reached the server.
    let names: Vec<String> = c
        .volumes()
        .iter()
        .map(|v| v["name"].as_str().unwrap().to_string())
        .collect();
    assert!(!names.iter().any(|n| n == "bare" || n == "neg"), "{names:?}");
}

/// A plugin that reports another driver than the configured one is shown
/// unhealthy and gets no work: the volume is held back with the reason,
/// as for a plugin not there at all, and no CreateVolume reaches it.
#[test]
fn a_plugin_reporting_another_driver_gets_no_work() {
    let c = Cluster::start(ClusterSpec {
        guests: false,
        // The plugin reports another name than berth.toml's `driver`.
        plugin_args: vec!["--name", "other.csi.example"],
        ..ClusterSpec::default()
    });
    let out = c.berth(&[
        "volume",
        "create",
        "held",
        "--plugin",
        "hostpath",
        "--wait",
        "--timeout",
        "2s",
    ]);
    assert!(!out.status.success());
    berth_tests::wait_for(
        "the volume to say why it is held back",
        std::time::Duration::from_secs(20),
        || {
            c.volumes().iter().any(|v| {
                v["waiting"].as_str().is_some_and(|w| {
                    w.contains("held back")
                        && w.contains("other.csi.example")
                        && w.contains("hostpath.csi.berth.dev")
                })
            })
        },
        || format!("{:?}", c.volumes()),
    );
    assert_eq!(
        c.plugin_volumes(),
        0,
        "CreateVolume reached a plugin that is not the driver configured"
    );
    let status = c.ok(&["plugin", "status"]);
    assert!(status.contains("unhealthy"), "{status}");
}

/// A `[[node]]` removed from berth.toml while it holds publications: the
/// server says so at start, naming the node and its volumes, the volume
/// says what to do while it waits, and forgetting the node releases it.
#[test]
fn a_node_removed_from_the_config_while_it_holds_volumes_is_named_at_start() {
    let mut c = Cluster::start(ClusterSpec {
        guests: false,
        nodes: vec![("node-a", "a"), ("node-b", "a")],
        ..ClusterSpec::default()
    });
    c.ok(&["volume", "create", "kept", "--plugin", "hostpath", "--wait"]);
    c.ok(&["volume", "publish", "kept", "--node", "node-b", "--wait"]);
    c.kill_serve();
    // berth.toml without node-b's table.
    let config = std::fs::read_to_string(&c.config).unwrap();
    let start = config.find("[[node]]\nname = \"node-b\"").unwrap();
    let end = config[start + 1..]
        .find("[[")
        .map_or(config.len(), |i| start + 1 + i);
    std::fs::write(&c.config, format!("{}{}", &config[..start], &config[end..])).unwrap();
    c.start_serve();

    let warned = |log: &str| {
        log.lines()
            .find(|l| l.contains("does not name") && l.contains("node-b"))
            .map(str::to_string)
    };
    berth_tests::wait_for(
        "a warning about node-b at start",
        std::time::Duration::from_secs(20),
        || warned(&c.log()).is_some(),
        || c.log(),
    );
    let warning = warned(&c.log()).unwrap();
    assert!(
        warning.contains("kept") && warning.contains("node forget"),
        "{warning}"
    );

    c.ok(&["volume", "unpublish", "kept", "--node", "node-b"]);
    berth_tests::wait_for(
        "the volume to say what to do",
        std::time::Duration::from_secs(20),
        || {
            c.volumes().iter().any(|v| {
                v["waiting"]
                    .as_str()
                    .is_some_and(|w| w.contains("berth node forget node-b --force"))
            })
        },
        || format!("{:?}", c.volumes()),
    );
    c.ok(&["node", "forget", "node-b", "--force"]);
    c.wait_until("the publication released", |vs| {
        vs.iter()
            .all(|v| v["publications"].as_array().is_some_and(Vec::is_empty))
    });
}

/// `volume list` asks for a page at a time (a store of a million volumes
/// is never one answer): pages follow name order, a volume made between
/// pages after the token is seen and one deleted is not, and the CLI's
/// document is the same whatever the page size.
#[test]
fn volumes_are_listed_a_page_at_a_time_in_name_order() {
    use berth_proto::berth::v1 as api;
    let c = Cluster::start(ClusterSpec {
        guests: false,
        ..ClusterSpec::default()
    });
    for name in ["a1", "b1", "c1", "d1", "e1"] {
        c.ok(&["volume", "create", name, "--plugin", "hostpath", "--size", "1Mi"]);
    }
    let page = |token: &str, max: u32| {
        berth_tests::block_on(async {
            let request = api::ListVolumesRequest {
                max_entries: max,
                starting_token: token.into(),
                ..Default::default()
            };
            c.client().list_volumes(request).await.map(|r| r.into_inner())
        })
    };
    let names = |p: &api::ListVolumesResponse| -> Vec<String> {
        p.volumes
            .iter()
            .map(|v| v.spec.as_ref().unwrap().name.clone())
            .collect()
    };
    let first = page("", 2).unwrap();
    assert_eq!(
        (names(&first), first.next_token.as_str()),
        (vec!["a1".into(), "b1".into()], "b1")
    );
    // Between pages: one made after the token, one deleted ahead of it.
    c.ok(&["volume", "create", "c0", "--plugin", "hostpath", "--size", "1Mi"]);
    c.ok(&["volume", "delete", "d1"]);
    c.wait_until("d1 gone", |v| v.iter().all(|v| v["name"] != "d1"));
    let second = page(&first.next_token, 2).unwrap();
    assert_eq!(names(&second), ["c0", "c1"]);
    let last = page(&second.next_token, 2).unwrap();
    assert_eq!((names(&last), last.next_token.as_str()), (vec!["e1".into()], ""));
    // No page size: everything at once, as before paging.
    assert_eq!(page("", 0).unwrap().volumes.len(), 5);
    let bad = page("bad\u{7}token", 2).unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument, "{bad:?}");

    let whole = c.ok(&["volume", "list", "-o", "json"]);
    let paged = c.ok(&["volume", "list", "-o", "json", "--page-size", "2"]);
    assert_eq!(whole, paged);
    let listed: Vec<Value> = serde_json::from_str(&paged).unwrap();
    let listed: Vec<&str> = listed.iter().map(|v| v["name"].as_str().unwrap()).collect();
    assert_eq!(listed, ["a1", "b1", "c0", "c1", "e1"]);
    let text = c.ok(&["volume", "list", "--page-size", "1"]);
    assert_eq!(text.lines().count(), 6, "a heading and five volumes:\n{text}");

    // Filters: by part of the name (any case), by state, by node; paged as the rest.
    c.ok(&["volume", "publish", "c1", "--node", "node-a", "--wait"]);
    let listed = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["volume", "list", "-o", "json", "--page-size", "1"];
        all.extend_from_slice(args);
        let listed: Vec<Value> = serde_json::from_str(&c.ok(&all)).unwrap();
        listed
            .iter()
            .map(|v| v["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(listed(&["--name-contains", "C"]), ["c0", "c1"]);
    assert_eq!(listed(&["--state", "published"]), ["c1"]);
    assert_eq!(listed(&["--node", "node-a"]), ["c1"]);
    assert_eq!(listed(&["--node", "node-b"]), Vec::<String>::new());
    assert_eq!(
        listed(&["--plugin", "hostpath", "--name-contains", "1"]),
        ["a1", "b1", "c1", "e1"]
    );
    // By label: a key and its value, or the key alone.
    for (name, label) in [("l1", "team=db"), ("l2", "team=web")] {
        c.ok(&[
            "volume", "create", name, "--plugin", "hostpath", "--size", "1Mi", "--label", label,
        ]);
    }
    assert_eq!(listed(&["--label", "team=db"]), ["l1"]);
    assert_eq!(listed(&["--label", "team"]), ["l1", "l2"]);
    assert_eq!(listed(&["--label", "team=ops"]), Vec::<String>::new());
    let unpaged = berth_tests::block_on(async {
        let request = api::ListVolumesRequest {
            state: "available".into(),
            ..Default::default()
        };
        c.client().list_volumes(request).await
    });
    assert_eq!(
        unpaged.unwrap_err().code(),
        tonic::Code::InvalidArgument,
        "a filter needs a page size"
    );
    let wrong = c.berth(&["volume", "list", "--state", "gone"]);
    assert!(!wrong.status.success());
}

/// `berth status` names every unhealthy plugin with its reason, and
/// `--check` exits 1 while there is one (a plugin whose socket the server
/// may not open used to leave `status` silent and exiting 0).
#[test]
fn status_names_unhealthy_plugins_and_check_fails_on_them() {
    let healthy = Cluster::start(ClusterSpec::builtin());
    let out = healthy.berth(&["status", "--check"]);
    let (stdout, stderr) = berth_tests::texts(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("problems  none"), "{stdout}");

    let c = Cluster::start(ClusterSpec {
        guests: false,
        node_args: vec!["--fault", "UNAVAILABLE=1.0", "--fault-calls", "GetPluginInfo"],
        ..ClusterSpec::default()
    });
    berth_tests::wait_for(
        "status --check to fail",
        std::time::Duration::from_secs(30),
        || !c.berth(&["status", "--check"]).status.success(),
        || c.log(),
    );
    let out = c.berth(&["status", "--check"]);
    let (stdout, _) = berth_tests::texts(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout.contains("problem   node node-a: plugin hostpath unhealthy: ")
            && stdout.contains("UNAVAILABLE"),
        "{stdout}"
    );
    // Without --check the same report, and exit 0.
    assert!(c.berth(&["status"]).status.success());
}
