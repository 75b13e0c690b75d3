//! Policy modules in OCI registries, against a real registry
//! (`docker-registry` on loopback): push and pull by digest, TLS with a
//! private CA and a password, tampered bytes refused, and `berth serve`
//! running a module pinned by digest, from its cache once fetched.

use std::path::Path;
use std::time::Duration;

use berth_tests::{Cluster, ClusterSpec, RegistryServer, berth, guest, openssl_keys, test_dir, texts};
use serde_json::Value;

#[test]
fn a_module_pushed_is_pulled_back_byte_for_byte_by_tag_and_by_digest() {
    let registry = RegistryServer::start();
    let module = guest("berth_naming_guest");
    let bytes = std::fs::read(&module).unwrap();
    let pushed = registry.push(&module, "berth/naming:v1");
    let pinned = pushed["reference"].as_str().unwrap().to_string();
    let digest = pushed["digest"].as_str().unwrap().to_string();
    assert_eq!(
        pinned,
        format!("oci://{}/berth/naming@{digest}", registry.address)
    );
    assert_eq!(pushed["size"], bytes.len());

    let dir = test_dir();
    let file = dir.path().join("naming.wasm");
    let by_tag = format!("oci://{}/berth/naming:v1", registry.address);
    let pulled = registry.policy_json(&["pull", &by_tag, "--to", &file.display().to_string()]);
    assert_eq!(
        pulled["reference"],
        pinned.as_str(),
        "a tag resolves to the digest pushed"
    );
    assert_eq!(std::fs::read(&file).unwrap(), bytes);

    // By digest, into an OCI image layout for a site without a registry.
    let layout = dir.path().join("layout");
    std::fs::create_dir(&layout).unwrap();
    registry.policy_json(&["pull", &pinned, "--to", &layout.display().to_string()]);
    let index: Value = serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    assert_eq!(index["manifests"][0]["digest"], digest.as_str());
    let digest = berth::oci::Digest::parse(&digest).unwrap();
    assert_eq!(
        &berth::oci::layout::load(&layout, &digest).unwrap()[..],
        &bytes[..]
    );

    // The artifact is the ecosystem's: its manifest says so.
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(layout.join("blobs/sha256").join(digest.hex())).unwrap())
            .unwrap();
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.wasm.config.v0+json"
    );
    assert_eq!(manifest["layers"][0]["mediaType"], "application/wasm");

    // What is not a policy module is not pushed.
    let not_policy = dir.path().join("not.wasm");
    std::fs::write(&not_policy, b"\0asm\x01\0\0\0").unwrap();
    let out = registry.policy(&[
        "push",
        &not_policy.display().to_string(),
        &format!("oci://{}/x:v1", registry.address),
    ]);
    let (_, stderr) = texts(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("does not load as a policy module"), "{stderr}");
}

#[test]
fn blobs_a_registry_redirects_elsewhere_are_followed_and_checked() {
    let registry = RegistryServer::start_redirecting();
    let module = guest("berth_naming_guest");
    let pushed = registry.push(&module, "berth/naming:v1");
    let layer = pushed["layer"]
        .as_str()
        .unwrap()
        .trim_start_matches("sha256:")
        .to_string();
    let dir = test_dir();
    let file = dir.path().join("naming.wasm");
    let pinned = pushed["reference"].as_str().unwrap();
    registry.policy_json(&["pull", pinned, "--to", &file.display().to_string()]);
    assert_eq!(std::fs::read(&file).unwrap(), std::fs::read(&module).unwrap());
    assert!(
        registry.cdn_log().contains(&format!(
            "GET /docker/registry/v2/blobs/sha256/{}/{layer}/data",
            &layer[..2]
        )),
        "the layer came from the other server: {}",
        registry.cdn_log()
    );

    // What the other server hands out is checked as if the registry had.
    std::fs::write(
        registry.blob_file(pushed["layer"].as_str().unwrap()),
        b"\0asm changed",
    )
    .unwrap();
    let stderr = serve_refuses(
        dir.path(),
        &format!(
            "state = \"state/berth.redb\"\n[[plugin]]\nname = \"p\"\ncontroller = \"unix:///nonexistent.sock\"\n[[policy]]\nname = \"n\"\nmodule = \"{pinned}\"\n[oci]\nplain_http = true\n"
        ),
    );
    assert!(stderr.contains("does not match its digest"), "{stderr}");
}

