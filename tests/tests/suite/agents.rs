//! Nodes served by `berth agent` processes: one per node, each with its own
//! sample node plugin process, dialing `berth serve` on its cluster socket.

use std::time::Duration;

use berth_tests::{AgentProcess, Cluster, ClusterSpec, wait_for};
use serde_json::Value;

fn agents(nodes: Vec<(&'static str, &'static str)>) -> Cluster {
    Cluster::start(ClusterSpec {
        nodes,
        agents: true,
        ..ClusterSpec::default()
    })
}

fn get(c: &Cluster, name: &str) -> Value {
    serde_json::from_str(&c.ok(&["volume", "get", name, "-o", "json"])).unwrap()
}

/// How many times node `i`'s plugin did `what` ("staged", "published") for a volume.
fn calls(c: &Cluster, i: usize, what: &str, volume_id: &str) -> usize {
    let needle = format!("{what} on the node");
    c.nodes[i]
        .1
        .log_text()
        .lines()
        .filter(|l| l.contains(&needle) && l.contains(volume_id))
        .count()
}

#[test]
fn volumes_are_published_through_agents_and_shown_on_their_nodes() {
    let c = agents(vec![("node-a", "a"), ("node-b", "b")]);
    let text = c.ok(&["node", "list"]);
    assert!(text.contains("node-a") && text.contains("ready"), "{text}");
    c.create_in("v", "zone=b");
    c.ok(&["volume", "publish", "v", "--node", "node-b", "--wait"]);
    let v = get(&c, "v");
    assert_eq!(v["state"], "published");
    let target = v["publications"][0]["target_path"].as_str().unwrap();
    assert!(target.contains("nodes/node-b/publish"), "{target}");
    assert!(
        std::fs::metadata(target).is_ok(),
        "the node shows the volume at {target}"
    );
    let volume_id = v["volume_id"].as_str().unwrap();
    assert_eq!(calls(&c, 1, "published", volume_id), 1);
    assert_eq!(calls(&c, 0, "published", volume_id), 0);

    c.ok(&["volume", "unpublish", "v", "--node", "node-b", "--wait"]);
    assert!(
        std::fs::symlink_metadata(target).is_err(),
        "unpublished from the node"
    );
    c.ok(&["volume", "delete", "v", "--wait"]);
    assert_eq!(c.plugin_volumes(), 0);
}

#[test]
fn an_agent_restarted_with_its_mounts_in_place_publishes_nothing_again() {
    let mut c = agents(vec![("node-a", "a")]);
    let mut ids = Vec::new();
    for name in ["one", "two", "three"] {
        c.create_in(name, "zone=a");
        c.ok(&["volume", "publish", name, "--node", "node-a", "--wait"]);
        ids.push(get(&c, name)["volume_id"].as_str().unwrap().to_string());
    }
    let sets = |c: &Cluster| -> Vec<String> {
        let log = c.agents[0].log_text();
        log.lines()
            .filter(|l| l.contains("desired set received"))
            .map(String::from)
            .collect()
    };
    let before = sets(&c).len();
    c.agent("node-a").kill();
    c.wait_nodes(&["node-a"], "down", Duration::from_secs(10));
    c.agent("node-a").start();
    c.wait_nodes(&["node-a"], "ready", Duration::from_secs(20));
    wait_for(
        "the restarted agent's desired set",
        Duration::from_secs(20),
        || sets(&c).len() > before,
        || c.agents[0].log_text(),
    );
    // The set names the three volumes, and the node already holds them as
    // it says: nothing to drive, so no call can follow.
    let set = sets(&c).pop().unwrap();
    assert!(set.contains("volumes=3") && set.contains("driving=0"), "{set}");
    for id in &ids {
        assert_eq!(calls(&c, 0, "staged", id), 1, "no second NodeStage of {id}");
        assert_eq!(calls(&c, 0, "published", id), 1, "no second NodePublish of {id}");
    }
    for name in ["one", "two", "three"] {
        assert_eq!(get(&c, name)["state"], "published");
    }
    let log = c.agent("node-a").log_text();
    assert!(log.contains("desired set received"), "{log}");
}

