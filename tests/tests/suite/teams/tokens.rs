//! ACL tokens on the TLS API of one server: each team to what its
//! policies grant, secrets per namespace, contexts, restarts and the audit log.

use super::*;

/// Two teams, a read-only on-call token and a CI token over the TLS API:
/// each reaches what its policies grant and nothing else, whatever name it
/// guesses; a refusal names the capability and the namespace; a forged,
/// cut or revoked token is refused; tokens outlive a restart; the audit
/// log has a line per change and refusal, and no secret anywhere.
#[test]
fn tokens_keep_each_team_to_what_its_policies_grant() {
    let port = free_port();
    let extra = format!(
        "api_address = \"127.0.0.1:{port}\"\nnamespace_secrets = {{ team-a = [\"db-a\"], team-b = [\"db-b\"] }}"
    );
    let mut c = Cluster::start(ClusterSpec {
        extra: &extra,
        ..ClusterSpec::default()
    });
    let root = secret(&c.ok(&["acl", "bootstrap", "-o", "json"]));
    let again = c.berth(&["acl", "bootstrap"]);
    assert!(!again.status.success() && texts(&again).1.contains("bootstrapped already"));
    for team in ["team-a", "team-b"] {
        apply(
            &c,
            team,
            &format!("[namespace.{team}]\ncapabilities = [\"list\", \"read\", \"write\", \"mount\"]\n"),
        );
    }
    apply(
        &c,
        "on-call",
        "node = \"read\"\n[namespace.\"*\"]\ncapabilities = [\"list\", \"read\"]\n",
    );
    apply(
        &c,
        "ci",
        "[namespace.team-a]\ncapabilities = [\"write\", \"read\"]\n",
    );
    let (a, b) = (token(&c, "alice", "team-a"), token(&c, "bob", "team-b"));
    let (on_call, ci) = (token(&c, "on-call", "on-call"), token(&c, "ci", "ci"));

    let create = |tok: &str, ns: &str, name: &str| {
        let args = [
            "volume",
            "-n",
            ns,
            "create",
            name,
            "--plugin",
            "hostpath",
            "--requisite",
            "zone=a",
            "--wait",
        ];
        remote(&c, port, tok, &args)
    };
    assert!(create(&a, "team-a", "data").status.success());
    assert!(create(&b, "team-b", "data").status.success());
    let get = |tok: &str, ns: &str| -> Value {
        serde_json::from_str(&remote_ok(
            &c,
            port,
            tok,
            &["volume", "-n", ns, "get", "data", "-o", "json"],
        ))
        .unwrap()
    };
    let (va, vb) = (get(&a, "team-a"), get(&b, "team-b"));
    assert_ne!(va["id"], vb["id"]);

    // Team A reaches nothing of team B's, by any call.
    for args in [
        &["volume", "-n", "team-b", "get", "data"][..],
        &["volume", "-n", "team-b", "list"],
        &["volume", "-n", "team-b", "publish", "data", "--node", "node-a"],
        &["volume", "-n", "team-b", "delete", "data"],
        &["snapshot", "-n", "team-b", "create", "snap", "--volume", "data"],
    ] {
        let e = refused(&c, port, &a, args);
        assert!(
            e.contains("PERMISSION_DENIED") && e.contains("in namespace \"team-b\""),
            "{args:?}: {e}"
        );
        assert!(e.contains("token \"alice\""), "{e}");
    }
    let e = refused(&c, port, &a, &["node", "list"]);
    assert!(e.contains("node = \"read\""), "{e}");
    // A list of every namespace shows a team its own only.
    let every = |token: &str| -> Vec<Value> {
        serde_json::from_str(&remote_ok(
            &c,
            port,
            token,
            &["volume", "-n", "*", "list", "-o", "json"],
        ))
        .unwrap()
    };
    let mine = every(&a);
    assert_eq!(mine.len(), 1, "{mine:?}");
    assert_eq!(mine[0]["namespace"], "team-a");

    // On call reads everything and changes nothing.
    let all = every(&on_call);
    assert_eq!(all.len(), 2);
    remote_ok(&c, port, &on_call, &["node", "list"]);
    for args in [
        &["volume", "-n", "team-a", "delete", "data"][..],
        &["volume", "-n", "team-a", "publish", "data", "--node", "node-a"],
        &["acl", "token", "list"],
    ] {
        assert!(
            refused(&c, port, &on_call, args).contains("PERMISSION_DENIED"),
            "{args:?}"
        );
    }
    assert!(!create(&on_call, "team-a", "ro").status.success());

    // A namespace names only the secrets given to it.
    let with_secret = |name: &str, secret: &str| {
        let args = [
            "volume", "-n", "team-a", "create", name, "--plugin", "hostpath", "--secret", secret,
        ];
        remote(&c, port, &a, &args)
    };
    let e = texts(&with_secret("creds", "db-b")).1;
    assert!(
        e.contains("PERMISSION_DENIED") && e.contains("not given to namespace \"team-a\""),
        "{e}"
    );
    assert!(with_secret("creds", "db-a").status.success());

    // CI creates in team-a only.
    assert!(create(&ci, "team-a", "build-1").status.success());
    let e = texts(&create(&ci, "team-b", "build-1")).1;
    assert!(e.contains("PERMISSION_DENIED") && e.contains("\"write\""), "{e}");

    // Forged, cut and missing tokens are refused; so is a token given to
    // the local socket's client... which needs none.
    let forged = format!(
        "{}{}",
        &a[..a.len() - 1],
        if a.ends_with('0') { '1' } else { '0' }
    );
    for bad in [forged.as_str(), &a[..a.len() / 2], "berthacl.x.y", "not-a-token"] {
        let e = refused(&c, port, bad, &["volume", "-n", "team-a", "list"]);
        assert!(e.contains("UNAUTHENTICATED"), "{bad}: {e}");
    }
    let me: Value =
        serde_json::from_str(&remote_ok(&c, port, &a, &["acl", "token", "self", "-o", "json"])).unwrap();
    assert_eq!(me["name"], "alice");

    // A named context stands for the address, CA, namespace and token.
    let ctx_dir = c.dir.path().join("ctx");
    std::fs::create_dir_all(&ctx_dir).unwrap();
    std::fs::copy(c.dir.path().join("state/api-ca.pem"), ctx_dir.join("ca.pem")).unwrap();
    let token_file = ctx_dir.join("alice.token");
    std::fs::write(&token_file, format!("{a}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(
        ctx_dir.join("contexts.toml"),
        format!(
            "[context.alice]\naddr = \"https://127.0.0.1:{port}\"\ncacert = \"ca.pem\"\nnamespace = \"team-a\"\ntoken_file = \"alice.token\"\n"
        ),
    )
    .unwrap();
    let in_context = |args: &[&str]| {
        Command::new(bin("berth"))
            .args(args)
            .env("BERTH_CONTEXTS", ctx_dir.join("contexts.toml"))
            .env("BERTH_API", c.dir.path().join("no.sock"))
            .stdin(Stdio::null())
            .output()
            .expect("running berth")
    };
    let out = in_context(&["volume", "--context", "alice", "get", "data", "-o", "json"]);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    let got: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        (got["namespace"].as_str(), &got["id"]),
        (Some("team-a"), &va["id"])
    );
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = in_context(&["volume", "--context", "alice", "get", "data"]);
    assert!(texts(&out).1.contains("chmod 600"), "{}", texts(&out).1);
    let out = in_context(&["volume", "--context", "nobody", "list"]);
    assert!(
        texts(&out).1.contains("no context \"nobody\""),
        "{}",
        texts(&out).1
    );

    // Tokens outlive a restart; a revoked one is refused at once.
    c.kill_server(0);
    c.start_server(0);
    // The socket answers first; the TLS API is bound as the term starts.
    wait_for(
        "the TLS API after the restart",
        Duration::from_secs(30),
        || {
            remote(&c, port, &a, &["volume", "-n", "team-a", "get", "data"])
                .status
                .success()
        },
        || c.log(),
    );
    let accessor = me["accessor"].as_str().unwrap();
    remote_ok(&c, port, &root, &["acl", "token", "revoke", accessor]);
    assert!(refused(&c, port, &a, &["volume", "-n", "team-a", "get", "data"]).contains("UNAUTHENTICATED"));

    // The audit log: who did what, refusals included, never a secret.
    let audit = std::fs::read_to_string(c.dir.path().join("state/audit.log")).unwrap();
    let lines: Vec<Value> = audit.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let by = |identity: &str, call: &str, code: &str| {
        lines
            .iter()
            .filter(|l| l["identity"] == identity && l["call"] == call && l["code"] == code)
            .count()
    };
    let alice = format!("token:{accessor}");
    assert_eq!(by(&alice, "CreateVolume", "OK"), 2, "{audit}");
    assert!(lines.iter().any(|l| l["identity"] == alice
        && l["call"] == "DeleteVolume"
        && l["namespace"] == "team-b"
        && l["target"] == "data"
        && l["code"] == "PERMISSION_DENIED"));
    assert!(by("unknown", "ListVolumes", "UNAUTHENTICATED") >= 4);
    assert_eq!(by("management", "BootstrapAcl", "OK"), 1);
    assert!(by("management", "BootstrapAcl", "FAILED_PRECONDITION") >= 1);
    // `audit tail` answers the same lines, over the socket or to a
    // token with `operator` read, and never to one without.
    let tail = c.ok(&["audit", "tail", "--lines", "3", "-o", "json"]);
    let last: Vec<&str> = audit.lines().rev().take(3).collect();
    assert_eq!(tail.lines().rev().collect::<Vec<_>>(), last);
    let shown = c.ok(&["audit", "tail", "--lines", "1000"]);
    assert!(
        shown.contains("PERMISSION_DENIED") && shown.contains("team-b"),
        "{shown}"
    );
    assert!(refused(&c, port, &b, &["audit", "tail"]).contains("operator = \"read\""));
    let log = c.log();
    for text in [&a, &b, &ci, &on_call, &root] {
        let hidden = &text[text.len() - 32..];
        assert!(
            !audit.contains(hidden) && !log.contains(hidden),
            "a secret was written down"
        );
    }
}
