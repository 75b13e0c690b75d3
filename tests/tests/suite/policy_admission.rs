//! Admission as policy, on a real server with the sample admission module
//! (the scaffold's): a namespace at its most volumes is refused, another
//! is not; a default the module sets is on the volume, in its events and
//! in `volume explain`; a refusal's reason reaches the caller and the audit
//! log; a hostile module admits nothing it could not judge.

use berth_tests::{Cluster, ClusterSpec, guest, texts};
use serde_json::Value;

/// The sample naming module and an admission module (`module`, with
/// `settings` and the rest of its table).
fn tables(module: &str, rest: &str) -> String {
    format!(
        "[[policy]]\nmodule = \"{}\"\n[[policy]]\nmodule = \"{}\"\ndecisions = [\"admission\"]\n{rest}\n",
        guest("berth_naming_guest").display(),
        guest(module).display(),
    )
}

fn create(c: &Cluster, namespace: &str, name: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "volume", "-n", namespace, "create", name, "--plugin", "hostpath", "--size", "1MiB", "--wait",
    ];
    args.extend_from_slice(extra);
    c.berth(&args)
}

fn get(c: &Cluster, namespace: &str, name: &str) -> Value {
    serde_json::from_str(&c.ok(&["volume", "-n", namespace, "get", name, "-o", "json"])).unwrap()
}

#[test]
fn the_admission_module_refuses_completes_and_is_explained() {
    let policies = tables("berth_admission_guest", "settings = { max-volumes = \"1\" }");
    let port = berth_tests::free_port();
    let extra = format!("metrics = \"127.0.0.1:{port}\"");
    let c = Cluster::start(ClusterSpec {
        policy_tables: Some(&policies),
        extra: &extra,
        ..ClusterSpec::default()
    });
    // A default set by the module: on the volume, in its events, explained.
    let out = create(&c, "team-a", "data", &[]);
    assert!(out.status.success(), "{}{}", texts(&out).1, c.log());
    let data = get(&c, "team-a", "data");
    assert_eq!(data["labels"]["owner"], "team-a", "{data:#}");
    let events = data["events"].to_string();
    assert!(
        events.contains("label owner=team-a (every volume names its owner"),
        "{events}"
    );
    let explained = c.ok(&["volume", "-n", "team-a", "explain", "data"]);
    assert!(
        explained.contains("admission  admitted with label owner=team-a"),
        "{explained}"
    );

    // team-a holds its most; team-b holds nothing.
    let out = create(&c, "team-a", "more", &[]);
    let stderr = texts(&out).1;
    assert!(
        !out.status.success()
            && stderr.contains("PERMISSION_DENIED")
            && stderr.contains("holds 1 volumes, its most"),
        "{stderr}"
    );
    assert!(
        !c.berth(&["volume", "-n", "team-a", "get", "more"])
            .status
            .success()
    );
    let out = create(&c, "team-b", "data", &["--label", "owner=db"]);
    assert!(out.status.success(), "{}", texts(&out).1);
    assert_eq!(get(&c, "team-b", "data")["labels"]["owner"], "db");

    // The refusal's reason is in the audit log with who asked.
    let audit = std::fs::read_to_string(c.dir.path().join("state/audit.log")).unwrap();
    assert!(
        audit.lines().any(|l| l.contains("\"CreateVolume\"")
            && l.contains("PERMISSION_DENIED")
            && l.contains("holds 1 volumes")),
        "{audit}"
    );
    // A delete, a publish and an expand are asked too, and this module admits them.
    c.ok(&["volume", "-n", "team-b", "expand", "data", "--size", "2MiB"]);
    c.ok(&["volume", "-n", "team-b", "delete", "data", "--wait"]);

    // Each answer counted by its verdict.
    let scraped = berth_tests::scrape::scrape(port);
    let by = berth_tests::scrape::by_labels(&scraped, "berth_admission_verdicts_total", &["verdict"]);
    let count = |v: &str| by.get(v).copied().unwrap_or_default();
    assert_eq!(
        (
            count("allow_with"),
            count("deny"),
            count("allow"),
            count("failed")
        ),
        (1.0, 1.0, 3.0, 0.0),
        "{by:?}"
    );
}

