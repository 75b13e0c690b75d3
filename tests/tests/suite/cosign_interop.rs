//! Signatures and keys made by an implementation that is not Berth's
//! (cosign's formats, written with openssl and the test's own JSON) are
//! read by Berth, and Berth's are read by it, against a real registry
//! (`docker-registry` on loopback).

use berth_tests::{RegistryServer, berth_with, cosign_key, guest, openssl_keys, test_dir, texts};
use serde_json::Value;

#[test]
fn signatures_interoperate_with_an_independent_implementation() {
    let registry = RegistryServer::start();
    let dir = test_dir();
    let (key, public) = openssl_keys(dir.path(), "team");

    // Signed by Berth, checked by openssl over the payload and signature cosign's layout holds.
    let pushed = registry.push(&guest("berth_naming_guest"), "berth/naming:v1");
    let by_tag = format!("oci://{}/berth/naming:v1", registry.address);
    let signed = registry.policy_json(&["sign", &by_tag, "--key", &key]);
    let digest = pushed["digest"].as_str().unwrap();
    assert_eq!(
        signed["reference"], pushed["reference"],
        "a tag is signed as its digest"
    );
    let sig_tag = format!("sha256-{}.sig", digest.trim_start_matches("sha256:"));
    let (status, manifest, _) =
        registry.http("GET", &format!("/v2/berth/naming/manifests/{sig_tag}"), b"", "");
    assert_eq!(status, 200);
    let manifest: Value = serde_json::from_slice(&manifest).unwrap();
    let layer = &manifest["layers"][0];
    assert_eq!(
        layer["mediaType"],
        "application/vnd.dev.cosign.simplesigning.v1+json"
    );
    let (_, payload, _) = registry.http(
        "GET",
        &format!("/v2/berth/naming/blobs/{}", layer["digest"].as_str().unwrap()),
        b"",
        "",
    );
    let claim: Value = serde_json::from_slice(&payload).unwrap();
    assert_eq!(claim["critical"]["image"]["docker-manifest-digest"], digest);
    assert_eq!(claim["critical"]["type"], "cosign container image signature");
    let signature = layer["annotations"]["dev.cosignproject.cosign/signature"]
        .as_str()
        .unwrap();
    std::fs::write(dir.path().join("payload.json"), &payload).unwrap();
    let der = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, signature).unwrap();
    std::fs::write(dir.path().join("sig.der"), der).unwrap();
    let out = std::process::Command::new("openssl")
        .args(["dgst", "-sha256", "-verify", &public, "-signature"])
        .arg(dir.path().join("sig.der"))
        .arg(dir.path().join("payload.json"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "Verified OK");

    // Signed by openssl, stored in cosign's layout by hand, checked by Berth.
    let pushed = registry.push(&guest("berth_retry_guest"), "berth/retry:v1");
    let digest = pushed["digest"].as_str().unwrap();
    let payload = format!(
        r#"{{"critical":{{"identity":{{"docker-reference":"{}/berth/retry"}},"image":{{"docker-manifest-digest":"{digest}"}},"type":"cosign container image signature"}},"optional":null}}"#,
        registry.address
    );
    std::fs::write(dir.path().join("retry-payload.json"), &payload).unwrap();
    let out = std::process::Command::new("openssl")
        .args(["dgst", "-sha256", "-sign", &key, "-out"])
        .arg(dir.path().join("retry-sig.der"))
        .arg(dir.path().join("retry-payload.json"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let signature = std::process::Command::new("openssl")
        .args(["base64", "-A", "-in"])
        .arg(dir.path().join("retry-sig.der"))
        .output()
        .unwrap()
        .stdout;
    let payload_digest = registry.upload("berth/retry", payload.as_bytes());
    let config = br#"{"architecture":"","os":"","rootfs":{"type":"layers","diff_ids":[]},"config":{}}"#;
    let config_digest = registry.upload("berth/retry", config);
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config.len()},
        "layers": [{
            "mediaType": "application/vnd.dev.cosign.simplesigning.v1+json",
            "digest": payload_digest,
            "size": payload.len(),
            "annotations": {"dev.cosignproject.cosign/signature": String::from_utf8(signature).unwrap()},
        }],
    });
    let sig_tag = format!("sha256-{}.sig", digest.trim_start_matches("sha256:"));
    let (status, body, _) = registry.http(
        "PUT",
        &format!("/v2/berth/retry/manifests/{sig_tag}"),
        &serde_json::to_vec(&manifest).unwrap(),
        "application/vnd.oci.image.manifest.v1+json",
    );
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
    let verified = registry.policy_json(&[
        "verify",
        &format!("oci://{}/berth/retry:v1", registry.address),
        "--key",
        &public,
    ]);
    assert_eq!(verified["key"], public.as_str());
}

