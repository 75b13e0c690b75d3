//! Signatures under a hostile registry writer (one who can push but holds
//! no trusted key): a signature image flooded with junk layers is read
//! within bounds, and junk beside a valid signature does not hide it. Real
//! registry (`docker-registry`), signatures made by Berth's signer and
//! stored, then tampered with, through the registry's own HTTP API.

use berth_tests::{Cluster, ClusterSpec, RegistryServer, guest, openssl_keys, test_dir, texts};
use serde_json::{Value, json};

/// The signature image of `digest` in `repo`, as Berth's signer stored it.
fn signature_image(registry: &RegistryServer, repo: &str, digest: &str) -> (String, Value) {
    let tag = format!("sha256-{}.sig", digest.trim_start_matches("sha256:"));
    let (status, body, _) = registry.http("GET", &format!("/v2/{repo}/manifests/{tag}"), b"", "");
    assert_eq!(status, 200);
    (tag, serde_json::from_slice(&body).unwrap())
}

/// A junk layer: `payload`'s digest, claiming `size`, with a signature that
/// no trusted key made.
fn junk(payload: &str, size: usize) -> Value {
    json!({
        "mediaType": "application/vnd.dev.cosign.simplesigning.v1+json",
        "digest": payload,
        "size": size,
        "annotations": {"dev.cosignproject.cosign/signature": "MEUCIQDjunkjunkjunkjunkjunkjunkjunkjunkjunkjunkjunkjunkjunk="},
    })
}

/// How many times the registry served blob `digest`.
fn served(registry: &RegistryServer, digest: &str) -> usize {
    registry
        .log()
        .lines()
        .filter(|l| l.contains("response completed") && l.contains(&format!("blobs/{digest}")))
        .count()
}

#[test]
fn a_signature_image_flooded_with_junk_is_read_within_bounds_and_junk_never_hides_a_valid_one() {
    let registry = RegistryServer::start();
    let dir = test_dir();
    let (key, public) = openssl_keys(dir.path(), "team");
    let pushed = registry.push(&guest("berth_naming_guest"), "berth/naming:v1");
    let digest = pushed["digest"].as_str().unwrap();
    let reference = format!("oci://{}/berth/naming:v1", registry.address);
    // A tag is resolved once, and the digest signed is the one said.
    let signed = registry.policy_json(&["sign", &reference, "--key", &key]);
    assert_eq!(signed["digest"], digest);
    let (tag, mut image) = signature_image(&registry, "berth/naming", digest);
    let valid = image["layers"][0].clone();
    let filler = registry.upload("berth/naming", &vec![b'x'; 64 << 10]);
    let verify = || {
        let out = registry.policy(&["verify", &reference, "--key", &public, "-o", "json"]);
        let (stdout, stderr) = texts(&out);
        (out.status.success(), stdout, stderr)
    };

    // One oversized junk layer first, then the valid signature: it passes,
    // and the junk is never fetched.
    image["layers"] = json!([junk(&filler, 100 << 20), valid.clone()]);
    registry.put_manifest("berth/naming", &tag, &image);
    let before = served(&registry, &filler);
    let (ok, stdout, stderr) = verify();
    assert!(ok, "{stderr}");
    assert!(stdout.contains(&public), "{stdout}");
    assert_eq!(
        served(&registry, &filler),
        before,
        "a layer over the payload limit is not fetched"
    );

    // 2,000 junk layers of 64 KiB each (125 MiB to read), the valid one last:
    // at most 32 are read, and the refusal says what was found.
    let mut layers: Vec<Value> = (0..2000).map(|_| junk(&filler, 64 << 10)).collect();
    layers.push(valid.clone());
    image["layers"] = Value::Array(layers.clone());
    registry.put_manifest("berth/naming", &tag, &image);
    let before = served(&registry, &filler);
    let (ok, _, stderr) = verify();
    assert!(!ok);
    assert!(
        stderr.contains("a signature by a key not trusted ×32")
            && stderr.contains("1969 more signature layers not read"),
        "{stderr}"
    );
    let fetched = served(&registry, &filler) - before;
    assert!((1..=32).contains(&fetched), "{fetched} junk payloads fetched");

    // The same flood after the valid signature: found at once.
    layers.rotate_right(1);
    image["layers"] = Value::Array(layers);
    registry.put_manifest("berth/naming", &tag, &image);
    let before = served(&registry, &filler);
    let (ok, _, stderr) = verify();
    assert!(ok, "{stderr}");
    assert_eq!(
        served(&registry, &filler),
        before,
        "reading stops at the first valid signature"
    );

    // Signing again keeps what could be signatures, the newest, within the bound.
    registry.policy_json(&["sign", &reference, "--key", &key]);
    let (_, image) = signature_image(&registry, "berth/naming", digest);
    let kept = image["layers"].as_array().unwrap();
    assert_eq!(kept.len(), 32, "{} layers kept", kept.len());
    let (ok, _, stderr) = verify();
    assert!(ok, "{stderr}");
}

