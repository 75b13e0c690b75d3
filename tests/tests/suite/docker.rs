//! Berth as Docker's volume plugin, against a real dockerd: volumes made
//! with `docker volume create -d berth…` (named by the naming guest), data
//! kept from one container to the next, a volume shared by two containers
//! and unpublished only when both are gone, a `kill -9` of Berth under a
//! running container that unpublishes nothing, and `docker volume rm`;
//! and Podman on the same socket.

use std::time::Duration;

use berth_tests::docker::{Dockerd, IMAGE, PluginSocket, Podman};
use berth_tests::{Cluster, ClusterSpec, texts, wait_for};
use serde_json::Value;

/// Berth with `[docker]` for its node, serving on `socket`.
fn berth(socket: &PluginSocket) -> Cluster {
    let extra = format!(
        "[docker]\nnode = \"node-a\"\nsocket = \"{}\"\ncreate_volumes = true\nplugin = \"hostpath\"\nwait = \"30s\"\n",
        socket.path.display()
    );
    let c = Cluster::start(ClusterSpec {
        extra: &extra,
        ..ClusterSpec::default()
    });
    wait_for(
        "the Docker plugin socket",
        Duration::from_secs(10),
        || socket.path.exists(),
        || c.log(),
    );
    c
}

/// Berth and a dockerd beside it; the driver's name.
fn cluster() -> (Cluster, Dockerd, PluginSocket) {
    let socket = PluginSocket::new();
    (berth(&socket), Dockerd::start(), socket)
}

pub(crate) fn volume(c: &Cluster, name: &str) -> Value {
    serde_json::from_str(&c.ok(&["volume", "get", name, "-o", "json"])).unwrap()
}

fn published_here(c: &Cluster, name: &str) -> bool {
    volume(c, name)["publications"]
        .as_array()
        .is_some_and(|p| p.iter().any(|p| p["node"] == "node-a"))
}

/// Until the volume is published nowhere on this node (Docker's Unmount unpublishes it).
fn wait_unpublished(c: &Cluster, name: &str) {
    wait_for(
        "the volume to be unpublished",
        Duration::from_secs(30),
        || !published_here(c, name),
        || c.log(),
    );
}

/// `docker run` of `command` with the volume at /data: `--rm` and its
/// output, or detached (`-d`) and its id.
fn container(d: &Dockerd, detach: bool, volume: &str, command: &[&str]) -> String {
    let mount = format!("{volume}:/data");
    let mut args = vec!["run", if detach { "-d" } else { "--rm" }];
    args.extend(["--network", "none", "-v", &mount, IMAGE]);
    args.extend(command);
    let out = d.ok(&args);
    if detach { out.trim().to_string() } else { out }
}

/// `sh -c SCRIPT` in a container with the volume at /data.
fn run(d: &Dockerd, volume: &str, script: &str) -> String {
    container(d, false, volume, &["sh", "-c", script])
}

/// A container holding `volume` that runs `first` and then appends to
/// /data/log five times a second; its id, once it has written.
fn writer(d: &Dockerd, volume: &str, first: &str) -> String {
    let script = format!("{first}while true; do date >> /data/log; sleep 0.2; done");
    let holder = container(d, true, volume, &["sh", "-c", &script]);
    wait_for(
        "the container to write",
        Duration::from_secs(20),
        || {
            let out = d.docker(&["exec", &holder, "cat", "/data/log"]);
            out.status.success() && !out.stdout.is_empty()
        },
        || d.log(),
    );
    holder
}

/// The container still writes to its volume.
fn assert_still_writes(d: &Dockerd, holder: &str) {
    let lines = || d.ok(&["exec", holder, "cat", "/data/log"]).lines().count();
    let before = lines();
    std::thread::sleep(Duration::from_secs(1));
    assert!(lines() > before, "the container stopped writing");
}

