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

fn volume(c: &Cluster, name: &str) -> Value {
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

/// `sh -c SCRIPT` in a container with the volume at /data.
fn run(d: &Dockerd, volume: &str, script: &str) -> String {
    d.ok(&[
        "run",
        "--rm",
        "--network",
        "none",
        "-v",
        &format!("{volume}:/data"),
        IMAGE,
        "sh",
        "-c",
        script,
    ])
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

    run(&d, "data", "echo kept > /data/note");
    assert!(
        !published_here(&c, "data"),
        "unpublished once the container is gone"
    );
    assert_eq!(run(&d, "data", "cat /data/note").trim(), "kept");

    // Two containers on one volume: unpublished only when both are gone.
    let holder = d.ok(&[
        "run",
        "-d",
        "--network",
        "none",
        "-v",
        "data:/data",
        IMAGE,
        "sleep",
        "600",
    ]);
    let holder = holder.trim();
    assert_eq!(run(&d, "data", "cat /data/note").trim(), "kept");
    assert!(published_here(&c, "data"), "still held by the first container");
    let out = d.docker(&["volume", "rm", "data"]);
    assert!(!out.status.success(), "removed while in use");
    d.ok(&["rm", "-f", holder]);
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
    let holder = d.ok(&[
        "run",
        "-d",
        "--network",
        "none",
        "-v",
        "held:/data",
        IMAGE,
        "sh",
        "-c",
        "while true; do date >> /data/log; sleep 0.2; done",
    ]);
    let holder = holder.trim().to_string();
    wait_for(
        "the container to write",
        Duration::from_secs(20),
        || {
            let out = d.docker(&["exec", &holder, "cat", "/data/log"]);
            out.status.success() && !out.stdout.is_empty()
        },
        || d.log(),
    );
    c.kill_serve();
    c.start_serve();
    // The container kept writing; Berth still has it published here.
    let lines = |d: &Dockerd| d.ok(&["exec", &holder, "cat", "/data/log"]).lines().count();
    let before = lines(&d);
    std::thread::sleep(Duration::from_secs(1));
    assert!(lines(&d) > before, "the container stopped writing");
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