/// A key removed from `[policy_trust]` is distrusted at the next reload: a
/// set signed only by it is refused with the modules in service kept (and
/// the refusal says what to do); a restart with that set starts, acts on no
/// volume, and takes up the work once a set that verifies is in service.
#[test]
fn a_revoked_key_is_distrusted_on_reload_and_a_restart_waits_for_a_set_that_verifies() {
    let registry = RegistryServer::start();
    let dir = test_dir();
    let (team_key, team) = openssl_keys(dir.path(), "team");
    let (old_key, old) = openssl_keys(dir.path(), "old");
    let pushed = registry.push(&guest("berth_naming_guest"), "berth/naming:v1");
    let reference = pushed["reference"].as_str().unwrap();
    registry.policy_json(&["sign", reference, "--key", &old_key]);
    let tables = format!(
        "[[policy]]\nmodule = \"{reference}\"\nsettings = {{ prefix = \"signed\" }}\n[policy_trust]\nkeys = [\"{team}\", \"{old}\"]\nrequired = true\n[oci]\nplain_http = true\n"
    );
    let mut c = Cluster::start(ClusterSpec {
        policy_tables: Some(&tables),
        ..ClusterSpec::default()
    });
    let name_of = |c: &Cluster, v: &str| -> String {
        let v: Value = serde_json::from_str(&c.ok(&["volume", "get", v, "-o", "json"])).unwrap();
        v["csi_name"].as_str().unwrap().to_string()
    };
    c.create_in("v1", "zone=a");
    assert!(name_of(&c, "v1").starts_with("signed-"));

    // The old key removed: the reload is refused, the module keeps deciding.
    let config = std::fs::read_to_string(&c.config).unwrap();
    let revoked = config.replace(
        &format!("keys = [\"{team}\", \"{old}\"]"),
        &format!("keys = [\"{team}\"]"),
    );
    assert_ne!(config, revoked);
    std::fs::write(&c.config, &revoked).unwrap();
    let out = c.berth(&["policy", "reload"]);
    let (_, stderr) = texts(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains("no signature by a trusted key") && stderr.contains("berth policy rollback"),
        "{stderr}"
    );
    c.create_in("v2", "zone=a");
    assert!(
        name_of(&c, "v2").starts_with("signed-"),
        "the modules in service stay"
    );

    // A restart with that set: the server starts and answers, but acts on nothing.
    c.kill_serve();
    c.start_serve();
    c.ok(&[
        "volume",
        "create",
        "v3",
        "--plugin",
        "hostpath",
        "--requisite",
        "zone=a",
    ]);
    let plugin_before = c.plugin_volumes();
    assert!(c.log().contains("acting on no volume"), "{}", c.log());
    let status: Value = serde_json::from_str(&c.ok(&["volume", "get", "v3", "-o", "json"])).unwrap();
    assert_eq!(status["state"], "pending", "{status:#}");
    assert_eq!(plugin_before, 2);

    // Signed again with a trusted key and reloaded: the work goes on.
    registry.policy_json(&["sign", reference, "--key", &team_key]);
    c.ok(&["policy", "reload"]);
    c.wait_until("v3 to be created", |v| {
        v.iter().any(|x| x["name"] == "v3" && x["state"] == "available")
    });
    assert!(name_of(&c, "v3").starts_with("signed-"));
    assert_eq!(signers(&c), [team], "signed by the key still trusted");
}