#[test]
fn a_frozen_agent_is_down_and_its_work_waits_until_it_is_back() {
    let mut c = agents(vec![("node-a", "a"), ("node-b", "b")]);
    c.create_in("held", "zone=a");
    c.agent("node-a").freeze();
    c.wait_nodes(&["node-a"], "down", Duration::from_secs(10));
    c.wait_nodes(&["node-b"], "ready", Duration::from_secs(1));
    let list = c.ok(&["node", "list"]);
    assert!(
        list.lines().any(|l| l.contains("node-a") && l.contains("down")),
        "{list}"
    );

    // Asked while the node is down: accepted, flagged, not guessed at.
    c.ok(&["volume", "publish", "held", "--node", "node-a"]);
    wait_for(
        "the volume to say it waits for node-a",
        Duration::from_secs(10),
        || get(&c, "held").to_string().contains("node-a\\\", whose agent is"),
        || get(&c, "held").to_string(),
    );
    assert_ne!(get(&c, "held")["state"], "published");

    c.agent("node-a").thaw();
    c.wait_nodes(&["node-a"], "ready", Duration::from_secs(20));
    wait_for(
        "the publish to finish once the agent is back",
        Duration::from_secs(20),
        || get(&c, "held")["state"] == "published",
        || format!("{}\n{}", get(&c, "held"), c.log()),
    );
    let v = get(&c, "held");
    assert_eq!(calls(&c, 0, "published", v["volume_id"].as_str().unwrap()), 1);
}