#[test]
fn docker_volumes_keep_their_data_between_containers_and_go_when_removed() {
    let (c, d, socket) = cluster();
    let driver = socket.name.clone();
    // A bad option is refused, with the valid ones listed.
    let out = d.docker(&["volume", "create", "-d", &driver, "-o", "colour=blue", "bad"]);
    let (_, stderr) = texts(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains("colour") && stderr.contains("parameter.KEY"),
        "{stderr}"
    );

    d.ok(&[
        "volume",
        "create",
        "-d",
        &driver,
        "-o",
        "size=64MiB",
        "-o",
        "label.team=db",
        "data",
    ]);
    let v = volume(&c, "data");
    assert_eq!(v["state"], "available", "{v:#}");
    assert!(
        v["csi_name"].as_str().unwrap().starts_with("pv-data-"),
        "named by the naming guest: {v:#}"
    );
    assert_eq!(v["labels"]["team"], "db", "{v:#}");
    let listed = d.ok(&["volume", "ls", "-q"]);
    assert!(listed.lines().any(|l| l == "data"), "{listed}");
    let inspect: Value = serde_json::from_str(&d.ok(&["volume", "inspect", "data"])).unwrap();
    assert_eq!(inspect[0]["Status"]["plugin"], "hostpath", "{inspect:#}");
    assert_eq!(inspect[0]["Status"]["labels"]["team"], "db", "{inspect:#}");
    let created = inspect[0]["CreatedAt"].as_str().unwrap_or_default();
    assert!(
        created.len() >= 20 && !created.starts_with("0001") && created.ends_with('Z'),
        "when the volume was made: {inspect:#}"
    );
    // Docker answers a create of a name it knows from its own cache, without
    // asking the driver (as its documentation says): the volume is left as
    // it was. Berth's API refuses the same name with another spec.
    d.ok(&["volume", "create", "-d", &driver, "-o", "size=128MiB", "data"]);
    assert_eq!(volume(&c, "data")["required_bytes"], 64 << 20);
    let out = c.berth(&[
        "volume", "create", "data", "--plugin", "hostpath", "--size", "128MiB",
    ]);
    let (_, stderr) = texts(&out);
    assert!(
        !out.status.success() && stderr.contains("ALREADY_EXISTS"),
        "{stderr}"
    );

    run(&d, "data", "echo kept > /data/note");
    assert!(
        !published_here(&c, "data"),
        "unpublished once the container is gone"
    );
    assert_eq!(run(&d, "data", "cat /data/note").trim(), "kept");

    // Two containers on one volume: unpublished only when both are gone.
    let holder = container(&d, true, "data", &["sleep", "600"]);
    assert_eq!(run(&d, "data", "cat /data/note").trim(), "kept");
    assert!(published_here(&c, "data"), "still held by the first container");
    let out = d.docker(&["volume", "rm", "data"]);
    assert!(!out.status.success(), "removed while in use");
    d.ok(&["rm", "-f", &holder]);
    wait_unpublished(&c, "data");

    d.ok(&["volume", "rm", "data"]);
    assert!(c.berth(&["volume", "get", "data"]).status.code() != Some(0));
    assert_eq!(c.plugin_volumes(), 0);
}

#[test]
fn a_crash_of_berth_under_a_running_container_unpublishes_nothing() {
    let (mut c, d, socket) = cluster();
    let driver = socket.name.clone();
    d.ok(&["volume", "create", "-d", &driver, "held"]);
    let holder = writer(&d, "held", "");
    c.kill_serve();
    c.start_serve();
    // The container kept writing; Berth still has it published here.
    assert_still_writes(&d, &holder);
    assert!(published_here(&c, "held"));
    // Its Unmount, after the restart, still finds it.
    d.ok(&["rm", "-f", &holder]);
    wait_unpublished(&c, "held");
    d.ok(&["volume", "rm", "held"]);
    assert_eq!(c.plugin_volumes(), 0);
}

#[test]
fn podman_uses_the_same_socket() {
    let socket = PluginSocket::new();
    let c = berth(&socket);
    let p = Podman::start(&socket.name, &socket.path);
    // Podman 4 spells it --driver.
    p.ok(&[
        "volume",
        "create",
        "--driver",
        &socket.name,
        "-o",
        "size=64MiB",
        "shared",
    ]);
    assert_eq!(volume(&c, "shared")["state"], "available");
    let run = |script: &str| {
        let mut args = vec!["run"];
        args.extend(Podman::RUN);
        args.extend(["-v", "shared:/data", IMAGE, "sh", "-c", script]);
        p.ok(&args)
    };
    run("echo from podman > /data/note");
    assert!(
        !published_here(&c, "shared"),
        "unpublished once the container is gone"
    );
    assert_eq!(run("cat /data/note").trim(), "from podman");
    p.ok(&["volume", "rm", "shared"]);
    assert_eq!(c.plugin_volumes(), 0);
}