/// The trusted keys' files that signed the modules in service, from
/// `policy status` (each module once).
fn signers(c: &Cluster) -> Vec<String> {
    let status: Value = serde_json::from_str(&c.ok(&["policy", "status", "-o", "json"])).unwrap();
    status["policies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["signed_by"].as_str().unwrap_or_default().to_string())
        .filter(|k| !k.is_empty())
        .collect()
}

/// `required = true` covers a module given by path: unsigned, it is refused;
/// signed as `cosign sign-blob` signs (by Berth, or by openssl standing in
/// for another implementation), it goes into service; a file changed after
/// signing is refused.
#[test]
fn required_signatures_cover_module_files() {
    let dir = test_dir();
    let (key, public) = openssl_keys(dir.path(), "team");
    let tables = format!("[policy_trust]\nkeys = [\"{public}\"]\nrequired = true\n");
    let c = Cluster::start(ClusterSpec {
        policy_tables: Some(&tables),
        ..ClusterSpec::default()
    });
    let module = c.dir.path().join("naming.wasm");
    std::fs::copy(guest("berth_naming_guest"), &module).unwrap();
    let set = c.dir.path().join("set.toml");
    std::fs::write(
        &set,
        format!(
            "[[policy]]\nmodule = \"{}\"\nsettings = {{ prefix = \"filed\" }}\n",
            module.display()
        ),
    )
    .unwrap();
    let apply = || {
        let out = c.berth(&["policy", "apply", &set.display().to_string()]);
        let (_, stderr) = texts(&out);
        (out.status.success(), stderr)
    };
    let (ok, stderr) = apply();
    assert!(
        !ok && stderr.contains("it is not signed, and signatures are required"),
        "{stderr}"
    );

    // Signed by openssl over the file's bytes, base64 beside it: taken.
    let der = dir.path().join("sig.der");
    let out = std::process::Command::new("openssl")
        .args(["dgst", "-sha256", "-sign", &key, "-out"])
        .arg(&der)
        .arg(&module)
        .output()
        .unwrap();
    assert!(out.status.success());
    let sig = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        std::fs::read(&der).unwrap(),
    );
    let sig_path = c.dir.path().join("naming.wasm.sig");
    std::fs::write(&sig_path, format!("{sig}\n")).unwrap();
    let (ok, stderr) = apply();
    assert!(ok, "{stderr}");
    c.create_in("v", "zone=a");
    let v: Value = serde_json::from_str(&c.ok(&["volume", "get", "v", "-o", "json"])).unwrap();
    assert!(v["csi_name"].as_str().unwrap().starts_with("filed-"), "{v:#}");
    assert_eq!(
        signers(&c),
        std::slice::from_ref(&public),
        "the module in service says which trusted key signed it"
    );

    // Berth's own signature of a changed file, checked by openssl.
    std::fs::copy(guest("berth_placement_guest"), &module).unwrap();
    let (ok, stderr) = apply();
    assert!(
        !ok && stderr.contains("no signature by a trusted key"),
        "{stderr}"
    );
    let signed = c.ok(&[
        "policy",
        "sign",
        &module.display().to_string(),
        "--key",
        &key,
        "-o",
        "json",
    ]);
    let signed: Value = serde_json::from_str(&signed).unwrap();
    assert_eq!(signed["signatures"], sig_path.display().to_string());
    let sig = std::fs::read_to_string(&sig_path).unwrap();
    std::fs::write(
        &der,
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, sig.trim()).unwrap(),
    )
    .unwrap();
    let out = std::process::Command::new("openssl")
        .args(["dgst", "-sha256", "-verify", &public, "-signature"])
        .arg(&der)
        .arg(&module)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "Verified OK");
}

