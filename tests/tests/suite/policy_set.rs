//! One policy set for the cluster: stored with a version, seeded from
//! `berth.toml`, changed by `berth policy apply` whole or not at all, and
//! what every leader runs, after a restart or a failover.

use std::time::Duration;

use berth_tests::{Cluster, ClusterSpec, EtcdCluster, RegistryServer, guest, openssl_keys, texts};
use serde_json::Value;

/// A set file naming volumes with `prefix`, the other decisions as the sample guests make them.
fn set_file(c: &Cluster, prefix: &str, naming: &str) -> std::path::PathBuf {
    let path = c.dir.path().join(format!("set-{prefix}.toml"));
    std::fs::write(
        &path,
        format!(
            "[[policy]]\nmodule = \"{naming}\"\nsettings = {{ prefix = \"{prefix}\" }}\n[[policy]]\nmodule = \"{}\"\n",
            guest("berth_placement_guest").display()
        ),
    )
    .unwrap();
    path
}

fn json(c: &Cluster, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&c.ok(&all)).unwrap()
}

fn named(c: &Cluster, name: &str) -> String {
    c.create_in(name, "zone=a");
    json(c, &["volume", "get", name])["csi_name"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn a_policy_set_is_applied_whole_kept_across_restarts_and_reloaded_from_the_file() {
    let mut c = Cluster::start(ClusterSpec::default());
    let status = json(&c, &["policy", "status"]);
    assert_eq!(status["version"], 1, "seeded from berth.toml: {status:#}");
    assert!(
        status["modules"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["digest"].as_str().is_some_and(|d| d.starts_with("sha256:"))),
        "every module pinned: {status:#}"
    );
    assert!(named(&c, "a").starts_with("pv-"));

    let naming = guest("berth_naming_guest").display().to_string();
    let file = set_file(&c, "set", &naming);
    let applied = json(&c, &["policy", "apply", &file.display().to_string()]);
    assert_eq!(applied["version"], 2);
    assert!(named(&c, "b").starts_with("set-"));
    // The same file again is the same set: no new version.
    assert_eq!(
        json(&c, &["policy", "apply", &file.display().to_string()])["version"],
        2
    );

    // A set with a module that does not load changes nothing.
    let bad = set_file(&c, "bad", "/nonexistent/naming.wasm");
    let out = c.berth(&["policy", "apply", &bad.display().to_string()]);
    let (_, stderr) = texts(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("/nonexistent/naming.wasm"), "{stderr}");
    assert_eq!(json(&c, &["policy", "status"])["version"], 2);
    assert!(named(&c, "c").starts_with("set-"));

    // A module file changed under the set is refused, not run.
    let copy = c.dir.path().join("naming-copy.wasm");
    std::fs::copy(guest("berth_naming_guest"), &copy).unwrap();
    let pinned = set_file(&c, "pinned", &copy.display().to_string());
    assert_eq!(
        json(&c, &["policy", "apply", &pinned.display().to_string()])["version"],
        3
    );
    std::fs::write(&copy, std::fs::read(guest("berth_retry_guest")).unwrap()).unwrap();

    // A restart puts the stored set in service, not berth.toml's tables,
    // and checks its module files against their digests.
    c.kill_serve();
    let log_before = c.log().len();
    let config = c.config.clone();
    let serve = std::process::Command::new(berth_tests::bin("berth"))
        .args(["serve", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let (_, stderr) = texts(&serve);
    assert!(!serve.status.success());
    assert!(
        stderr.contains("does not match its digest") && stderr.contains("naming-copy.wasm"),
        "{stderr}"
    );
    std::fs::copy(guest("berth_naming_guest"), &copy).unwrap();
    c.start_serve();
    assert!(named(&c, "d").starts_with("pinned-"));
    assert!(
        c.log()[log_before..].contains("not the cluster's policy set"),
        "{}",
        c.log()
    );

    // `policy reload` applies berth.toml's tables as the next version.
    c.ok(&["policy", "reload"]);
    assert_eq!(json(&c, &["policy", "status"])["version"], 4);
    assert!(named(&c, "e").starts_with("pv-"));
}

#[test]
fn every_leader_runs_the_set_applied_through_any_server() {
    let etcd = EtcdCluster::start(3);
    let mut c = Cluster::start(ClusterSpec {
        servers: 3,
        tls: true,
        agents: true,
        store: Some(format!("{}lease_ttl = \"2s\"\n", etcd.store_config("/berth-set"))),
        ..ClusterSpec::default()
    });
    let leader = c.wait_leader(&[0, 1, 2], Duration::from_secs(30));
    let follower = (leader + 1) % 3;
    let naming = guest("berth_naming_guest").display().to_string();
    let file = set_file(&c, "fleet", &naming);
    // Through a follower: the leader applies it.
    let applied: Value = serde_json::from_str(&c.ok_via(
        follower,
        &["policy", "apply", &file.display().to_string(), "-o", "json"],
    ))
    .unwrap();
    let version = applied["version"].as_u64().unwrap();
    assert_eq!(version, 2, "berth.toml's tables were version 1: {applied:#}");

    c.kill_server(leader);
    let others: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    let next = c.wait_leader(&others, Duration::from_secs(30));
    let status: Value = serde_json::from_str(&c.ok_via(next, &["policy", "status", "-o", "json"])).unwrap();
    assert_eq!(
        status["version"], version,
        "the new leader runs the stored set: {status:#}"
    );
    c.ok_via(
        next,
        &[
            "volume",
            "create",
            "after",
            "--plugin",
            "hostpath",
            "--requisite",
            "zone=a",
            "--wait",
        ],
    );
    let v: Value = serde_json::from_str(&c.ok_via(next, &["volume", "get", "after", "-o", "json"])).unwrap();
    assert!(v["csi_name"].as_str().unwrap().starts_with("fleet-"), "{v:#}");
}

/// Three servers on `etcd` (agents over TLS, a 2 s lease) running `tables`,
/// with `server_tables` in single servers' configs only.
fn three_servers<'a>(
    etcd: &EtcdCluster,
    prefix: &str,
    tables: &'a str,
    server_tables: Vec<(usize, &'a str)>,
) -> Cluster {
    Cluster::start(ClusterSpec {
        servers: 3,
        tls: true,
        agents: true,
        policy_tables: Some(tables),
        server_tables,
        store: Some(format!("{}lease_ttl = \"2s\"\n", etcd.store_config(prefix))),
        ..ClusterSpec::default()
    })
}

/// Server `i`'s log so far.
fn log(c: &Cluster, i: usize) -> String {
    std::fs::read_to_string(&c.serves[i].log).unwrap_or_default()
}

/// Waits until server `i`'s log holds `what` at least `times` times.
fn logged(c: &Cluster, i: usize, what: &str, times: usize) {
    let log = |c: &Cluster| log(c, i);
    berth_tests::wait_for(
        &format!("server-{i} to log {what:?} {times} times"),
        Duration::from_secs(60),
        || log(c).matches(what).count() >= times,
        || log(c),
    );
}

/// A server whose keys do not verify the stored set is not ready and does
/// not lead while a server that can is there. Alone, it leads as the last
/// resort (the API answers, no volume is acted on), and once the set is
/// signed by a key it trusts, it starts a term that runs it. (Without the
/// last resort, a key revoked on every server and a restart left no leader,
/// and so no API to roll back through.)
#[test]
fn a_server_that_cannot_verify_the_set_leads_only_as_the_last_resort() {
    let registry = RegistryServer::start();
    let pushed = registry.push(&guest("berth_naming_guest"), "berth/naming:v1");
    let etcd = EtcdCluster::start(3);
    let keys = tempfile::tempdir().unwrap();
    let (key, public) = openssl_keys(keys.path(), "team");
    let tables = format!(
        "[[policy]]\nmodule = \"{}\"\nsettings = {{ prefix = \"fleet\" }}\n[oci]\nplain_http = true\n",
        pushed["reference"].as_str().unwrap()
    );
    // Server 2 alone requires a signature by the team's key: the module is not signed yet.
    let trust = format!("[policy_trust]\nkeys = [\"{public}\"]\nrequired = true\n");
    let mut c = three_servers(&etcd, "/berth-trust", &tables, vec![(2, &trust)]);
    logged(
        &c,
        2,
        "cannot prepare the policy set; not standing for the lead",
        1,
    );
    let first = c.wait_leader(&[0, 1, 2], Duration::from_secs(30));
    assert_ne!(first, 2);
    // `policy status` says which server has the set prepared, and why one has not.
    berth_tests::wait_for(
        "every server to report its policy set",
        Duration::from_secs(30),
        || {
            let status: Value =
                serde_json::from_str(&c.ok_via(first, &["policy", "status", "-o", "json"])).unwrap();
            let servers = status["servers"].as_array().cloned().unwrap_or_default();
            servers.len() == 3
                && servers.iter().all(|s| match s["name"].as_str() {
                    Some("server-2") => s["error"].as_str().is_some_and(|e| e.contains("not signed")),
                    _ => s["prepared"] == status["version"],
                })
        },
        || c.ok_via(first, &["policy", "status"]),
    );

    // The others gone, server 2 leads as the last resort: the API answers
    // through it, and it is not ready.
    c.kill_server(0);
    c.kill_server(1);
    logged(&c, 2, "standing for the lead to serve the API", 1);
    assert_eq!(c.wait_leader(&[2], Duration::from_secs(30)), 2);
    berth_tests::wait_for(
        "the API through the last-resort leader",
        Duration::from_secs(30),
        || c.berth_via(2, &["volume", "list"]).status.success(),
        || log(&c, 2),
    );
    let status = c.ok_via(2, &["policy", "status"]);
    assert!(status.contains("server-2"), "{status}");
    logged(
        &c,
        2,
        "serving the API, acting on no volume until a set that verifies is in service",
        1,
    );

    // Signed: it prepares the set, starts a new term, and runs it.
    registry.policy_json(&["sign", pushed["reference"].as_str().unwrap(), "--key", &key]);
    logged(&c, 2, "the stored policy set verifies now", 1);
    assert_eq!(c.wait_leader(&[2], Duration::from_secs(30)), 2);
    c.ok_via(
        2,
        &[
            "volume",
            "create",
            "signed",
            "--plugin",
            "hostpath",
            "--requisite",
            "zone=a",
            "--wait",
        ],
    );
    let v: Value = serde_json::from_str(&c.ok_via(2, &["volume", "get", "signed", "-o", "json"])).unwrap();
    assert!(v["csi_name"].as_str().unwrap().starts_with("fleet-"), "{v:#}");
}

#[test]
fn a_server_that_cannot_reach_the_registry_is_not_ready_and_never_leads() {
    let registry = RegistryServer::start();
    let pushed = registry.push(&guest("berth_naming_guest"), "berth/naming:v1");
    let etcd = EtcdCluster::start(3);
    let tables = format!(
        "[[policy]]\nmodule = \"{}\"\nsettings = {{ prefix = \"fleet\" }}\n",
        pushed["reference"].as_str().unwrap()
    );
    // Server 2 speaks HTTPS to a registry that serves plain HTTP: it never gets the module.
    let plain = "[oci]\nplain_http = true\n";
    let mut c = three_servers(
        &etcd,
        "/berth-reach",
        &tables,
        vec![(0, plain), (1, plain), (2, "[oci]\nplain_http = false\n")],
    );
    logged(
        &c,
        2,
        "cannot prepare the policy set; not standing for the lead",
        1,
    );
    let first = c.wait_leader(&[0, 1, 2], Duration::from_secs(30));
    assert_ne!(first, 2);
    let log = std::fs::read_to_string(&c.serves[2].log).unwrap();
    assert!(log.contains(&registry.address) && log.contains("TLS"), "{log}");
    the_last_server_never_leads(&mut c);
}

/// With servers 0 and 1 killed, server 2, which cannot prepare the set,
/// keeps trying it and never stands for the lead.
fn the_last_server_never_leads(c: &mut Cluster) {
    c.kill_server(0);
    c.kill_server(1);
    logged(
        c,
        2,
        "cannot prepare the policy set; not standing for the lead",
        4,
    );
    let log = std::fs::read_to_string(&c.serves[2].log).unwrap();
    assert!(!log.contains("elected"), "{log}");
}

/// An etcd writer (no key, no server certificate) who stores a set whose
/// module file carries no digest gets it run nowhere: every server refuses
/// to prepare it, so none stands for the lead on it, and a failover does not
/// put it in service.
#[test]
fn a_set_an_etcd_writer_stored_without_digests_is_run_by_no_server() {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let etcd = EtcdCluster::start(3);
    let naming = guest("berth_naming_guest").display().to_string();
    let tables = format!("[[policy]]\nmodule = \"{naming}\"\nsettings = {{ prefix = \"fleet\" }}\n");
    let mut c = three_servers(&etcd, "/berth-writer", &tables, vec![]);
    let leader = c.wait_leader(&[0, 1, 2], Duration::from_secs(30));
    // The writer's copy of the module, changed, stored without a digest.
    let planted = c.dir.path().join("planted.wasm");
    std::fs::copy(guest("berth_naming_guest"), &planted).unwrap();
    let agent =
        ureq::Agent::new_with_config(ureq::Agent::config_builder().http_status_as_error(false).build());
    let gateway = |path: &str, body: Value| -> Value {
        let url = format!("{}{path}", etcd.endpoints()[0]);
        let mut r = agent.post(&url).send(serde_json::to_vec(&body).unwrap()).unwrap();
        serde_json::from_slice(&r.body_mut().read_to_vec().unwrap()).unwrap()
    };
    let key = b64.encode("/berth-writer/policy/set");
    let stored = gateway("/v3/kv/range", serde_json::json!({ "key": key }));
    let value = stored["kvs"][0]["value"].as_str().expect("the set is stored");
    let mut set: Value = serde_json::from_slice(&b64.decode(value).unwrap()).unwrap();
    set["version"] = (set["version"].as_u64().unwrap() + 1).into();
    set["text"] = format!(
        "[[policy]]\nmodule = \"{}\"\nsettings = {{ prefix = \"evil\" }}\n",
        planted.display()
    )
    .into();
    gateway(
        "/v3/kv/put",
        serde_json::json!({ "key": key, "value": b64.encode(serde_json::to_vec(&set).unwrap()) }),
    );
    let others: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    for &i in &others {
        logged(&c, i, "carries its digest", 1);
    }
    // The leader gone: no other server takes the lead on that set.
    c.kill_server(leader);
    let [a, b] = others[..] else { unreachable!() };
    logged(
        &c,
        a,
        "cannot prepare the policy set; not standing for the lead",
        2,
    );
    logged(
        &c,
        b,
        "cannot prepare the policy set; not standing for the lead",
        2,
    );
    for i in [a, b] {
        let log = std::fs::read_to_string(&c.serves[i].log).unwrap();
        assert!(!log.contains("elected"), "{log}");
    }
}