#[test]
fn a_private_registry_needs_its_ca_and_the_credentials_from_the_docker_config() {
    let registry = RegistryServer::start_private("berth", "s3cret-pw");
    let module = guest("berth_retry_guest");
    let pushed = registry.push(&module, "team/retry:v2");
    let pinned = pushed["reference"].as_str().unwrap().to_string();
    let dir = test_dir();
    let to = dir.path().join("retry.wasm").display().to_string();
    let ca = registry.ca.as_ref().unwrap().display().to_string();

    // Without the credentials: the registry's own refusal, named.
    let none = dir.path().join("empty-docker-config.json").display().to_string();
    let out = berth(&[
        "policy",
        "pull",
        &pinned,
        "--to",
        &to,
        "--ca",
        &ca,
        "--docker-config",
        &none,
    ]);
    let (_, stderr) = texts(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains("answered 401") && stderr.contains(&registry.address),
        "{stderr}"
    );

    // A config that keeps them with a credential helper (what `docker login`
    // writes on most desktops): the refusal says the helper is not run.
    let helpers = dir.path().join("helpers-docker-config.json");
    std::fs::write(
        &helpers,
        format!(
            r#"{{"credsStore": "desktop", "credHelpers": {{"{}": "secretservice"}}}}"#,
            registry.address
        ),
    )
    .unwrap();
    let out = berth(&[
        "policy",
        "pull",
        &pinned,
        "--to",
        &to,
        "--ca",
        &ca,
        "--docker-config",
        &helpers.display().to_string(),
    ]);
    let (_, stderr) = texts(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains("docker-credential-secretservice") && stderr.contains("does not run"),
        "{stderr}"
    );
    assert!(!Path::new(&to).exists());

    // Without its CA, the certificate is not trusted.
    let config = registry.docker_config.as_ref().unwrap().display().to_string();
    let out = berth(&["policy", "pull", &pinned, "--to", &to, "--docker-config", &config]);
    let (_, stderr) = texts(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains(&registry.address) && stderr.contains("certificate"),
        "{stderr}"
    );

    // With both, the module as pushed.
    registry.policy_json(&["pull", &pinned, "--to", &to]);
    assert_eq!(std::fs::read(&to).unwrap(), std::fs::read(&module).unwrap());
}

#[test]
fn a_module_changed_in_the_registry_is_refused_and_nothing_is_written() {
    let registry = RegistryServer::start();
    let module = guest("berth_naming_guest");
    let pushed = registry.push(&module, "berth/naming:v1");
    let layer = pushed["layer"].as_str().unwrap();
    let stored = registry.blob_file(layer);
    let mut bytes = std::fs::read(&stored).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&stored, &bytes).unwrap();

    let dir = test_dir();
    let to = dir.path().join("naming.wasm");
    let out = registry.policy(&[
        "pull",
        pushed["reference"].as_str().unwrap(),
        "--to",
        &to.display().to_string(),
    ]);
    let (_, stderr) = texts(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains("the module") && stderr.contains("does not match its digest"),
        "{stderr}"
    );
    assert!(!to.exists(), "nothing unchecked is written");
}

#[test]
fn serve_runs_a_module_pinned_by_digest_and_keeps_it_when_the_registry_is_gone() {
    let registry = RegistryServer::start();
    let pushed = registry.push(&guest("berth_naming_guest"), "berth/naming:v1");
    let tables = format!(
        "[[policy]]\nmodule = \"{}\"\nsettings = {{ prefix = \"reg\" }}\n[oci]\nplain_http = true\n",
        pushed["reference"].as_str().unwrap()
    );
    let mut c = Cluster::start(ClusterSpec {
        policy_tables: Some(&tables),
        ..ClusterSpec::default()
    });
    c.create_in("first", "zone=a");
    let get = |c: &Cluster, name: &str| -> Value {
        serde_json::from_str(&c.ok(&["volume", "get", name, "-o", "json"])).unwrap()
    };
    assert!(
        get(&c, "first")["csi_name"].as_str().unwrap().starts_with("reg-"),
        "named by the module from the registry"
    );
    assert!(
        c.log().contains("policy module fetched and checked"),
        "{}",
        c.log()
    );

    // A restart needs no registry: the module is in the policy cache, checked again.
    drop(registry);
    c.kill_serve();
    c.start_serve();
    c.create_in("second", "zone=a");
    assert!(
        get(&c, "second")["csi_name"]
            .as_str()
            .unwrap()
            .starts_with("reg-")
    );
}

