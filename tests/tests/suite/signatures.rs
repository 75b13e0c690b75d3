//! Signatures under a hostile registry writer (one who can push but holds
//! no trusted key): a signature image flooded with junk layers is read
//! within bounds, and junk beside a valid signature does not hide it. Real
//! registry (`docker-registry`), signatures made by Berth's signer and
//! stored, then tampered with, through the registry's own HTTP API.

use berth_tests::{RegistryServer, guest, openssl_keys, test_dir, texts};
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
    registry.policy_json(&["sign", &reference, "--key", &key]);
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