/// `policy pull --to` writes its file whole through a temporary file of its
/// own, created exclusively: a link planted where one was once written
/// (`<target>.partial`) is never written through.
#[test]
fn a_pull_never_writes_through_a_planted_link() {
    let registry = RegistryServer::start();
    let dir = test_dir();
    let pushed = registry.push(&guest("berth_naming_guest"), "berth/naming:v1");
    let target = dir.path().join("naming.wasm");
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "untouched").unwrap();
    std::os::unix::fs::symlink(&victim, dir.path().join("naming.partial")).unwrap();
    std::os::unix::fs::symlink(&victim, dir.path().join("naming.wasm.partial")).unwrap();
    registry.policy_json(&[
        "pull",
        pushed["reference"].as_str().unwrap(),
        "--to",
        &target.display().to_string(),
    ]);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
    assert_eq!(
        std::fs::read(&target).unwrap(),
        std::fs::read(guest("berth_naming_guest")).unwrap()
    );
}

/// `policy sign --key` takes an EC key as `openssl ecparam -genkey` writes
/// it (SEC 1, after its curve's parameters), as `cosign import-key-pair`
/// does; the signature is checked by openssl with the key's public half.
#[test]
fn a_sec1_ec_key_from_openssl_ecparam_signs() {
    let dir = berth_tests::test_dir();
    let key = dir.path().join("ec.pem");
    let public = dir.path().join("ec.pub");
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl").args(args).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    let (k, p) = (key.display().to_string(), public.display().to_string());
    openssl(&["ecparam", "-name", "prime256v1", "-genkey", "-out", &k]);
    openssl(&["ec", "-in", &k, "-pubout", "-out", &p]);
    assert!(
        std::fs::read_to_string(&key)
            .unwrap()
            .contains("BEGIN EC PRIVATE KEY")
    );

    let module = dir.path().join("naming.wasm");
    std::fs::copy(guest("berth_naming_guest"), &module).unwrap();
    let out = berth_tests::berth(&["policy", "sign", &module.display().to_string(), "--key", &k]);
    let (stdout, stderr) = berth_tests::texts(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    let sig = std::fs::read_to_string(dir.path().join("naming.wasm.sig")).unwrap();
    let der = dir.path().join("sig.der");
    std::fs::write(
        &der,
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, sig.trim()).unwrap(),
    )
    .unwrap();
    let out = std::process::Command::new("openssl")
        .args(["dgst", "-sha256", "-verify", &p, "-signature"])
        .arg(&der)
        .arg(&module)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "Verified OK");

    // A key of another curve is refused, saying so.
    openssl(&["ecparam", "-name", "secp384r1", "-genkey", "-out", &k]);
    let out = berth_tests::berth(&["policy", "sign", &module.display().to_string(), "--key", &k]);
    let (_, stderr) = berth_tests::texts(&out);
    assert!(!out.status.success() && stderr.contains("P-256"), "{stderr}");
}

/// `policy sign` takes a reference written as cosign takes it (no
/// `oci://`) when no such file exists, and says so; signing a tag warns that
/// it signs whatever the tag names now, and names the digest to sign by.
#[test]
fn sign_takes_a_cosign_style_reference_and_warns_about_a_tag() {
    let registry = RegistryServer::start();
    let dir = test_dir();
    let (key, _) = openssl_keys(dir.path(), "team");
    let pushed = registry.push(&guest("berth_naming_guest"), "berth/naming:v1");
    let digest = pushed["digest"].as_str().unwrap();
    let bare = format!("{}/berth/naming:v1", registry.address);
    let out = registry.policy(&["sign", &bare, "--key", &key, "-o", "json"]);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stderr.contains(&format!("taking it as the registry reference oci://{bare}")),
        "{stderr}"
    );
    assert!(
        stderr.contains("warning: signing") && stderr.contains(&format!("@{digest}")),
        "{stderr}"
    );
    let signed: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(signed["digest"], digest);
    // By digest: no warning.
    let pinned = format!("{}/berth/naming@{digest}", registry.address);
    let out = registry.policy(&["sign", &pinned, "--key", &key]);
    let (_, stderr) = texts(&out);
    assert!(out.status.success() && !stderr.contains("warning"), "{stderr}");
}
