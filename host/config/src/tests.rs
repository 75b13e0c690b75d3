//! The config file's parsing: every key, the defaults, and errors naming the key at fault.

use super::*;
use berth_policy::OnError;

const GOOD: &str = r#"
state = "state/berth.redb"
workers = 8
[[plugin]]
name = "hostpath"
driver = "hostpath.csi.k8s.io"
controller = "unix:///run/csi/c.sock"
[[node]]
name = "node-a"
dir = "nodes/a"
plugins = { hostpath = "/run/csi/a.sock" }
[[policy]]
module = "naming.wasm"
decisions = ["naming"]
on_error = "builtin"
memory = "16MiB"
settings = { prefix = "x" }
"#;

#[test]
fn a_good_config_is_resolved_against_its_directory() {
    let c = Config::parse(GOOD, Path::new("/etc/berth")).unwrap();
    assert_eq!(c.state, Path::new("/etc/berth/state/berth.redb"));
    assert_eq!(c.api.path(), Path::new("/etc/berth/state/berth.sock"));
    assert_eq!(c.socket_mode, 0o600);
    assert_eq!(c.workers, 8);
    assert_eq!(c.nodes[0].dir, Path::new("/etc/berth/nodes/a"));
    assert_eq!(c.policies[0].module.path, Path::new("/etc/berth/naming.wasm"));
    assert_eq!(c.policies[0].module.limits.memory_bytes, 16 << 20);
    assert_eq!(c.policies[0].module.on_error, OnError::Builtin);
    assert_eq!(c.plugins[0].deadline, Duration::from_secs(15));
    assert_eq!(c.metrics, None, "metrics are off unless asked for");
    assert_eq!(c.events_per_volume, DEFAULT_EVENTS_PER_VOLUME);
}

#[test]
fn metrics_and_events_are_configured_at_the_top() {
    let text = format!("metrics = \"127.0.0.1:9464\"\nevents_per_volume = 0\n{GOOD}");
    let c = Config::parse(&text, Path::new("/etc/berth")).unwrap();
    assert_eq!(c.metrics, Some("127.0.0.1:9464".parse().unwrap()));
    assert_eq!(c.events_per_volume, 0);
    assert_eq!(c.joins_per_minute, 60, "a few joins at a time by default");
    assert_eq!(
        c.instances_made_ahead, 2,
        "two instances of each module ready by default"
    );
    let none = Config::parse(&format!("instances_made_ahead = 0\n{GOOD}"), Path::new("/")).unwrap();
    assert_eq!(none.instances_made_ahead, 0);
    let fleet = Config::parse(&format!("joins_per_minute = 6000\n{GOOD}"), Path::new("/")).unwrap();
    assert_eq!(fleet.joins_per_minute, 6000);
    for (text, key) in [
        (format!("metrics = \"localhost\"\n{GOOD}"), "metrics"),
        (format!("events_per_volume = 5000\n{GOOD}"), "events_per_volume"),
        (format!("joins_per_minute = 0\n{GOOD}"), "joins_per_minute"),
        (
            format!("instances_made_ahead = 17\n{GOOD}"),
            "instances_made_ahead",
        ),
    ] {
        let err = Config::parse(&text, Path::new("/")).unwrap_err();
        assert_eq!(err.key(), Some(key), "{err}");
    }
}

#[test]
fn relative_sockets_are_taken_from_the_config_directory() {
    let text = GOOD
        .replace("\"unix:///run/csi/c.sock\"", "\"unix:csi/c.sock\"")
        .replace("\"/run/csi/a.sock\"", "\"a.sock\"");
    let c = Config::parse(&format!("api = \"api/b.sock\"\n{text}"), Path::new("/etc/berth")).unwrap();
    assert_eq!(c.api.path(), Path::new("/etc/berth/api/b.sock"));
    assert_eq!(
        c.plugins[0].controller.as_ref().unwrap().path(),
        Path::new("/etc/berth/csi/c.sock")
    );
    assert_eq!(
        c.nodes[0].plugins["hostpath"].path(),
        Path::new("/etc/berth/a.sock")
    );
    // The socket path limit applies to the resolved path.
    let deep = format!("/{}", "d".repeat(100));
    let err = Config::parse(&format!("api = \"b.sock\"\n{GOOD}"), Path::new(&deep)).unwrap_err();
    assert_eq!(err.key(), Some("api"), "{err}");
    assert!(err.to_string().contains("at most 107"), "{err}");
}

