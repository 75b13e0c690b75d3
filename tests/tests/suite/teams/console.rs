//! The web console in a real headless browser (Chromium over WebDriver),
//! against a real server with 10,000 volumes: a person signs in with a
//! token, finds a volume, publishes it and watches its state change with
//! no reload; a read-only token sees no action and is refused one sent
//! anyway. Every page is loaded with no console error, and a screenshot of
//! each is kept (target/console-screenshots), for the book.

use super::*;
use berth_tests::browser::Browser;

/// Volumes in the store while the person looks for one.
const VOLUMES: usize = 10_000;

/// Where the screenshots are kept.
fn shots() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/console-screenshots")
}

fn sign_in(b: &Browser, base: &str, token: &str) {
    b.go(&format!("{base}/"));
    assert!(
        b.url().ends_with("/sign-in"),
        "signed out, / leads to the sign-in: {}",
        b.url()
    );
    b.type_into("#token", token);
    b.click("form[action='/sign-in'] button");
    b.wait_until("signed in", |b| b.url() == format!("{base}/"));
}

/// The page's own errors, none expected.
fn no_console_errors(b: &Browser, page: &str) {
    let errors = b.console_errors();
    assert!(errors.is_empty(), "{page}: the browser's console says {errors:?}");
}

/// A server with the TLS API and the console, its ACLs bootstrapped: the
/// cluster, the API's port and the console's address.
fn with_console() -> (Cluster, u16, String) {
    let (api_port, console_port) = (free_port(), free_port());
    let extra = format!("api_address = \"127.0.0.1:{api_port}\"");
    let table = format!("[console]\naddress = \"127.0.0.1:{console_port}\"\n");
    let c = Cluster::start(ClusterSpec {
        extra: &extra,
        server_tables: vec![(0, &table)],
        ..ClusterSpec::default()
    });
    secret(&c.ok(&["acl", "bootstrap", "-o", "json"]));
    let base = format!("https://127.0.0.1:{console_port}");
    wait_for(
        "the console",
        Duration::from_secs(20),
        || {
            Command::new("curl")
                .args(["-k", "-s", "-f", "-o", "/dev/null", &format!("{base}/sign-in")])
                .status()
                .is_ok_and(|s| s.success())
        },
        || c.log(),
    );
    (c, api_port, base)
}

/// How the audit log names `token`'s calls.
fn audited_as(c: &Cluster, api_port: u16, token: &str) -> String {
    let me: Value = serde_json::from_str(&remote_ok(
        c,
        api_port,
        token,
        &["acl", "token", "self", "-o", "json"],
    ))
    .unwrap();
    format!("token:{}", me["accessor"].as_str().unwrap())
}