/// `berth serve`'s own Docker socket is bounded as an agent's is, whatever
/// is sent on it (raw requests, as a hostile local Docker user could make):
/// volumes made through the API are not seen, used or removed, secrets are
/// only those allowed, and an Unmount undoes only what this Docker mounted.
#[test]
fn a_servers_docker_socket_reaches_only_what_docker_owns() {
    let socket = PluginSocket::new();
    let c = berth(&socket);
    let err = |answer: Value| answer["Err"].as_str().unwrap_or_default().to_string();
    c.ok(&[
        "volume",
        "create",
        "private",
        "--plugin",
        "hostpath",
        "--size",
        "1MiB",
        "--param",
        "tier=gold",
        "--wait",
    ]);
    let listed = socket.post("/VolumeDriver.List", "{}");
    assert_eq!(listed["Volumes"], serde_json::json!([]), "{listed}");
    assert!(err(socket.post("/VolumeDriver.Get", r#"{"Name":"private"}"#)).contains("no volume"));
    let mount = socket.post("/VolumeDriver.Mount", r#"{"Name":"private","ID":"m1"}"#);
    assert!(!err(mount.clone()).is_empty(), "{mount}");
    assert!(err(socket.post("/VolumeDriver.Remove", r#"{"Name":"private"}"#)).contains("no volume"));
    assert!(published_on(&c, "private").is_empty());
    assert_eq!(volume(&c, "private")["state"], "available");

    // Secrets: only those docker_secrets names (none here).
    let secret = socket.post("/VolumeDriver.Create", r#"{"Name":"s","Opts":{"secret":"db"}}"#);
    assert!(err(secret).contains("docker_secrets"));
    assert!(c.berth(&["volume", "get", "s"]).status.code() != Some(0));

    // Marked for Docker by the operator and published through the API: an
    // Unmount with an ID Docker never mounted leaves it published.
    c.ok(&["volume", "docker", "private", "all"]);
    let remove = err(socket.post("/VolumeDriver.Remove", r#"{"Name":"private"}"#));
    assert!(remove.contains("not made through Docker"), "{remove}");
    c.ok(&["volume", "publish", "private", "--node", "node-a", "--wait"]);
    let forged = socket.post("/VolumeDriver.Unmount", r#"{"Name":"private","ID":"never"}"#);
    assert_eq!(err(forged), "");
    assert_eq!(published_on(&c, "private"), ["node-a"]);
    // A container's own mount of it comes and goes; the operator's stays.
    let mount = socket.post("/VolumeDriver.Mount", r#"{"Name":"private","ID":"m2"}"#);
    assert_eq!(err(mount.clone()), "", "{mount}");
    assert_eq!(
        err(socket.post("/VolumeDriver.Unmount", r#"{"Name":"private","ID":"m2"}"#)),
        ""
    );
    assert_eq!(published_on(&c, "private"), ["node-a"]);
    let v = volume(&c, "private");
    assert_eq!(v["publications"][0]["by"], "api", "{v:#}");

    // What Docker makes is Docker's: removed through Docker once unmounted.
    let made = socket.post(
        "/VolumeDriver.Create",
        r#"{"Name":"mine","Opts":{"size":"1MiB","requisite.zone":"a"}}"#,
    );
    assert_eq!(err(made), "");
    assert_eq!(volume(&c, "mine")["made_by"], "docker:node-a");
    assert_eq!(
        err(socket.post("/VolumeDriver.Mount", r#"{"Name":"mine","ID":"m3"}"#)),
        ""
    );
    assert_eq!(volume(&c, "mine")["publications"][0]["by"], "docker:node-a");
    assert_eq!(
        err(socket.post("/VolumeDriver.Unmount", r#"{"Name":"mine","ID":"m3"}"#)),
        ""
    );
    wait_unpublished(&c, "mine");
    assert_eq!(err(socket.post("/VolumeDriver.Remove", r#"{"Name":"mine"}"#)), "");
}

/// A volume's publications, by node.
pub(crate) fn published_on(c: &Cluster, name: &str) -> Vec<String> {
    volume(c, name)["publications"]
        .as_array()
        .map(|p| {
            p.iter()
                .map(|p| p["node"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn docker_table(socket: &PluginSocket) -> String {
    format!(
        "[docker]\nsocket = \"{}\"\nplugin = \"hostpath\"\nwait = \"30s\"\n",
        socket.path.display()
    )
}

#[test]
fn an_agents_docker_uses_volumes_through_the_leader_bounded_to_its_node() {
    let (a, b) = (PluginSocket::new(), PluginSocket::new());
    let (table_a, table_b) = (docker_table(&a), docker_table(&b));
    let mut c = Cluster::start(ClusterSpec {
        agents: true,
        tls: true,
        extra: "docker_create_from = [\"node-a\"]\n",
        agent_tables: vec![("node-a", &table_a), ("node-b", &table_b)],
        controller_topology: None,
        ..ClusterSpec::default()
    });
    for s in [&a, &b] {
        wait_for(
            "the agents' Docker plugin sockets",
            Duration::from_secs(10),
            || s.path.exists(),
            || c.agents.iter().map(|a| a.log_text()).collect(),
        );
    }
    let d = Dockerd::start();
    d.ok(&["volume", "create", "-d", &a.name, "-o", "size=64MiB", "shared"]);
    let v = volume(&c, "shared");
    assert_eq!(v["state"], "available", "{v:#}");
    assert!(v["csi_name"].as_str().unwrap().starts_with("pv-shared-"), "{v:#}");

    // node-b's Docker may use volumes, not make them (the server says so).
    let refused = b.post("/VolumeDriver.Create", r#"{"Name":"nope","Opts":{}}"#);
    let err = refused["Err"].as_str().unwrap();
    assert!(
        err.contains("docker_create_from") && err.contains("node-b"),
        "{err}"
    );
    assert!(c.berth(&["volume", "get", "nope"]).status.code() != Some(0));

    // It mounts one on its own node, and node-a's Docker cannot remove it meanwhile.
    let mounted = b.post("/VolumeDriver.Mount", r#"{"Name":"shared","ID":"b-1"}"#);
    assert_eq!(mounted["Err"], "", "{mounted}");
    let path = mounted["Mountpoint"].as_str().unwrap();
    assert!(
        std::path::Path::new(path).starts_with(c.volumes_dir.join("nodes/node-b")),
        "{path}"
    );
    std::fs::write(std::path::Path::new(path).join("note"), "from node-b").unwrap();
    assert_eq!(published_on(&c, "shared"), ["node-b"]);
    let out = d.docker(&["volume", "rm", "shared"]);
    let (_, stderr) = texts(&out);
    assert!(!out.status.success() && stderr.contains("node-b"), "{stderr}");
    let unmounted = b.post("/VolumeDriver.Unmount", r#"{"Name":"shared","ID":"b-1"}"#);
    assert_eq!(unmounted["Err"], "", "{unmounted}");
    assert!(published_on(&c, "shared").is_empty());

    // A container on node-a holds it through a kill -9 of node-a's agent.
    let holder = writer(&d, "shared", "cat /data/note > /data/seen; ");
    assert_eq!(d.ok(&["exec", &holder, "cat", "/data/seen"]), "from node-b");
    c.agent("node-a").kill();
    c.agent("node-a").start();
    c.wait_nodes(&["node-a"], "ready", Duration::from_secs(30));
    assert_still_writes(&d, &holder);
    assert_eq!(
        published_on(&c, "shared"),
        ["node-a"],
        "nothing unpublished under it"
    );
    // Its Unmount, through the restarted agent, unpublishes it.
    d.ok(&["rm", "-f", &holder]);
    wait_for(
        "the volume to be unpublished",
        Duration::from_secs(30),
        || published_on(&c, "shared").is_empty(),
        || c.agents[0].log_text(),
    );
    d.ok(&["volume", "rm", "shared"]);
    assert_eq!(c.plugin_volumes(), 0);
}

/// A request as a node makes it on the cluster endpoint: the header names
/// the node (on the TLS endpoint, its certificate must agree).
/// An agent's Docker plugin through a failover of the servers on etcd: a
/// Mount asked while the leader is dead waits for the agent's next session
/// (with the new leader) and is answered there.
#[test]
fn an_agents_docker_plugin_follows_the_leader_through_a_failover() {
    use berth_tests::EtcdCluster;
    let etcd = EtcdCluster::start(3);
    let socket = PluginSocket::new();
    let table = docker_table(&socket);
    let mut c = Cluster::start(ClusterSpec {
        guests: false,
        nodes: vec![("node-a", "a")],
        agents: true,
        tls: true,
        servers: 2,
        store: Some(format!(
            "{}lease_ttl = \"2s\"\n",
            etcd.store_config("/berth-docker")
        )),
        extra: "docker_create_from = [\"*\"]\n",
        agent_tables: vec![("node-a", &table)],
        ..ClusterSpec::default()
    });
    wait_for(
        "the agent's Docker plugin socket",
        Duration::from_secs(10),
        || socket.path.exists(),
        || c.agents[0].log_text(),
    );
    let created = socket.post("/VolumeDriver.Create", r#"{"Name":"ha","Opts":{"size":"1MiB"}}"#);
    assert_eq!(created["Err"], "", "{created}");
    let leader = c.wait_leader(&[0, 1], Duration::from_secs(30));
    c.kill_server(leader);
    let mounted = socket.post("/VolumeDriver.Mount", r#"{"Name":"ha","ID":"m-1"}"#);
    assert_eq!(mounted["Err"], "", "{mounted}\n{}", c.agents[0].log_text());
    let path = mounted["Mountpoint"].as_str().unwrap();
    assert!(std::path::Path::new(path).is_dir(), "{path}");
    let survivor = 1 - leader;
    let v: Value = serde_json::from_str(&c.ok_via(survivor, &["volume", "get", "ha", "-o", "json"])).unwrap();
    assert_eq!(v["publications"][0]["node"], "node-a", "{v:#}");
    let unmounted = socket.post("/VolumeDriver.Unmount", r#"{"Name":"ha","ID":"m-1"}"#);
    assert_eq!(unmounted["Err"], "", "{unmounted}");
    let removed = socket.post("/VolumeDriver.Remove", r#"{"Name":"ha"}"#);
    assert_eq!(removed["Err"], "", "{removed}");
    assert_eq!(c.plugin_volumes(), 0);
}