#[test]
fn errors_name_the_key_at_fault() {
    let cases = [
        (GOOD.replace("workers = 8", "workers = 0"), "workers: 0"),
        (GOOD.replace("workers = 8", "wrokers = 8"), "wrokers"),
        (
            GOOD.replace("hostpath = \"/run", "other = \"/run"),
            "node[0].plugins.other",
        ),
        (
            GOOD.replace("\"unix:///run/csi/c.sock\"", "\"tcp://x:1\""),
            "plugin[0].controller",
        ),
        (GOOD.replace("\"naming\"]", "\"nameing\"]"), "policy[0].decisions"),
        (GOOD.replace("\"16MiB\"", "\"16XB\""), "policy[0].memory"),
        (
            GOOD.replace("name = \"node-a\"", "name = \"../x\""),
            "node[0].name",
        ),
        (
            GOOD.replace("driver = \"hostpath.csi.k8s.io\"", "driver = \"bad_driver\""),
            "plugin[0].driver",
        ),
        (
            format!("socket_mode = \"999\"\n{GOOD}"),
            "socket_mode: \"999\" is not an octal",
        ),
        ("state = \"x\"".to_string(), "no [[plugin]]"),
        (
            format!("{GOOD}[[policy]]\nmodule = \"other.wasm\"\ndecisions = [\"retry\", \"naming\"]\n"),
            "policy[1].decisions: naming is served by policy[0] (/naming.wasm)",
        ),
        (
            format!("api_client_ca = \"people.pem\"\n{GOOD}"),
            "api_client_ca: needs api_address",
        ),
        (
            format!("api_address = \"localhost\"\n{GOOD}"),
            "api_address: \"localhost\" is not an address like \"0.0.0.0:7444\"",
        ),
    ];
    for (text, key) in cases {
        let err = Config::parse(&text, Path::new("/")).unwrap_err().to_string();
        assert!(err.contains(key), "expected {key:?} in: {err}");
    }
}

#[test]
fn the_store_is_embedded_unless_etcd_is_named() {
    assert_eq!(Config::parse(GOOD, Path::new("/")).unwrap().etcd, None);
    let with = |store: &str| Config::parse(&format!("{GOOD}[store]\n{store}"), Path::new("/"));
    let c = with("etcd = [\"http://127.0.0.1:2379\", \"http://10.0.0.2:2379\"]").unwrap();
    let etcd = c.etcd.unwrap();
    assert_eq!(etcd.endpoints, ["http://127.0.0.1:2379", "http://10.0.0.2:2379"]);
    assert_eq!(etcd.prefix, "/berth");
    assert_eq!(etcd.lease_ttl, Duration::from_secs(5), "a few seconds by default");
    let c = with("etcd = [\"http://e:2379\"]\nname = \"b\"\nlease_ttl = \"2s\"").unwrap();
    let etcd = c.etcd.unwrap();
    assert_eq!(
        (etcd.name.as_str(), etcd.lease_ttl),
        ("b", Duration::from_secs(2))
    );
    assert_eq!(
        etcd.compact_every,
        Duration::from_secs(300),
        "history compacted every 5 min by default"
    );
    let c = with("etcd = [\"http://e:2379\"]\ncompact_every = \"0s\"").unwrap();
    assert!(
        c.etcd.unwrap().compact_every.is_zero(),
        "0s leaves compaction to etcd"
    );
    let err = with("etcd = [\"http://e:2379\"]\ncompact_every = \"10ms\"")
        .unwrap_err()
        .to_string();
    assert!(err.contains("store.compact_every"), "{err}");
    // The etcd store checks the rest; errors still name the key.
    let err = with("etcd = [\"https://e:2379\"]").unwrap_err().to_string();
    assert!(err.contains("store.ca") && err.contains("https://"), "{err}");
    let err = with("etcd = [\"http://e:2379\"]\ncert = \"c.pem\"")
        .unwrap_err()
        .to_string();
    assert!(err.contains("store.cert") && err.contains("together"), "{err}");
}