#[test]
fn a_person_finds_publishes_and_watches_a_volume_and_a_reader_may_only_look() {
    let (c, api_port, base) = with_console();
    apply(
        &c,
        "operator",
        "node = \"read\"\nplugin = \"read\"\n[namespace.default]\ncapabilities = [\"list\", \"read\", \"write\", \"mount\"]\n",
    );
    apply(
        &c,
        "reader",
        "[namespace.default]\ncapabilities = [\"list\", \"read\"]\n",
    );
    let (operator, reader) = (token(&c, "olga", "operator"), token(&c, "rita", "reader"));

    // 10,000 volumes, recorded (CreateVolume goes on behind).
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async { berth_tests::api_load::create(&c.client(), VOLUMES).await });

    let b = Browser::start(&shots());
    b.go(&format!("{base}/"));
    b.screenshot("sign-in");
    no_console_errors(&b, "sign-in");
    // A wrong token is refused, in words.
    b.type_into("#token", "berth-not-a-token");
    b.click("form[action='/sign-in'] button");
    b.wait_until("the refusal", |b| !b.all(".refusal").is_empty());
    assert!(b.text(".refusal").contains("token"), "{}", b.text(".refusal"));
    let errors = b.console_errors();
    assert!(
        errors.len() == 1 && errors[0].contains("401"),
        "the refusal is the one error: {errors:?}"
    );

    sign_in(&b, &base, &operator);
    assert_eq!(b.text("#who"), "olga");
    assert_eq!(b.all("table.volumes tbody tr").len(), 50, "a page of the 10,000");
    b.screenshot("volumes");
    no_console_errors(&b, "volumes");
    // What the browser fetched for it: the page and its assets, as sent.
    let weight = b.run(
        "const nav = performance.getEntriesByType('navigation')[0];
         return performance.getEntriesByType('resource')
           .reduce((sum, r) => sum + r.transferSize, nav.transferSize);",
        serde_json::json!([]),
    );
    let weight = weight.as_u64().unwrap();
    println!("the volumes list weighs {weight} bytes with its assets");
    assert!((1_000..300_000).contains(&weight), "{weight} bytes");

    // Read on a phone's width: nothing runs off the side.
    b.resize(390, 844);
    let (wide, window) = (
        b.run(
            "return document.documentElement.scrollWidth;",
            serde_json::json!([]),
        ),
        b.run("return window.innerWidth;", serde_json::json!([])),
    );
    assert!(
        wide.as_u64() <= window.as_u64(),
        "{wide} wide in a window of {window}"
    );
    b.screenshot("volumes-narrow");
    b.resize(1280, 900);

    // Found by part of its name, among 10,000, from the keyboard (Enter sends the search).
    let wanted = berth_tests::api_load::volume(4321);
    b.type_into("#search", "004321\u{E007}");
    b.wait_until("the search's answer", |b| b.url().contains("q=004321"));
    let rows = b.all("table.volumes tbody tr");
    assert_eq!(rows.len(), 1, "one volume's name holds 004321");
    b.click("table.volumes tbody a");
    b.wait_until("the volume's page", |b| b.url().contains("/volume?"));
    assert_eq!(b.text("h1 .name"), wanted);
    b.wait_until("created", |b| b.text("#live dd.state") == "available");
    no_console_errors(&b, "volume");

    // Published on node-a; the page follows the state with no reload.
    assert!(
        b.text("select[name=node]").contains("node-a"),
        "the nodes are offered"
    );
    b.run(
        "document.querySelector('select[name=node]').value = 'node-a';",
        serde_json::json!([]),
    );
    // The page before the click is marked: the page the form's answer
    // loads has no mark.
    b.run("window.berthLeft = true;", serde_json::json!([]));
    b.click("#publish");
    b.wait_until("back on the volume's page", |b| {
        b.url().contains("/volume?")
            && b.run(
                "return window.berthLeft === undefined && document.readyState === 'complete';",
                serde_json::json!([]),
            ) == true
    });
    b.run("window.berthMark = 'not reloaded';", serde_json::json!([]));
    b.wait_until("published, live", |b| b.text("#live dd.state") == "published");
    assert_eq!(
        b.run("return window.berthMark;", serde_json::json!([])),
        "not reloaded",
        "the state changed in place"
    );
    assert!(b.text("#live table.publications").contains("node-a"));
    b.screenshot("volume");
    no_console_errors(&b, "volume, published");
    b.go(&format!("{base}/nodes"));
    assert!(b.text("main table").contains("node-a"));
    b.screenshot("nodes");
    no_console_errors(&b, "nodes");
    // A node's volumes, in every namespace the token may list.
    b.click("table.nodes tbody tr:first-child a");
    b.wait_until("node-a's volumes", |b| b.url().contains("node=node-a"));
    assert_eq!(b.all("table.volumes tbody tr").len(), 1);
    assert!(b.text("table.volumes").contains(&wanted));
    no_console_errors(&b, "node-a's volumes");
    // A conformance report recorded with the server shows beside its plugin.
    let work = c.dir.path().join("check-work");
    std::fs::create_dir_all(&work).unwrap();
    let (controller, node) = (c.controller.endpoint(), c.nodes[0].1.endpoint());
    let check = [
        "plugin",
        "check",
        &controller,
        "--node-endpoint",
        &node,
        "--work-dir",
        work.to_str().unwrap(),
        "--record",
        "hostpath",
    ];
    // Keeping a report takes `plugin` write: olga's read is refused it.
    let denied = refused(&c, api_port, &operator, &check);
    assert!(
        denied.contains("PERMISSION_DENIED") && denied.contains("plugin"),
        "{denied}"
    );
    c.ok(&check);
    b.go(&format!("{base}/plugins"));
    assert!(b.text("table.plugins").contains("hostpath"));
    let check = b.text("table.plugins td.check");
    assert!(
        check.starts_with("passed: ") && check.contains("by management"),
        "{check}"
    );
    b.screenshot("plugins");
    no_console_errors(&b, "plugins");

    // The reader: no action on the page, and one sent anyway is refused by the API.
    b.click(".who button");
    b.wait_until("signed out", |b| b.url().ends_with("/sign-in"));
    sign_in(&b, &base, &reader);
    b.go(&format!("{base}/volume?ns=default&name={wanted}"));
    assert_eq!(b.text("#live dd.state"), "published");
    assert!(b.all("form.action").is_empty(), "a reader is shown no action");
    b.go(&format!("{base}/plugins"));
    assert!(b.text(".refusal").contains("plugin"), "{}", b.text(".refusal"));
    // The page said so; its 403 is the one error in the console.
    assert_eq!(b.console_errors().len(), 1);
    b.go(&format!("{base}/volume?ns=default&name={wanted}"));
    let refused = b.run_async(
        "const done = arguments[arguments.length - 1];
         const csrf = document.querySelector('meta[name=csrf]').content;
         fetch('/volume/unpublish?ns=default&name=' + arguments[0], {
           method: 'POST',
           headers: {'Content-Type': 'application/x-www-form-urlencoded'},
           body: 'csrf=' + encodeURIComponent(csrf) + '&node=node-a',
         }).then(async r => done([r.status, await r.text()]));",
        serde_json::json!([wanted]),
    );
    assert_eq!(refused[0], 403, "refused for who asks");
    assert!(
        refused[1].as_str().unwrap().contains("mount"),
        "the refusal names the capability: {}",
        refused[1]
    );
    // Still published: the refusal changed nothing.
    let v = get(&c, "default", &wanted);
    assert_eq!(v["state"], "published");
    // And the audit log has the refusal, as the reader's.
    let audit = std::fs::read_to_string(c.dir.path().join("state/audit.log")).unwrap();
    let rita = audited_as(&c, api_port, &reader);
    assert!(
        audit
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .any(|l| l["identity"] == rita
                && l["call"] == "UnpublishVolume"
                && l["target"] == wanted.as_str()
                && l["code"] == "PERMISSION_DENIED"),
        "{audit}"
    );
    // A form without its session's check is refused before any call.
    let forged = b.run_async(
        "const done = arguments[arguments.length - 1];
         fetch('/volume/retry?ns=default&name=' + arguments[0], {
           method: 'POST',
           headers: {'Content-Type': 'application/x-www-form-urlencoded'},
           body: 'csrf=guessed',
         }).then(r => done(r.status));",
        serde_json::json!([wanted]),
    );
    assert_eq!(forged, 403);
    // Another site's page may neither act nor sign a browser in: its Origin is refused.
    for path in ["/sign-in", "/volume/retry?ns=default&name=x"] {
        let out = std::process::Command::new("curl")
            .args([
                "-k",
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "-H",
                "Origin: https://elsewhere.example",
            ])
            .args([
                "--data-urlencode",
                &format!("token={operator}"),
                &format!("{base}{path}"),
            ])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "403", "{path}");
    }
}