#[test]
fn a_drained_node_is_emptied_and_left_out_until_undone() {
    let c = agents(vec![("node-a", "a"), ("node-b", "a")]);
    for name in ["d1", "d2"] {
        c.create_in(name, "zone=a");
        c.ok(&["volume", "publish", name, "--node", "node-a", "--wait"]);
    }
    let out = c.ok(&["node", "drain", "node-a"]);
    assert!(out.contains("2 publication(s)"), "{out}");
    c.wait_until("both unpublished from node-a", |v| {
        v.iter().all(|x| x["state"] == "available")
    });
    let list = c.ok(&["node", "list"]);
    assert!(list.contains("draining"), "{list}");
    let refused = c.berth(&["volume", "publish", "d1", "--node", "node-a"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("draining"));
    // Placement goes elsewhere.
    c.ok(&["volume", "publish", "d1", "--wait"]);
    assert_eq!(get(&c, "d1")["publications"][0]["node"], "node-b");

    let out = c.ok(&["node", "drain", "node-a", "--undo"]);
    assert!(
        out.contains("no longer draining") && !out.contains("undone"),
        "{out}"
    );
    c.ok(&["volume", "publish", "d2", "--node", "node-a", "--wait"]);
    assert_eq!(get(&c, "d2")["state"], "published");
}

#[test]
fn a_forgotten_node_lets_its_volumes_go_elsewhere_and_its_agent_is_refused_until_removed() {
    let mut c = agents(vec![("node-a", "a"), ("node-b", "a")]);
    c.create_in("f", "zone=a");
    c.ok(&["volume", "publish", "f", "--node", "node-a", "--wait"]);
    let v = get(&c, "f");
    let target = v["publications"][0]["target_path"].as_str().unwrap().to_string();
    c.agent("node-a").kill();
    c.wait_nodes(&["node-a"], "down", Duration::from_secs(10));

    let refused = c.berth(&["node", "forget", "node-a"]);
    assert!(!refused.status.success());
    let why = String::from_utf8_lossy(&refused.stderr).to_string();
    assert!(why.contains("--force") && why.contains("dead"), "{why}");

    c.ok(&["node", "forget", "node-a", "--force"]);
    c.wait_until("the publication to be dropped", |v| {
        v.iter().all(|x| x["state"] == "available")
    });
    let list = c.ok(&["node", "list"]);
    assert!(
        list.lines()
            .any(|l| l.contains("node-a") && l.contains("forgotten")),
        "{list}"
    );
    c.ok(&["volume", "publish", "f", "--node", "node-b", "--wait"]);

    // The dead node comes back: refused, and its agent says why.
    c.agent("node-a").start();
    wait_for(
        "the agent to be refused",
        Duration::from_secs(20),
        || c.agents[0].log_text().contains("forgotten"),
        || c.agents[0].log_text(),
    );
    assert_eq!(c.node_state("node-a").as_deref(), Some("forgotten"));

    // Removed, it may join again, and tears down what Berth no longer has there.
    c.ok(&["node", "remove", "node-a"]);
    c.agent("node-a").kill();
    c.agent("node-a").start();
    c.wait_nodes(&["node-a"], "ready", Duration::from_secs(20));
    wait_for(
        "the stale publication to be torn down on node-a",
        Duration::from_secs(20),
        || std::fs::symlink_metadata(&target).is_err(),
        || c.agents[0].log_text(),
    );
    assert_eq!(get(&c, "f")["publications"][0]["node"], "node-b");
}

/// Whether process `pid` ignores `signal`, as the kernel reports it.
fn ignores(pid: u32, signal: i32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .map(|m| u64::from_str_radix(m.trim(), 16).unwrap())
        .unwrap();
    mask & (1 << (signal - 1)) != 0
}

/// A server dying while the agent writes to it must not take the agent
/// with it: Berth ignores SIGPIPE (the CLI ends quietly when its output is
/// closed by checking its writes instead).
#[test]
fn the_agent_and_the_server_outlive_a_peer_gone_mid_write() {
    let c = agents(vec![("node-a", "a")]);
    assert!(ignores(c.agents[0].pid().unwrap(), libc::SIGPIPE), "berth agent");
    assert!(ignores(c.serve_pid().unwrap(), libc::SIGPIPE), "berth serve");
}

#[test]
fn teardown_goes_on_while_the_server_is_away() {
    let mut c = Cluster::start(ClusterSpec {
        nodes: vec![("node-a", "a")],
        agents: true,
        // NodeUnpublish takes its time, so the server is gone before it ends.
        node_args: vec!["--latency", "1500ms", "--fault-calls", "NodeUnpublishVolume"],
        ..ClusterSpec::default()
    });
    c.create_in("t", "zone=a");
    c.ok(&["volume", "publish", "t", "--node", "node-a", "--wait"]);
    let v = get(&c, "t");
    let target = v["publications"][0]["target_path"].as_str().unwrap().to_string();
    assert!(std::fs::symlink_metadata(&target).is_ok());

    c.ok(&["volume", "unpublish", "t", "--node", "node-a"]);
    std::thread::sleep(Duration::from_millis(300));
    c.kill_serve();
    wait_for(
        "the node to unpublish with no server there",
        Duration::from_secs(15),
        || std::fs::symlink_metadata(&target).is_err(),
        || c.agents[0].log_text(),
    );
    assert!(c.agents[0].log_text().contains("no session with the server"));

    c.start_serve();
    c.wait_until("the unpublish to be recorded", |v| {
        v.iter().all(|x| x["state"] == "available")
    });
    assert!(std::fs::symlink_metadata(&target).is_err());
}

#[test]
fn secrets_reach_the_node_plugin_and_never_the_agents_disk_or_log() {
    const SECRET: &str = "node-s3cr3t-value";
    let required = format!("token={SECRET}");
    let c = Cluster::start(ClusterSpec {
        nodes: vec![("node-a", "a")],
        agents: true,
        plugin_args: vec!["--require-secret", &required],
        ..ClusterSpec::default()
    });
    let path = c.dir.path().join("secrets/backend");
    std::fs::write(&path, format!("token={SECRET}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    c.ok(&[
        "volume",
        "create",
        "s",
        "--plugin",
        "hostpath",
        "--secret",
        "backend",
        "--requisite",
        "zone=a",
        "--wait",
    ]);
    // The node plugin refuses NodeStage and NodePublish without the secret.
    c.ok(&["volume", "publish", "s", "--node", "node-a", "--wait"]);
    assert_eq!(get(&c, "s")["state"], "published");

    fn files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let meta = std::fs::symlink_metadata(e.path()).unwrap();
            if meta.is_dir() {
                files(&e.path(), out);
            } else if meta.is_file() {
                out.push(e.path());
            }
        }
    }
    let mut all = Vec::new();
    files(&c.volumes_dir.join("nodes/node-a"), &mut all);
    assert!(all.iter().any(|p| p.ends_with("agent.redb")), "{all:?}");
    for p in all.iter().chain([&c.agents[0].log]) {
        let bytes = std::fs::read(p).unwrap();
        assert!(
            !bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()),
            "{} holds the secret",
            p.display()
        );
    }
}