#[test]
fn tls_files_for_etcd_are_read_from_beside_the_config() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ca.pem"), "CA").unwrap();
    std::fs::write(dir.path().join("c.pem"), "CERT").unwrap();
    std::fs::write(dir.path().join("c.key"), "KEY").unwrap();
    let text = format!(
        "{GOOD}[store]\netcd = [\"https://e:2379\"]\nca = \"ca.pem\"\ncert = \"c.pem\"\nkey = \"c.key\"\n"
    );
    let tls = Config::parse(&text, dir.path())
        .unwrap()
        .etcd
        .unwrap()
        .tls
        .unwrap();
    assert_eq!(tls.ca, "CA");
    assert_eq!(tls.identity, Some(("CERT".into(), "KEY".into())));
    assert!(!format!("{tls:?}").contains("KEY"), "the key is never shown");
    let missing = format!("{GOOD}[store]\netcd = [\"https://e:2379\"]\nca = \"gone.pem\"\n");
    let err = Config::parse(&missing, dir.path()).unwrap_err().to_string();
    assert!(err.contains("store.ca") && err.contains("gone.pem"), "{err}");
}

#[test]
fn docker_is_off_unless_asked_for_and_checked_when_it_is() {
    let c = Config::parse(GOOD, Path::new("/etc/berth")).unwrap();
    assert_eq!(c.docker, None);
    let with = |table: &str| Config::parse(&format!("{GOOD}[docker]\n{table}"), Path::new("/etc/berth"));
    let d = with("node = \"node-a\"\n").unwrap().docker.unwrap();
    assert_eq!(d.socket, Path::new(docker::DEFAULT_SOCKET));
    assert_eq!(
        (d.socket_mode, d.create_volumes, d.wait),
        (0o600, false, Duration::from_secs(120))
    );
    let d = with("node = \"node-a\"\nsocket = \"docker.sock\"\nsocket_mode = \"0660\"\ncreate_volumes = true\nplugin = \"hostpath\"\n")
        .unwrap()
        .docker
        .unwrap();
    assert_eq!(d.socket, Path::new("/etc/berth/docker.sock"));
    assert_eq!((d.socket_mode, d.plugin.as_deref()), (0o660, Some("hostpath")));
    for (table, key) in [
        ("node = \"node-z\"\n", "docker.node"),
        ("node = \"node-a\"\nplugin = \"nfs\"\n", "docker.plugin"),
        (
            "node = \"node-a\"\nsocket_mode = \"0666\"\n",
            "docker.socket_mode",
        ),
        ("node = \"node-a\"\ncolour = \"blue\"\n", "colour"),
    ] {
        let err = with(table).unwrap_err().to_string();
        assert!(err.contains(key), "{table}: {err}");
    }
}

#[test]
fn a_world_writable_api_socket_is_refused() {
    let parse = |line: &str| Config::parse(&format!("{line}\n{GOOD}"), Path::new("/etc/berth"));
    assert_eq!(parse("socket_mode = \"0660\"").unwrap().socket_mode, 0o660);
    for mode in ["0666", "0602", "0777"] {
        let err = parse(&format!("socket_mode = \"{mode}\""))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("socket_mode") && err.contains("use 0600 or 0660"),
            "{mode}: {err}"
        );
    }
}