#[test]
fn serve_refuses_a_module_that_is_not_where_its_digest_says() {
    let registry = RegistryServer::start();
    registry.push(&guest("berth_naming_guest"), "berth/naming:v1");
    let dir = test_dir();
    let wrong = format!(
        "oci://{}/berth/naming@sha256:{}",
        registry.address,
        "0".repeat(64)
    );
    let tag = format!("oci://{}/berth/naming:v1", registry.address);
    for (module, expect) in [
        (wrong.as_str(), "MANIFEST_UNKNOWN"),
        (tag.as_str(), "pin the module by its digest"),
    ] {
        let stderr = serve_refuses(
            dir.path(),
            &format!(
                "state = \"state/berth.redb\"\n[[plugin]]\nname = \"p\"\ncontroller = \"unix:///nonexistent.sock\"\n[[policy]]\nmodule = \"{module}\"\n[oci]\nplain_http = true\n"
            ),
        );
        assert!(stderr.contains(expect), "{module}: {stderr}");
    }
}

/// `berth serve` on `config_text` must stop at start; its stderr.
fn serve_refuses(dir: &Path, config_text: &str) -> String {
    let config = dir.join("berth.toml");
    std::fs::write(&config, config_text).unwrap();
    let mut child = std::process::Command::new(berth_tests::bin("berth"))
        .args(["serve", "--config"])
        .arg(&config)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "serve kept running with {config_text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(!status.success());
    stderr
}

#[test]
fn serve_runs_only_modules_signed_by_a_trusted_key() {
    let registry = RegistryServer::start();
    let dir = test_dir();
    let (key, public) = openssl_keys(dir.path(), "team");
    let (other, _) = openssl_keys(dir.path(), "other");
    let signed = registry.push(&guest("berth_naming_guest"), "berth/naming:v1");
    registry.policy_json(&["sign", signed["reference"].as_str().unwrap(), "--key", &key]);
    // Other content than the signed module: trust follows the digest, as cosign's
    // does, so the same bytes under another name would carry the same signature.
    let unsigned = registry.push(&guest("berth_placement_guest"), "berth/unsigned:v1");
    let foreign = registry.push(&guest("berth_retry_guest"), "berth/foreign:v1");
    registry.policy_json(&["sign", foreign["reference"].as_str().unwrap(), "--key", &other]);

    let trust = format!("[policy_trust]\nkeys = [\"{public}\"]\nrequired = true\n[oci]\nplain_http = true\n");
    for (module, why) in [
        (&unsigned, "it is not signed, and signatures are required"),
        (&foreign, "no signature by a trusted key"),
    ] {
        let stderr = serve_refuses(
            dir.path(),
            &format!(
                "state = \"state/berth.redb\"\n[[plugin]]\nname = \"p\"\ncontroller = \"unix:///nonexistent.sock\"\n[[policy]]\nname = \"team-naming\"\nmodule = \"{}\"\n{trust}",
                module["reference"].as_str().unwrap()
            ),
        );
        assert!(stderr.contains("team-naming") && stderr.contains(why), "{stderr}");
    }
    assert!(
        !dir.path().join("state/policy-modules/index.json").exists(),
        "a refused module never enters the cache"
    );

    let tables = format!(
        "[[policy]]\nmodule = \"{}\"\nsettings = {{ prefix = \"signed\" }}\n{trust}",
        signed["reference"].as_str().unwrap()
    );
    let c = Cluster::start(ClusterSpec {
        policy_tables: Some(&tables),
        ..ClusterSpec::default()
    });
    c.create_in("v", "zone=a");
    let v: Value = serde_json::from_str(&c.ok(&["volume", "get", "v", "-o", "json"])).unwrap();
    assert!(v["csi_name"].as_str().unwrap().starts_with("signed-"));
    assert!(c.log().contains("policy module signature checked"), "{}", c.log());

    // Applying the unsigned module is refused the same way, and the set in service stays.
    let version = |c: &Cluster| -> Value {
        serde_json::from_str::<Value>(&c.ok(&["policy", "status", "-o", "json"])).unwrap()["version"].clone()
    };
    let before = version(&c);
    let file = c.dir.path().join("unsigned.toml");
    std::fs::write(
        &file,
        format!(
            "[[policy]]\nmodule = \"{}\"\n",
            unsigned["reference"].as_str().unwrap()
        ),
    )
    .unwrap();
    let out = c.berth(&["policy", "apply", &file.display().to_string()]);
    let (_, stderr) = texts(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains("it is not signed, and signatures are required"),
        "{stderr}"
    );
    assert_eq!(version(&c), before);
    c.create_in("still", "zone=a");
    let v: Value = serde_json::from_str(&c.ok(&["volume", "get", "still", "-o", "json"])).unwrap();
    assert!(v["csi_name"].as_str().unwrap().starts_with("signed-"));
}