#[test]
fn a_restarted_server_knows_its_nodes_as_unknown_until_their_agents_are_back() {
    let mut c = agents(vec![("node-a", "a")]);
    c.create_in("u", "zone=a");
    c.agent("node-a").kill();
    c.kill_serve();
    c.start_serve();
    assert_eq!(c.node_state("node-a").as_deref(), Some("unknown"));
    let list = c.ok(&["node", "list"]);
    assert!(
        list.lines().any(|l| l.contains("node-a") && l.contains("never")),
        "{list}"
    );
    // Accepted, and waits for the node.
    c.ok(&["volume", "publish", "u", "--node", "node-a"]);
    wait_for(
        "the volume to say it waits for node-a",
        Duration::from_secs(10),
        || {
            get(&c, "u")["waiting"]
                .as_str()
                .is_some_and(|w| w.contains("node-a"))
        },
        || get(&c, "u").to_string(),
    );
    let u = get(&c, "u");
    assert_ne!(u["state"], "published");
    // The node's paths are remembered with it, so the volume shows where it will be.
    let target = u["publications"][0]["target_path"].as_str().unwrap_or_default();
    assert!(
        target.ends_with(&format!("/publish/{}", u["id"].as_str().unwrap())),
        "{u:#}"
    );
    c.agent("node-a").start();
    c.wait_nodes(&["node-a"], "ready", Duration::from_secs(20));
    wait_for(
        "the publish once the agent is back",
        Duration::from_secs(20),
        || get(&c, "u")["state"] == "published",
        || get(&c, "u").to_string(),
    );
}

/// How many `method` calls a plugin's call log holds.
fn logged(log: &std::path::Path, method: &str) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with(&format!("/csi.v1.Node/{method} ")))
        .count()
}

/// The retry policy decides node calls as it decides controller calls: a
/// node plugin that answers UNAVAILABLE to every NodeStage and a module that
/// gives up after 3 attempts see exactly 3 NodeStage calls, none after the
/// give-up, and 3 more once an operator retries.
#[test]
fn the_retry_policy_decides_every_node_retry() {
    let logs = berth_tests::test_dir();
    let log = logs.path().join("node-calls.log");
    let log_arg = log.display().to_string();
    let c = Cluster::start(ClusterSpec {
        nodes: vec![("node-a", "a")],
        agents: true,
        node_args: vec![
            "--call-log",
            &log_arg,
            "--fault-calls",
            "NodeStageVolume",
            "--fault",
            "UNAVAILABLE=1.0",
        ],
        retry_settings: "base-ms = \"20\", max-ms = \"100\", max-attempts = \"3\"",
        ..ClusterSpec::default()
    });
    c.create_in("r", "zone=a");
    c.ok(&["volume", "publish", "r", "--node", "node-a"]);
    let gave_up = || get(&c, "r")["failure"].as_str().is_some_and(|f| !f.is_empty());
    wait_for("the give-up", Duration::from_secs(20), gave_up, || {
        get(&c, "r").to_string()
    });
    // That none follows a give-up however long it waits is tested in
    // paused time (`core_tests::lifecycle` in berth-server), on the same agent code in-process.
    assert_eq!(logged(&log, "NodeStageVolume"), 3, "{}", get(&c, "r"));

    c.ok(&["volume", "retry", "r"]);
    wait_for(
        "the second give-up",
        Duration::from_secs(20),
        || logged(&log, "NodeStageVolume") >= 6 && gave_up(),
        || get(&c, "r").to_string(),
    );
    assert_eq!(logged(&log, "NodeStageVolume"), 6, "{}", get(&c, "r"));
}

/// A second agent registering as a node closes the first one's session
/// with a refusal the first agent logs (and stops on); the node stays ready
/// under the newer session.
#[test]
fn a_newer_session_for_a_node_closes_the_older_with_a_refusal() {
    let mut c = agents(vec![("node-a", "a")]);
    let text = std::fs::read_to_string(&c.agents[0].config).unwrap();
    let first_dir = c.volumes_dir.join("nodes/node-a");
    let second_dir = c.volumes_dir.join("nodes/node-a-second");
    let mut second = AgentProcess::with_config(
        c.dir.path(),
        "node-a-second",
        &text.replace(
            &first_dir.display().to_string(),
            &second_dir.display().to_string(),
        ),
    );
    second.start();
    let status = c.agents[0].wait_exit();
    assert!(!status.success());
    let log = c.agents[0].log_text();
    assert!(log.contains("replaced this one"), "{log}");
    assert!(
        c.log()
            .contains("a newer session of the node replaces an open one"),
        "{}",
        c.log()
    );
    c.wait_nodes(&["node-a"], "ready", Duration::from_secs(10));
    assert!(second.exited().is_none(), "{}", second.log_text());
    c.create_in("v", "zone=a");
    c.ok(&["volume", "publish", "v", "--node", "node-a", "--wait"]);
}