#[test]
fn docker_create_from_names_nodes_or_every_node() {
    let parse = |line: &str| Config::parse(&format!("{line}\n{GOOD}"), Path::new("/etc/berth"));
    let none = parse("").unwrap().docker_create_from;
    assert!(!none.allows("node-a"), "no node by default");
    let some = parse("docker_create_from = [\"node-b\"]")
        .unwrap()
        .docker_create_from;
    assert!(some.allows("node-b") && !some.allows("node-c"));
    let every = parse("docker_create_from = [\"*\"]").unwrap().docker_create_from;
    assert!(every.allows("node-c"));
    for bad in [
        "docker_create_from = [\"*\", \"node-b\"]",
        "docker_create_from = [\"../x\"]",
    ] {
        assert_eq!(parse(bad).unwrap_err().key(), Some("docker_create_from"), "{bad}");
    }
}

#[test]
fn docker_secrets_are_none_by_default() {
    let parse = |line: &str| Config::parse(&format!("{line}\n{GOOD}"), Path::new("/etc/berth"));
    assert!(
        !parse("").unwrap().docker_secrets.allows("db"),
        "no secret by default"
    );
    let some = parse("docker_secrets = [\"docker-db\"]").unwrap().docker_secrets;
    assert!(some.allows("docker-db") && !some.allows("db"));
    let err = parse("docker_secrets = [\"*\", \"db\"]").unwrap_err();
    assert_eq!(err.key(), Some("docker_secrets"));
}

#[test]
fn namespace_secrets_are_given_per_namespace_and_checked() {
    let parse = |line: &str| Config::parse(&format!("{line}\n{GOOD}"), Path::new("/etc/berth"));
    assert!(parse("").unwrap().namespace_secrets.is_empty());
    let given = parse("namespace_secrets = { team-a = [\"db-a\"], ops = [\"*\"] }")
        .unwrap()
        .namespace_secrets;
    assert!(given["team-a"].allows("db-a") && !given["team-a"].allows("db-b"));
    assert!(given["ops"].allows("anything"));
    let err = parse("namespace_secrets = { Team_A = [\"db\"] }").unwrap_err();
    assert_eq!(err.key(), Some("namespace_secrets.Team_A"));
    let err = parse("namespace_secrets = { a = [\"*\", \"db\"] }").unwrap_err();
    assert_eq!(err.key(), Some("namespace_secrets.a"));
}

#[test]
fn docker_namespaces_name_a_namespace_per_node_and_default_to_default() {
    let parse = |line: &str| Config::parse(&format!("{line}\n{GOOD}"), Path::new("/etc/berth"));
    assert_eq!(
        parse("").unwrap().docker_namespaces.of("node-a").as_str(),
        "default"
    );
    let named = parse("docker_namespaces = { node-b = \"team-b\", \"*\" = \"docker\" }")
        .unwrap()
        .docker_namespaces;
    assert_eq!(named.of("node-b").as_str(), "team-b");
    assert_eq!(named.of("node-c").as_str(), "docker");
    let err = parse("docker_namespaces = { node-b = \"Team_B\" }").unwrap_err();
    assert_eq!(err.key(), Some("docker_namespaces.node-b"));
    let err = parse("docker_namespaces = { \"../x\" = \"team-b\" }").unwrap_err();
    assert_eq!(err.key(), Some("docker_namespaces.../x"));
}

/// The keys the parsers take: every field of the `Raw*` structs of this
/// crate and of `agent.toml`'s, under its serde name.
fn parsed_keys() -> std::collections::BTreeSet<String> {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut keys = std::collections::BTreeSet::new();
    for file in [
        "src/lib.rs",
        "src/console.rs",
        "src/store.rs",
        "src/docker.rs",
        "src/guard.rs",
        "src/oci.rs",
        "src/policy_set.rs",
        "../agent/src/config.rs",
    ] {
        let text = std::fs::read_to_string(here.join(file)).unwrap();
        let mut inside = false;
        let mut rename: Option<String> = None;
        for line in text.lines().map(str::trim) {
            if line.contains("struct Raw") && line.ends_with('{') {
                inside = true;
                continue;
            }
            if !inside {
                continue;
            }
            if line == "}" {
                inside = false;
                continue;
            }
            if let Some(r) = line.split("rename = \"").nth(1) {
                rename = r.split('"').next().map(str::to_string);
                continue;
            }
            let field = line.trim_start_matches("pub(crate) ").trim_start_matches("pub ");
            if let Some((name, _)) = field.split_once(':')
                && name.chars().all(|c| c.is_ascii_lowercase() || c == '_')
            {
                keys.insert(rename.take().unwrap_or_else(|| name.to_string()));
            }
        }
    }
    keys
}