#[test]
fn cosigns_encrypted_keys_interoperate_with_an_independent_implementation() {
    let registry = RegistryServer::start();
    let dir = test_dir();
    let path = |name: &str| dir.path().join(name).display().to_string();
    let pushed = registry.push(&guest("berth_naming_guest"), "berth/naming:v1");
    let reference = pushed["reference"].as_str().unwrap();
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl").args(args).output().unwrap();
        assert!(out.status.success(), "openssl {args:?}: {}", texts(&out).1);
        out.stdout
    };

    // Sealed by Python's scrypt and PyNaCl, opened by Berth to sign.
    let (key, public) = openssl_keys(dir.path(), "team");
    openssl(&[
        "pkcs8",
        "-topk8",
        "-nocrypt",
        "-in",
        &key,
        "-outform",
        "DER",
        "-out",
        &path("team.der"),
    ]);
    cosign_key(
        "seal",
        &dir.path().join("team.der"),
        "s3cret",
        &dir.path().join("cosign.key"),
    );
    let sign = |password: Option<&str>| {
        let env: Vec<(&str, &str)> = password.map(|p| ("COSIGN_PASSWORD", p)).into_iter().collect();
        registry.policy_with(&env, &["sign", reference, "--key", &path("cosign.key")])
    };
    let (_, stderr) = texts(&sign(None));
    assert!(
        stderr.contains("encrypted") && stderr.contains("COSIGN_PASSWORD"),
        "{stderr}"
    );
    let (_, stderr) = texts(&sign(Some("wrong")));
    assert!(stderr.contains("wrong password"), "{stderr}");
    let out = sign(Some("s3cret"));
    assert!(out.status.success(), "{}", texts(&out).1);
    let verified = registry.policy_json(&["verify", reference, "--key", &public]);
    assert_eq!(verified["key"], public.as_str());

    // Generated and sealed by Berth, opened by Python; openssl finds the same public key in it.
    let generate = |env: &[(&str, &str)]| berth_with(env, &["policy", "generate-key", &path("berth")]);
    let (_, stderr) = texts(&generate(&[]));
    assert!(stderr.contains("COSIGN_PASSWORD"), "{stderr}");
    assert!(!dir.path().join("berth.key").exists());
    let out = generate(&[("COSIGN_PASSWORD", "pw")]);
    assert!(out.status.success(), "{}", texts(&out).1);
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(dir.path().join("berth.key"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let text = std::fs::read_to_string(dir.path().join("berth.key")).unwrap();
    assert!(text.starts_with("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----"));
    cosign_key(
        "open",
        &dir.path().join("berth.key"),
        "pw",
        &dir.path().join("berth.der"),
    );
    let derived = openssl(&["pkey", "-inform", "DER", "-in", &path("berth.der"), "-pubout"]);
    assert_eq!(
        String::from_utf8(derived).unwrap(),
        std::fs::read_to_string(path("berth.pub")).unwrap()
    );
    let (_, stderr) = texts(&generate(&[("COSIGN_PASSWORD", "pw")]));
    assert!(stderr.contains("not overwritten"), "{stderr}");
}