#[test]
fn a_hostile_admission_module_admits_nothing_it_could_not_judge() {
    for (behaviour, on_error, admitted, said) in [
        ("invalid-answer", "fail", false, "may round a size up, never down"),
        ("loop", "fail", false, "UNAVAILABLE"),
        ("huge-answer", "fail", false, "UNAVAILABLE"),
        ("loop", "builtin", true, ""),
    ] {
        let rest = format!(
            "on_error = \"{on_error}\"\ndeadline = \"50ms\"\nsettings = {{ behaviour = \"{behaviour}\" }}"
        );
        let policies = tables("berth_hostile_guest", &rest);
        let c = Cluster::start(ClusterSpec {
            policy_tables: Some(&policies),
            ..ClusterSpec::default()
        });
        let out = create(&c, "default", "v", &[]);
        let stderr = texts(&out).1;
        assert_eq!(out.status.success(), admitted, "{behaviour}/{on_error}: {stderr}");
        assert!(stderr.contains(said), "{behaviour}/{on_error}: {stderr}");
        let listed = c.ok(&["volume", "list", "-o", "json"]);
        let volumes: Vec<Value> = serde_json::from_str(&listed).unwrap();
        assert_eq!(
            volumes.len(),
            usize::from(admitted),
            "{behaviour}/{on_error}: {listed}"
        );
        if admitted {
            // As asked: the builtin policy changes nothing.
            assert_eq!(volumes[0]["required_bytes"].as_u64(), Some(1 << 20), "{listed}");
        }
    }
}

/// `policy replay` over the requests a server admitted: the same module
/// with a lower `max-volumes` says which of them it would have refused.
#[test]
fn replay_says_which_recorded_requests_a_stricter_module_would_refuse() {
    let policies = tables("berth_admission_guest", "");
    let c = Cluster::start(ClusterSpec {
        policy_tables: Some(&policies),
        ..ClusterSpec::default()
    });
    for name in ["a1", "a2", "a3"] {
        let out = create(&c, "team-a", name, &[]);
        assert!(out.status.success(), "{}", texts(&out).1);
    }
    let out = create(&c, "team-b", "b1", &["--label", "owner=db"]);
    assert!(out.status.success(), "{}", texts(&out).1);
    let module = guest("berth_admission_guest").display().to_string();
    let replay = |setting: &str| -> Value {
        let mut args = vec![
            "policy",
            "replay",
            &module,
            "--decision",
            "admission",
            "-o",
            "json",
        ];
        if !setting.is_empty() {
            args.extend(["--setting", setting]);
        }
        serde_json::from_str(&c.ok(&args)).unwrap()
    };
    // The log is written in batches, a moment after the decisions.
    let started = std::time::Instant::now();
    while replay("")["replayed"] != 4 {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "{}",
            c.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let same = replay("");
    assert_eq!(
        (&same["same"], &same["different"]),
        (&4.into(), &0.into()),
        "{same:#}"
    );

    // At most two volumes a namespace: team-a's third is refused now.
    let strict = replay("max-volumes=2");
    assert_eq!(
        (&strict["replayed"], &strict["different"], &strict["failed"]),
        (&4.into(), &1.into(), &0.into()),
        "{strict:#}"
    );
    let admission = &strict["admission"];
    assert_eq!(admission["newly_denied"], 1, "{strict:#}");
    let example = admission["examples"][0].to_string();
    assert!(
        example.contains("a3") && example.contains("holds 2 volumes"),
        "{example}"
    );
    let text = c.ok(&[
        "policy",
        "replay",
        &module,
        "--decision",
        "admission",
        "--setting",
        "max-volumes=2",
    ]);
    assert!(
        text.contains("4 decisions replayed: 3 same, 1 different, 0 failed"),
        "{text}"
    );
}