/// Takes the console's "are you sure?" for yes, as a person clicking OK.
fn say_yes(b: &Browser) {
    b.run("window.confirm = () => true;", serde_json::json!([]));
}

/// What an on-call person does from the console, each through the API as
/// their token: make a volume, grow it, snapshot it, find it by label,
/// drain and undrain a node, roll the policy set back, and read the audit
/// log, where each of these is theirs. A size that is not one is refused in
/// words before any call.
#[test]
fn an_operator_creates_grows_snapshots_drains_and_rolls_back_from_the_console() {
    let (c, api_port, base) = with_console();
    apply(
        &c,
        "on-call",
        "node = \"write\"\nplugin = \"read\"\npolicy = \"write\"\noperator = \"read\"\n\
         [namespace.default]\ncapabilities = [\"list\", \"read\", \"write\", \"mount\"]\n",
    );
    let on_call = token(&c, "oscar", "on-call");
    // A second version of the policy set, so that there is one to return to.
    let set = c.dir.path().join("set.toml");
    std::fs::write(
        &set,
        format!(
            "[[policy]]\nmodule = \"{}\"\nsettings = {{ prefix = \"set\" }}\n",
            berth_tests::guest("berth_naming_guest").display()
        ),
    )
    .unwrap();
    c.ok(&["policy", "apply", set.to_str().unwrap()]);

    let b = Browser::start(&shots());
    sign_in(&b, &base, &on_call);

    // A size that is not one: refused on the page, nothing made.
    b.click("details.create summary");
    b.type_into("details.create input[name=name]", "incident");
    b.type_into("details.create input[name=size]", "lots");
    b.click("#create");
    b.wait_until("the refusal", |b| !b.all(".refusal").is_empty());
    assert!(b.text(".refusal").contains("size"), "{}", b.text(".refusal"));
    assert!(c.ok(&["volume", "list"]).lines().count() == 1, "nothing was made");
    b.console_errors();

    // Made from the list's form, with a label; its page shows its decisions.
    b.type_into("details.create input[name=name]", "incident");
    b.type_into("details.create input[name=size]", "1GiB");
    b.type_into("details.create input[name=labels]", "team=db");
    b.screenshot("create");
    b.click("#create");
    b.wait_until("the new volume's page", |b| b.url().contains("name=incident"));
    b.wait_until("created", |b| b.text("#live dd.state") == "available");
    let decisions = b.text("#live table.decisions");
    assert!(
        decisions.contains("naming") && decisions.contains("set-"),
        "{decisions}"
    );
    assert_eq!(b.text("#live dd.labels"), "team=db");
    no_console_errors(&b, "a new volume");

    // Grown, and the page follows.
    b.type_into("input[name=size]", "2GiB");
    b.click("#expand");
    b.wait_until("grown, live", |b| b.text("#live dd.capacity") == "2GiB");
    // A snapshot of it, listed on its page.
    b.type_into("input[name=snapshot]", "before-fix");
    b.click("#snapshot");
    b.wait_until("the snapshot listed, ready", |b| {
        b.go(&format!("{base}/volume?ns=default&name=incident"));
        b.text("table.snapshots").contains("before-fix") && b.text("table.snapshots").contains("ready")
    });
    b.screenshot("volume-decisions");
    no_console_errors(&b, "volume, grown and snapshotted");

    // Found by its label among others.
    c.ok(&[
        "volume", "create", "other", "--plugin", "hostpath", "--size", "1GiB",
    ]);
    b.go(&format!("{base}/?ns=default&label=team%3Ddb"));
    assert_eq!(b.all("table.volumes tbody tr").len(), 1);
    assert!(b.text("table.volumes").contains("incident"));

    // node-a drained from the nodes page, then taken back.
    b.go(&format!("{base}/nodes"));
    say_yes(&b);
    b.click("table.nodes button.drain");
    b.wait_until("draining", |b| b.text("table.nodes button.drain") == "Undrain");
    let nodes: Value = serde_json::from_str(&c.ok(&["node", "list", "-o", "json"])).unwrap();
    assert_eq!(nodes[0]["state"], "ready (draining)", "{nodes}");
    b.screenshot("nodes-draining");
    b.click("table.nodes button.drain");
    b.wait_until("back in placement", |b| {
        b.text("table.nodes button.drain") == "Drain"
    });
    no_console_errors(&b, "nodes");

    // The policy set: version 2 in service; back to version 1 from its history.
    b.click("nav a[href='/policy']");
    b.wait_until("the policy page", |b| b.url().ends_with("/policy"));
    assert_eq!(b.text("dd.version"), "2");
    assert!(b.text("table.modules").contains("sha256:"), "modules by digest");
    assert_eq!(
        b.text("table.modules td.signed"),
        "not checked",
        "no [policy_trust] here: no signature checked"
    );
    b.screenshot("policy");
    say_yes(&b);
    b.click("table.history button.rollback");
    b.wait_until("rolled back", |b| b.text("dd.version") == "3");
    let status: Value = serde_json::from_str(&c.ok(&["policy", "status", "-o", "json"])).unwrap();
    assert_eq!(status["version"], 3);
    c.ok(&[
        "volume", "create", "after", "--plugin", "hostpath", "--size", "1GiB",
    ]);
    let after = get(&c, "default", "after");
    assert!(
        after["csi_name"].as_str().unwrap().starts_with("pv-"),
        "version 1's naming again: {after}"
    );
    no_console_errors(&b, "policy");

    // The audit log has each of these, as oscar's.
    b.click("nav a[href='/audit']");
    b.wait_until("the audit page", |b| b.url().ends_with("/audit"));
    let audit = b.text("table.audit");
    let who = audited_as(&c, api_port, &on_call);
    for call in [
        "CreateVolume",
        "ExpandVolume",
        "CreateSnapshot",
        "DrainNode",
        "RollbackPolicy",
    ] {
        assert!(
            audit.lines().any(|l| l.contains(call) && l.contains(&who)),
            "{call} by {who}:\n{audit}"
        );
    }
    b.screenshot("audit");
    no_console_errors(&b, "audit");
}

