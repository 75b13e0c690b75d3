//! What a hostile review found, each as it was found: real `berth serve`,
//! plugin processes and guests, driven through the CLI.
//!
//! State that must never lie (publish modes, topology, node limits), retries
//! a policy cannot turn into a storm, text from guests and plugins that
//! cannot reach a terminal raw, files other users cannot read, bounded
//! input, and a CLI that says what happened.

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use berth_tests::{Cluster, ClusterSpec, guest, texts, wait_for};
use serde_json::Value;

fn get(c: &Cluster, name: &str) -> Value {
    serde_json::from_str(&c.ok(&["volume", "get", name, "-o", "json"])).unwrap()
}

/// Runs the CLI; asserts it fails, and returns (exit code, stdout, stderr).
fn fails(c: &Cluster, args: &[&str]) -> (i32, String, String) {
    let out = c.berth(args);
    let (stdout, stderr) = texts(&out);
    assert!(!out.status.success(), "berth {args:?} succeeded: {stdout}");
    (out.status.code().unwrap_or(-1), stdout, stderr)
}

#[test]
fn a_publish_in_another_mode_is_refused_not_claimed() {
    let c = Cluster::start(ClusterSpec::builtin());
    for (name, first, second) in [
        ("rw", &[][..], &["--readonly"][..]),
        ("ro", &["--readonly"][..], &[][..]),
    ] {
        c.create_in(name, "zone=a");
        let mut args = vec!["volume", "publish", name, "--node", "node-a", "--wait"];
        args.extend_from_slice(first);
        c.ok(&args);
        let mut again = vec!["volume", "publish", name, "--node", "node-a"];
        again.extend_from_slice(second);
        let (code, _, stderr) = fails(&c, &again);
        assert_eq!(code, 1);
        assert!(
            stderr.contains("ALREADY_EXISTS") && stderr.contains("unpublish it first"),
            "{stderr}"
        );
        let v = get(&c, name);
        assert_eq!(
            v["publications"][0]["readonly"],
            first.len() == 1,
            "the record keeps what the node has"
        );
        // The same mode again is an idempotent repeat.
        c.ok(&args);
    }
}

#[test]
fn a_required_topology_is_never_dropped() {
    // A controller without VOLUME_ACCESSIBILITY_CONSTRAINTS: only placement
    // can honour a requisite topology.
    let c = Cluster::start(ClusterSpec {
        controller_topology: None,
        ..ClusterSpec::builtin()
    });
    let (code, _, stderr) = fails(
        &c,
        &[
            "volume",
            "create",
            "t1",
            "--plugin",
            "hostpath",
            "--requisite",
            "zone=z9",
        ],
    );
    assert_eq!(code, 1);
    assert!(
        stderr.contains("requisite_topology") && stderr.contains("cannot be honoured"),
        "{stderr}"
    );

    c.create_in("t2", "zone=b");
    let (_, _, stderr) = fails(&c, &["volume", "publish", "t2", "--node", "node-a"]);
    assert!(
        stderr.contains("outside the topology") && stderr.contains("zone=b"),
        "{stderr}"
    );
    // Placement honours it too: node-b is the only node in zone b.
    c.ok(&["volume", "publish", "t2", "--wait"]);
    assert_eq!(get(&c, "t2")["publications"][0]["node"], "node-b");
}

#[test]
fn a_publish_past_the_node_limit_is_refused_up_front() {
    let c = Cluster::start(ClusterSpec {
        node_args: vec!["--max-volumes", "1"],
        ..ClusterSpec::builtin()
    });
    for v in ["a", "b"] {
        c.create_in(v, "zone=a");
    }
    c.ok(&["volume", "publish", "a", "--node", "node-a", "--wait"]);
    let (code, _, stderr) = fails(&c, &["volume", "publish", "b", "--node", "node-a"]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("RESOURCE_EXHAUSTED") && stderr.contains("limit is 1"),
        "{stderr}"
    );
    let nodes = c.ok(&["node", "list"]);
    assert!(nodes.contains(" 1/1 "), "{nodes}");
    assert!(get(&c, "b")["publications"].as_array().unwrap().is_empty());
}