/// An agent whose record was lost (truncated to nothing) while a volume is
/// published refuses to start, naming the paths in use, instead of taking
/// the node as holding nothing; the server still shows the volume published.
#[test]
fn an_agent_whose_record_was_lost_refuses_to_forget_its_mounts() {
    let mut c = agents(vec![("node-a", "a")]);
    c.create_in("kept", "zone=a");
    c.ok(&["volume", "publish", "kept", "--node", "node-a", "--wait"]);
    let v = get(&c, "kept");
    let target = v["publications"][0]["target_path"].as_str().unwrap().to_string();
    c.agent("node-a").kill();
    let record = c.volumes_dir.join("nodes/node-a/agent.redb");
    assert!(record.exists(), "the agent's record is at {}", record.display());
    std::fs::File::create(&record).unwrap();

    c.agent("node-a").start();
    let status = c.agent("node-a").wait_exit();
    assert!(!status.success());
    let log = c.agent("node-a").log_text();
    assert!(log.contains("does not name 2 volume path(s) in use"), "{log}");
    assert!(log.contains(&target), "the path is named: {log}");
    assert!(
        std::fs::symlink_metadata(&target).is_ok(),
        "the mount is left as it was"
    );
    let v = get(&c, "kept");
    assert_eq!(v["state"], "published", "{v}");
}

/// A volume waiting for a node whose agent is away keeps the time it began
/// to wait across the server's looks at it (every 5 s), so a volume stuck
/// for minutes does not look freshly stuck.
#[test]
fn a_volume_waiting_for_a_node_keeps_when_it_began_to_wait() {
    let mut c = agents(vec![("node-a", "a")]);
    c.create_in("stuck", "zone=a");
    c.agent("node-a").kill();
    c.wait_nodes(&["node-a"], "down", Duration::from_secs(30));
    // --wait says once what the volume waits for, not once a second, and
    // when it gives up, what it waited for and where the volume stands.
    let out = c.berth(&[
        "volume",
        "publish",
        "stuck",
        "--node",
        "node-a",
        "--wait",
        "--timeout",
        "3s",
    ]);
    let (stdout, stderr) = berth_tests::texts(&out);
    assert!(!out.status.success());
    // A line for each change of where the volume stands (its publication
    // may move from pending to controller-published meanwhile), never the
    // same standing again with only the time waited grown.
    let standings: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("waiting for node"))
        .map(|l| l.split(" (for ").next().unwrap_or(l))
        .collect();
    let distinct: std::collections::BTreeSet<&&str> = standings.iter().collect();
    assert!(
        !standings.is_empty() && distinct.len() == standings.len(),
        "{stdout}"
    );
    assert!(
        stderr.contains("waited 3s for stuck to be published on node-a; it is available")
            && stderr.contains("waiting for node \"node-a\""),
        "{stderr}"
    );
    let waiting = |c: &Cluster| {
        let v = get(c, "stuck");
        (
            v["waiting"].as_str().unwrap_or("").to_string(),
            v["waiting_since_ms"].as_u64().unwrap_or(0),
        )
    };
    wait_for(
        "the volume to wait for its node",
        Duration::from_secs(20),
        || waiting(&c).0.contains("waiting for node"),
        || format!("{:?}", waiting(&c)),
    );
    let since = waiting(&c).1;
    // Past the server's next looks at it: the start of the wait stays.
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    };
    wait_for(
        "a wait longer than the server's 5 s between looks, from the same start",
        Duration::from_secs(30),
        || {
            let (reason, at) = waiting(&c);
            reason.contains("waiting for node") && at == since && now_ms() > since + 7_000
        },
        || format!("{:?} (began at {since})", waiting(&c)),
    );
}