/// The console served with a certificate of the operator's own: a client
/// that trusts that certificate alone (not `api-ca.pem`) reaches it. A key
/// every user may read is refused at start, naming the file.
#[test]
fn the_console_serves_a_certificate_of_the_operators_own() {
    let dir = berth_tests::test_dir();
    let (cert, key) = (dir.path().join("console.pem"), dir.path().join("console-key.pem"));
    let made = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ])
        .args([
            "-days",
            "1",
            "-subj",
            "/CN=console",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let port = free_port();
    let table = format!(
        "[console]\naddress = \"127.0.0.1:{port}\"\ncertificate = \"{}\"\nkey = \"{}\"\n",
        cert.display(),
        key.display()
    );
    let mut c = Cluster::start(ClusterSpec {
        server_tables: vec![(0, &table)],
        ..ClusterSpec::default()
    });
    let reach = |ca: &std::path::Path| {
        let out = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert"])
            .arg(ca)
            .arg(format!("https://127.0.0.1:{port}/sign-in"))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    // The console comes up beside the API, maybe after it.
    wait_for(
        "the console, trusted as the operator's own",
        Duration::from_secs(20),
        || reach(&cert) == "200",
        || c.log(),
    );
    let api_ca = c.store_path().with_file_name("api-ca.pem");
    assert_eq!(reach(&api_ca), "000", "not a certificate of the API's CA");

    // A key every user may read: the server does not start, and says which file.
    c.kill_serve();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let serve = Command::new(bin("berth"))
        .args(["serve", "--config"])
        .arg(&c.config)
        .output()
        .unwrap();
    let (_, stderr) = texts(&serve);
    assert!(!serve.status.success());
    assert!(
        stderr.contains(&key.display().to_string()) && stderr.contains("chmod o-r"),
        "{stderr}"
    );
}