#[test]
fn the_configuration_reference_names_every_key_and_no_other() {
    let page = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/src/reference/config.md");
    let page = std::fs::read_to_string(page).unwrap();
    // Keys are table rows (`| `key` |`); tables are headings (`[store]`, `[[plugin]]`).
    let rows = page.lines().filter_map(|l| l.strip_prefix("| `"));
    let tables = page
        .lines()
        .filter(|l| l.starts_with('#'))
        .filter_map(|l| l.split("`[").nth(1))
        .map(|t| t.trim_start_matches('['));
    let documented: std::collections::BTreeSet<String> = rows
        .chain(tables)
        .filter_map(|l| l.split(['`', ']']).next())
        .map(str::to_string)
        .collect();
    let parsed = parsed_keys();
    assert!(parsed.len() > 50, "the parsers' keys were not found: {parsed:?}");
    let missing: Vec<_> = parsed.difference(&documented).collect();
    assert!(
        missing.is_empty(),
        "keys missing from docs/src/reference/config.md: {missing:?}"
    );
    let unknown: Vec<_> = documented.difference(&parsed).collect();
    assert!(
        unknown.is_empty(),
        "keys the reference names but no parser takes: {unknown:?}"
    );
}

/// `[console]` is new: a config without it (every config before) has no
/// console; with it, an address is required and the names default as the
/// API's do.
#[test]
fn the_console_is_off_unless_given_an_address() {
    let base = Path::new("/etc/berth");
    assert_eq!(Config::parse(GOOD, base).unwrap().console, None);
    let on = Config::parse(&format!("{GOOD}[console]\naddress = \"127.0.0.1:7445\"\n"), base).unwrap();
    let console = on.console.unwrap();
    assert_eq!(console.address, "127.0.0.1:7445".parse().unwrap());
    assert!(
        console.names.contains(&"localhost".to_string()),
        "{:?}",
        console.names
    );
    let named = Config::parse(
        &format!("{GOOD}[console]\naddress = \"0.0.0.0:7445\"\nnames = [\"berth.example\"]\n"),
        base,
    )
    .unwrap();
    assert_eq!(named.console.unwrap().names, ["berth.example"]);
    assert_eq!(console.identity, None, "a certificate from the API's CA");
    let own = Config::parse(
        &format!(
            "{GOOD}[console]\naddress = \"127.0.0.1:7445\"\ncertificate = \"c.pem\"\nkey = \"/k/c-key.pem\"\n"
        ),
        base,
    )
    .unwrap();
    let identity = own.console.unwrap().identity.unwrap();
    assert_eq!(identity.certificate, base.join("c.pem"), "relative to the config");
    assert_eq!(identity.key, Path::new("/k/c-key.pem"));
    for (table, key) in [
        ("[console]\nnames = [\"x\"]\n", "console"),
        ("[console]\naddress = \"here\"\n", "console.address"),
        (
            "[console]\naddress = \"127.0.0.1:7445\"\ncertificate = \"c.pem\"\n",
            "go together",
        ),
        (
            "[console]\naddress = \"127.0.0.1:7445\"\nkey = \"k.pem\"\n",
            "go together",
        ),
    ] {
        let err = Config::parse(&format!("{GOOD}{table}"), base)
            .unwrap_err()
            .to_string();
        assert!(err.contains(key), "{err}");
    }
}