/// `berth policy apply` takes a module named by a registry tag, as its
/// help and the book's walk say: the tag is resolved to its digest, and the
/// set is stored pinned by it (`berth.toml` itself still needs a digest).
#[test]
fn apply_resolves_a_tag_to_the_digest_it_names_and_stores_that() {
    let registry = RegistryServer::start();
    let pushed = registry.push(&guest("berth_naming_guest"), "berth/naming:v1");
    let c = Cluster::start(ClusterSpec {
        policy_tables: Some("[oci]\nplain_http = true\n"),
        ..ClusterSpec::default()
    });
    let set = c.dir.path().join("policies.toml");
    std::fs::write(
        &set,
        format!(
            "[[policy]]\nmodule = \"oci://{}/berth/naming:v1\"\nsettings = {{ prefix = \"tagged\" }}\n",
            registry.address
        ),
    )
    .unwrap();
    c.ok(&["policy", "apply", &set.display().to_string()]);
    let status: Value = serde_json::from_str(&c.ok(&["policy", "status", "-o", "json"])).unwrap();
    assert_eq!(status["modules"][0]["module"], pushed["reference"], "{status:#}");
    c.create_in("v", "zone=a");
    let v: Value = serde_json::from_str(&c.ok(&["volume", "get", "v", "-o", "json"])).unwrap();
    assert!(v["csi_name"].as_str().unwrap().starts_with("tagged-"), "{v:#}");
}

/// A registry on loopback that speaks plain HTTP is reached without
/// `--plain-http`, as Docker and crane reach one: HTTPS is tried first.
#[test]
fn a_plain_http_registry_on_loopback_needs_no_flag() {
    let registry = RegistryServer::start();
    let module = guest("berth_naming_guest");
    let out = berth_tests::berth(&[
        "policy",
        "push",
        &module.display().to_string(),
        &format!("oci://{}/berth/naming:v1", registry.address),
        "-o",
        "json",
    ]);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    let pushed: Value = serde_json::from_str(&stdout).unwrap();
    let dir = test_dir();
    let file = dir.path().join("naming.wasm");
    let out = berth_tests::berth(&[
        "policy",
        "pull",
        pushed["reference"].as_str().unwrap(),
        "--to",
        &file.display().to_string(),
    ]);
    assert!(out.status.success(), "{:?}", texts(&out));
    assert_eq!(std::fs::read(&file).unwrap(), std::fs::read(&module).unwrap());

    // Asked for HTTPS (a CA given), it says once why it cannot be.
    let out = berth_tests::berth(&[
        "policy",
        "pull",
        pushed["reference"].as_str().unwrap(),
        "--to",
        &file.display().to_string(),
        "--ca",
        "/etc/ssl/certs/ca-certificates.crt",
    ]);
    let (_, stderr) = texts(&out);
    assert!(!out.status.success());
    assert_eq!(stderr.matches("does not speak TLS").count(), 1, "{stderr}");
}