/// The attempt number in a volume's `retrying` line.
fn attempt(v: &Value) -> u64 {
    let text = v["retrying"].as_str().unwrap_or("");
    text.split("(attempt ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_retry_policy_answering_zero_cannot_make_a_storm() {
    // The sample retry guest with no backoff at all, and a plugin that
    // refuses every CreateVolume.
    let c = Cluster::start(ClusterSpec {
        retry_settings: "base-ms = \"0\", max-ms = \"0\", max-attempts = \"1000000\"",
        plugin_args: vec!["--fault", "UNAVAILABLE=1.0", "--fault-calls", "CreateVolume"],
        ..ClusterSpec::default()
    });
    let asked = Instant::now();
    c.ok(&["volume", "create", "storm", "--plugin", "hostpath"]);
    wait_for(
        "the sixth attempt",
        Duration::from_secs(30),
        || attempt(&get(&c, "storm")) >= 6,
        || get(&c, "storm").to_string(),
    );
    // The host's floor (10 ms doubling) holds five waits before it:
    // 10 + 20 + 40 + 80 + 160 ms at the least, however fast the machine.
    // (The exact waits are tested in paused time, `core_tests::lifecycle` in berth-server.)
    let took = asked.elapsed();
    assert!(took >= Duration::from_millis(310), "six attempts in {took:?}");
}

/// A cluster whose naming (or retry) is the hostile guest in `behaviour`.
fn hostile(decision: &str, behaviour: &str, plugin_args: Vec<&'static str>) -> Cluster {
    let extra = format!(
        "[[policy]]\nmodule = \"{}\"\ndecisions = [\"{decision}\"]\non_error = \"fail\"\nsettings = {{ behaviour = \"{behaviour}\" }}\n",
        guest("berth_hostile_guest").display()
    );
    Cluster::start(ClusterSpec {
        extra: Box::leak(extra.into_boxed_str()),
        plugin_args,
        ..ClusterSpec::builtin()
    })
}

#[test]
fn a_policy_failing_the_same_way_ends_in_a_visible_failure() {
    let c = hostile("naming", "invalid-answer", vec![]);
    let started = Instant::now();
    let (code, stdout, _) = fails(
        &c,
        &[
            "volume",
            "create",
            "v",
            "--plugin",
            "hostpath",
            "--wait",
            "--timeout",
            "30s",
        ],
    );
    assert_eq!(code, 1);
    assert!(
        stdout.contains("failed: ") && stdout.contains("policy failed 3 times"),
        "{stdout}"
    );
    assert!(started.elapsed() < Duration::from_secs(20));
    let log = c.log();
    assert!(
        log.lines()
            .any(|l| l.contains("policy failed") && l.contains("volume=v")),
        "policy warnings name the volume: {log}"
    );

    let c = hostile(
        "retry",
        "invalid-answer",
        vec!["--fault", "UNAVAILABLE=1.0", "--fault-calls", "CreateVolume"],
    );
    let (_, stdout, _) = fails(
        &c,
        &[
            "volume",
            "create",
            "w",
            "--plugin",
            "hostpath",
            "--wait",
            "--timeout",
            "30s",
        ],
    );
    assert!(stdout.contains("policy failed 3 times"), "{stdout}");
}

#[test]
fn text_from_guests_reaches_terminals_escaped() {
    let c = hostile("naming", "echo", vec![]);
    let (code, stdout, _) = fails(
        &c,
        &[
            "volume",
            "create",
            "v",
            "--plugin",
            "hostpath",
            "--label",
            "refuse=\x1b[2Jgone\x07 \u{202e}lave\u{2028}x\u{200b}",
            "--wait",
        ],
    );
    assert_eq!(code, 1, "a refused name fails the --wait");
    for out in [stdout, c.ok(&["volume", "list"]), c.ok(&["volume", "get", "v"])] {
        assert!(
            !out.contains('\x1b') && !out.contains('\x07'),
            "raw control characters: {out:?}"
        );
        assert!(out.contains("\\u{1b}[2Jgone\\u{7}"), "{out}");
        // Bidi overrides, line separators and zero-width characters too
        // ("Trojan Source"): the text cannot show as other words.
        assert!(
            !out.contains('\u{202e}') && !out.contains('\u{2028}') && !out.contains('\u{200b}'),
            "{out:?}"
        );
        assert!(out.contains("\\u{202e}lave\\u{2028}x\\u{200b}"), "{out}");
    }
    // In JSON the same text is JSON-escaped, and intact.
    assert!(get(&c, "v")["failure"].as_str().unwrap().contains("\x1b[2Jgone"));
}

#[test]
fn input_is_bounded_and_never_echoed_whole() {
    let c = Cluster::start(ClusterSpec::builtin());
    let long = "n".repeat(100_000);
    let (code, _, stderr) = fails(&c, &["volume", "get", &long]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("NOT_FOUND") && stderr.contains("(100000 bytes)"),
        "{}",
        &stderr[..stderr.len().min(300)]
    );
    assert!(stderr.len() < 1000, "{} bytes of error", stderr.len());

    let label = format!("big={}", "v".repeat(100_000));
    let (_, _, stderr) = fails(
        &c,
        &["volume", "create", "x", "--plugin", "hostpath", "--label", &label],
    );
    assert!(
        stderr.contains("labels:") && stderr.contains("at most 4096"),
        "{}",
        &stderr[..stderr.len().min(300)]
    );
    let (_, _, stderr) = fails(&c, &["volume", "create", &long, "--plugin", "hostpath"]);
    assert!(
        stderr.contains("name:") && stderr.len() < 1000,
        "{}",
        &stderr[..stderr.len().min(300)]
    );
}

#[test]
fn the_cli_says_what_happened() {
    let c = Cluster::start(ClusterSpec::builtin());
    // Sizes: decimals and TiB are sizes; 2^63 bytes is not.
    let out = c.ok(&[
        "volume", "create", "s", "--plugin", "hostpath", "--size", "1.5GiB", "--limit", "1TiB",
    ]);
    assert!(
        out.contains("accepted:"),
        "without --wait it says the volume was accepted: {out}"
    );
    c.ok(&["volume", "get", "s"]);
    let (code, _, stderr) = fails(
        &c,
        &[
            "volume",
            "create",
            "t",
            "--plugin",
            "hostpath",
            "--size",
            "9223372036854775808B",
        ],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("too large"), "{stderr}");
    let (code, _, _) = fails(
        &c,
        &[
            "volume",
            "create",
            "t",
            "--plugin",
            "hostpath",
            "--requisite",
            "zone",
        ],
    );
    assert_eq!(code, 2, "a malformed flag is bad usage");

    // JSON everywhere, errors included.
    let (code, stdout, stderr) = fails(&c, &["volume", "get", "nope", "-o", "json"]);
    assert_eq!((code, stdout.as_str()), (1, ""));
    let err: Value = serde_json::from_str(&stderr).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    assert_eq!(err["error"]["code"], "NOT_FOUND");
    assert!(err["error"]["message"].as_str().unwrap().contains("nope"));

    c.create_in("d", "zone=a");
    c.ok(&["volume", "publish", "d", "--node", "node-a", "--wait"]);
    // Unpublishing twice is no error, as in CSI.
    c.ok(&["volume", "unpublish", "d", "--node", "node-a", "--wait"]);
    c.ok(&["volume", "unpublish", "d", "--node", "node-a"]);
    let retry = c.ok(&["volume", "retry", "d"]);
    assert!(
        retry.contains("nothing to retry") && retry.contains("available"),
        "{retry}"
    );
    let deleted: Value =
        serde_json::from_str(&c.ok(&["volume", "delete", "d", "--wait", "-o", "json"])).unwrap();
    assert_eq!(deleted["state"], "deleted");
}

#[test]
fn a_user_without_access_to_the_socket_is_told_why() {
    // Root passes any permission check; see what another user sees.
    let runuser = std::path::Path::new("/usr/sbin/runuser");
    if unsafe { libc::geteuid() } != 0 || !runuser.exists() {
        eprintln!("skipped: needs root and runuser to act as another user");
        return;
    }
    let c = Cluster::start(ClusterSpec::builtin());
    // The other user must be able to run the CLI, wherever this checkout is.
    let shared = tempfile::Builder::new()
        .prefix("berth-cli-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let cli = shared.path().join("berth");
    std::fs::copy(berth_tests::bin("berth"), &cli).unwrap();
    std::fs::set_permissions(&cli, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = std::process::Command::new(runuser)
        .args(["-u", "nobody", "--"])
        .arg(&cli)
        .args(["volume", "list", "--api"])
        .arg(&c.api)
        .output()
        .unwrap();
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.contains("no permission") && stderr.contains("run as that user"),
        "{stderr}"
    );
}

/// A config with a controller socket nobody serves, and `policies`.
fn lone_config(dir: &std::path::Path, policies: &[&str]) -> std::path::PathBuf {
    let mut text = format!(
        "state = \"state/berth.redb\"\n[[plugin]]\nname = \"hostpath\"\ncontroller = \"unix://{}/none.sock\"\n",
        dir.display()
    );
    for p in policies {
        text.push_str(&format!("[[policy]]\nmodule = \"{}\"\n", guest(p).display()));
    }
    let path = dir.join("berth.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn serve_refuses_two_modules_for_one_decision() {
    let dir = berth_tests::test_dir();
    // Both export naming (and the hostile one placement and retry too).
    let config = lone_config(dir.path(), &["berth_naming_guest", "berth_hostile_guest"]);
    let out = berth_tests::berth(&["serve", "--config", config.to_str().unwrap()]);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("berth_hostile_guest.wasm serves naming")
            && stderr.contains("berth_naming_guest.wasm")
            && stderr.contains("one module"),
        "{stderr}"
    );
}

#[test]
fn serve_says_what_it_serves_at_the_default_level() {
    let dir = berth_tests::test_dir();
    let config = lone_config(dir.path(), &["berth_naming_guest"]);
    let log = dir.path().join("serve.log");
    let mut serve = std::process::Command::new(berth_tests::bin("berth"))
        .args(["serve", "--config"])
        .arg(&config)
        .env_remove("BERTH_LOG")
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    // The socket is bound before the store is checked; "serving" comes once work can start.
    let started = Instant::now();
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("serving")
        && started.elapsed() < Duration::from_secs(30)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = serve.kill();
    let _ = serve.wait();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("serving") && text.contains("berth.sock"), "{text}");
    assert!(
        text.contains("hostpath") && text.contains("policy module loaded"),
        "{text}"
    );
}

#[test]
fn policies_reload_all_or_nothing_and_status_counts_them() {
    let c = Cluster::start(ClusterSpec::default());
    c.ok(&["volume", "create", "before", "--plugin", "hostpath", "--wait"]);
    assert!(get(&c, "before")["csi_name"].as_str().unwrap().starts_with("pv-"));
    let status = c.ok(&["status"]);
    assert!(
        status.contains("berth_naming_guest (naming; on_error fail): 1 calls, 0 failed"),
        "{status}"
    );

    // A good change, through the CLI.
    let config = std::fs::read_to_string(&c.config).unwrap();
    std::fs::write(&c.config, config.replace("prefix = \"pv\"", "prefix = \"re\"")).unwrap();
    let out = c.ok(&["policy", "reload"]);
    assert!(
        out.contains("reloaded") && out.contains("berth_naming_guest"),
        "{out}"
    );
    c.ok(&["volume", "create", "after", "--plugin", "hostpath", "--wait"]);
    assert!(get(&c, "after")["csi_name"].as_str().unwrap().starts_with("re-"));

    // A bad change, through the CLI and through SIGHUP: nothing changes.
    let good = std::fs::read_to_string(&c.config).unwrap();
    std::fs::write(&c.config, good.replace("berth_retry_guest.wasm", "missing.wasm")).unwrap();
    let (code, _, stderr) = fails(&c, &["policy", "reload"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("missing.wasm"), "{stderr}");
    unsafe { libc::kill(c.serve_pid().unwrap() as i32, libc::SIGHUP) };
    let started = Instant::now();
    while !c
        .log()
        .contains("policy reload failed; the modules in service stay")
    {
        assert!(started.elapsed() < Duration::from_secs(20), "{}", c.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    c.ok(&["volume", "create", "still", "--plugin", "hostpath", "--wait"]);
    assert!(get(&c, "still")["csi_name"].as_str().unwrap().starts_with("re-"));
    assert!(c.ok(&["status"]).contains("berth_retry_guest"));
}

#[test]
fn a_policy_that_runs_out_of_time_is_asked_again_not_given_up_on() {
    // A deadline missed may pass on a less busy machine; only failures that
    // repeat for the same input end in a give-up.
    let c = hostile("naming", "loop", vec![]);
    c.ok(&["volume", "create", "slow", "--plugin", "hostpath"]);
    let started = Instant::now();
    loop {
        let v = get(&c, "slow");
        assert_eq!(v["failure"], "", "a deadline is not a give-up: {v}");
        if attempt(&v) > 3 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{v}");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        get(&c, "slow")["retrying"]
            .as_str()
            .unwrap()
            .contains("ran past its deadline")
    );
}

/// A retry guest gives up with megabytes of reason (its operator let it
/// answer that much): what the volume keeps, and every view of it, is cut
/// to a documented bound with a visible marker, so lists keep working.
#[test]
fn text_from_outside_is_kept_bounded_with_a_marker() {
    let extra = format!(
        "[[policy]]\nmodule = \"{}\"\ndecisions = [\"retry\"]\non_error = \"fail\"\nmax_answer = \"16MiB\"\nsettings = {{ behaviour = \"huge-answer\" }}\n",
        guest("berth_hostile_guest").display()
    );
    let c = Cluster::start(ClusterSpec {
        extra: Box::leak(extra.into_boxed_str()),
        plugin_args: vec!["--fault", "UNAVAILABLE=1.0", "--fault-calls", "CreateVolume"],
        ..ClusterSpec::builtin()
    });
    for name in ["v0", "v1", "v2"] {
        let (code, _, _) = fails(&c, &["volume", "create", name, "--plugin", "hostpath", "--wait"]);
        assert_eq!(code, 1);
    }
    let list: Value = serde_json::from_str(&c.ok(&["volume", "list", "-o", "json"])).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 3);
    let failure = get(&c, "v0")["failure"].as_str().unwrap().to_string();
    assert!(failure.len() <= 4096, "{} bytes kept", failure.len());
    assert!(failure.contains("[cut; "), "{failure}");
    let events: Value = serde_json::from_str(&c.ok(&["volume", "events", "v0", "-o", "json"])).unwrap();
    let messages: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["message"].as_str())
        .collect();
    assert!(messages.iter().any(|m| m.contains("[cut; ")), "{messages:?}");
    assert!(messages.iter().all(|m| m.len() <= 1024), "{messages:?}");
    assert!(c.log().len() < 4 << 20, "the log is not flooded with the reason");
}

/// A config file's parse error, with its excerpt of the file, prints as
/// lines (the first unindented, the rest indented), not as one line of
/// escapes.
#[test]
fn a_config_parse_error_prints_as_lines() {
    let dir = berth_tests::test_dir();
    let config = dir.path().join("berth.toml");
    std::fs::write(&config, "workers = 4\nstate = [\n").unwrap();
    let out = berth_tests::berth(&["serve", "--config", &config.display().to_string()]);
    let (_, stderr) = texts(&out);
    assert!(!out.status.success());
    assert!(!stderr.contains("\\u{a}"), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(lines.len() > 2 && lines[0].starts_with("error: "), "{stderr}");
    assert!(lines[1..].iter().all(|l| l.starts_with("  ")), "{stderr}");
}
