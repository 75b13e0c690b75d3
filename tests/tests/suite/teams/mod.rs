//! Teams on one Berth: namespaces keep each team's volume names its own;
//! ACL tokens on the TLS API keep each team to its own namespace, a
//! read-only token to reading, a CI token to creating in one place; the
//! audit log says who did what. Through the CLI on a real server (TLS on
//! loopback), the sample plugin and the sample naming guest.

use std::process::{Command, Output, Stdio};

use std::time::Duration;

use berth_tests::{Cluster, ClusterSpec, EtcdCluster, bin, free_port, texts, wait_for};
use serde_json::Value;

mod certificates;
mod console;
mod quotas;
mod servers;
mod tokens;

fn get(c: &Cluster, namespace: &str, name: &str) -> Value {
    serde_json::from_str(&c.ok(&["volume", "-n", namespace, "get", name, "-o", "json"])).unwrap()
}

fn create(c: &Cluster, namespace: &str, name: &str) {
    c.ok(&[
        "volume",
        "-n",
        namespace,
        "create",
        name,
        "--plugin",
        "hostpath",
        "--requisite",
        "zone=a",
        "--wait",
    ]);
}

/// One name in two namespaces is two volumes, each found only in its own
/// namespace, named apart on the plugin; a list of `*` shows both, a list
/// of one namespace only its own; paging walks every namespace.
#[test]
fn one_name_in_two_namespaces_is_two_volumes() {
    let c = Cluster::start(ClusterSpec::default());
    create(&c, "team-a", "data");
    create(&c, "team-b", "data");
    let (a, b) = (get(&c, "team-a", "data"), get(&c, "team-b", "data"));
    assert_eq!(
        (a["namespace"].as_str(), b["namespace"].as_str()),
        (Some("team-a"), Some("team-b"))
    );
    assert_ne!(a["id"], b["id"]);
    assert_ne!(a["csi_name"], b["csi_name"], "the naming guest saw two names");
    assert_ne!(a["volume_id"], b["volume_id"]);

    // Not in the default namespace, nor in a third.
    for namespace in ["default", "team-c"] {
        let out = c.berth(&["volume", "-n", namespace, "get", "data"]);
        let (_, stderr) = texts(&out);
        assert!(
            !out.status.success() && stderr.contains("NOT_FOUND"),
            "{namespace}: {stderr}"
        );
    }

    c.ok(&[
        "volume",
        "-n",
        "team-a",
        "create",
        "logs",
        "--plugin",
        "hostpath",
        "--requisite",
        "zone=a",
    ]);
    let listed = |namespace: &str, page: &str| -> Vec<String> {
        let out = c.ok(&[
            "volume",
            "-n",
            namespace,
            "list",
            "--page-size",
            page,
            "-o",
            "json",
        ]);
        let all: Vec<Value> = serde_json::from_str(&out).unwrap();
        all.iter()
            .map(|v| {
                format!(
                    "{}/{}",
                    v["namespace"].as_str().unwrap(),
                    v["name"].as_str().unwrap()
                )
            })
            .collect()
    };
    assert_eq!(listed("team-a", "500"), ["team-a/data", "team-a/logs"]);
    assert_eq!(listed("team-b", "1"), ["team-b/data"]);
    assert!(listed("default", "500").is_empty());
    for page in ["1", "2", "500"] {
        assert_eq!(
            listed("*", page),
            ["team-a/data", "team-a/logs", "team-b/data"],
            "pages of {page}"
        );
    }
    let text = c.ok(&["volume", "-n", "*", "list"]);
    assert!(text.contains("team-b/data"), "{text}");

    // Snapshot names are each namespace's own too, and a restore finds
    // its namespace's snapshot.
    for ns in ["team-a", "team-b"] {
        c.ok(&[
            "snapshot", "-n", ns, "create", "nightly", "--volume", "data", "--wait",
        ]);
    }
    let snap = |ns: &str| -> Value {
        serde_json::from_str(&c.ok(&["snapshot", "-n", ns, "get", "nightly", "-o", "json"])).unwrap()
    };
    assert_ne!(snap("team-a")["snapshot_id"], snap("team-b")["snapshot_id"]);
    assert!(
        !c.berth(&["snapshot", "-n", "team-c", "get", "nightly"])
            .status
            .success()
    );
    c.ok(&[
        "volume",
        "-n",
        "team-b",
        "create",
        "restored",
        "--plugin",
        "hostpath",
        "--requisite",
        "zone=a",
        "--from-snapshot",
        "nightly",
        "--wait",
    ]);
    for ns in ["team-a", "team-b"] {
        c.ok(&["snapshot", "-n", ns, "delete", "nightly", "--wait"]);
    }
    c.ok(&["volume", "-n", "team-b", "delete", "restored", "--wait"]);

    // Deleting team-a's leaves team-b's.
    c.ok(&["volume", "-n", "team-a", "delete", "data", "--wait"]);
    assert_eq!(get(&c, "team-b", "data")["state"], "available");

    // A namespace that is no DNS label is refused before anything is done.
    let out = c.berth(&["volume", "-n", "Team_A", "list"]);
    let (_, stderr) = texts(&out);
    assert!(
        !out.status.success() && stderr.contains("lowercase letters"),
        "{stderr}"
    );
    // `*` names no namespace to make a volume in.
    let out = c.berth(&["volume", "-n", "*", "get", "data"]);
    let (_, stderr) = texts(&out);
    assert!(stderr.contains("is for lists"), "{stderr}");
}

/// The CLI against the TLS API at `port`, as the holder of `token`.
fn remote(c: &Cluster, port: u16, token: &str, args: &[&str]) -> Output {
    Command::new(bin("berth"))
        .args(args)
        .env("BERTH_ADDR", format!("https://127.0.0.1:{port}"))
        .env("BERTH_TOKEN", token)
        .env("BERTH_CACERT", c.dir.path().join("state/api-ca.pem"))
        // The socket is not reachable: every call goes over TLS.
        .env("BERTH_API", c.dir.path().join("no.sock"))
        .stdin(Stdio::null())
        .output()
        .expect("running berth")
}

fn remote_ok(c: &Cluster, port: u16, token: &str, args: &[&str]) -> String {
    let out = remote(c, port, token, args);
    let (stdout, stderr) = texts(&out);
    assert!(
        out.status.success(),
        "berth {args:?} failed: {stdout}{stderr}\n{}",
        c.log()
    );
    stdout
}

/// The error a refused call printed, and that it was refused.
fn refused(c: &Cluster, port: u16, token: &str, args: &[&str]) -> String {
    let out = remote(c, port, token, args);
    let (stdout, stderr) = texts(&out);
    assert!(!out.status.success(), "berth {args:?} was not refused: {stdout}");
    stderr
}

fn secret(json: &str) -> String {
    let made: Value = serde_json::from_str(json).unwrap();
    made["secret"].as_str().unwrap().to_string()
}

fn apply(c: &Cluster, name: &str, rules: &str) {
    let path = c.dir.path().join(format!("{name}.toml"));
    std::fs::write(&path, rules).unwrap();
    c.ok(&["acl", "policy", "apply", name, path.to_str().unwrap()]);
}

fn token(c: &Cluster, name: &str, policy: &str) -> String {
    secret(&c.ok(&[
        "acl", "token", "create", "--name", name, "--policy", policy, "-o", "json",
    ]))
}
