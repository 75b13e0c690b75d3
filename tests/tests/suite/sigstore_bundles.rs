//! Sigstore bundles attached as OCI 1.1 referrers, as cosign 3 attaches
//! them, read from a real registry (`docker-registry`): keyed bundles made
//! by openssl verify, keyless ones are named, a bundle's claim counts only
//! under a trusted signature, and a hostile registry's oversized referrers
//! index reads as no bundles rather than an error.

use std::io::{Read, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use berth_tests::{RegistryServer, guest, openssl_keys, test_dir, texts};
use serde_json::{Value, json};

/// Signs `data` with openssl (an implementation that is not Berth's): base64 DER.
fn openssl_sign(dir: &std::path::Path, key: &str, data: &[u8]) -> String {
    use base64::Engine as _;
    let input = dir.join("to-sign.bin");
    let output = dir.join("signed.der");
    std::fs::write(&input, data).unwrap();
    let out = std::process::Command::new("openssl")
        .args(["dgst", "-sha256", "-sign", key, "-out"])
        .arg(&output)
        .arg(&input)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    base64::engine::general_purpose::STANDARD.encode(std::fs::read(&output).unwrap())
}

/// Attaches `bundle` to manifest `subject` of `repo` as cosign 3 does: a
/// referrer manifest (artifactType the bundle's, an empty config), listed in
/// the referrers tag `sha256-<hex>` (this registry has no referrers API).
fn attach_bundle(registry: &RegistryServer, repo: &str, subject: &str, bundles: &[Value]) {
    let undated: Vec<(Value, Option<String>)> = bundles.iter().map(|b| (b.clone(), None)).collect();
    attach_dated(registry, repo, subject, &undated);
}

/// As [`attach_bundle`], each referrer manifest annotated with when it was
/// made (`org.opencontainers.image.created`, as cosign writes it) when given.
fn attach_dated(registry: &RegistryServer, repo: &str, subject: &str, bundles: &[(Value, Option<String>)]) {
    let empty = registry.upload(repo, b"{}");
    let mut listed = Vec::new();
    for (bundle, created) in bundles {
        let annotations = match created {
            Some(at) => json!({"org.opencontainers.image.created": at}),
            None => json!({}),
        };
        let bytes = serde_json::to_vec(bundle).unwrap();
        let layer = registry.upload(repo, &bytes);
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "artifactType": "application/vnd.dev.sigstore.bundle.v0.3+json",
            "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": empty, "size": 2},
            "layers": [{"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json", "digest": layer, "size": bytes.len()}],
            "subject": {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": subject, "size": 1},
            "annotations": annotations,
        });
        let text = serde_json::to_vec(&manifest).unwrap();
        let digest = berth::oci::Digest::of(&text).to_string();
        registry.put_manifest(repo, &digest, &manifest);
        listed.push(json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": digest,
            "size": text.len(),
            "artifactType": "application/vnd.dev.sigstore.bundle.v0.3+json",
            "annotations": annotations,
        }));
    }
    let index = json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": listed});
    let (status, body, _) = registry.http(
        "PUT",
        &format!(
            "/v2/{repo}/manifests/sha256-{}",
            subject.trim_start_matches("sha256:")
        ),
        &serde_json::to_vec(&index).unwrap(),
        "application/vnd.oci.image.index.v1+json",
    );
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
}

/// cosign 3's default: a keyed Sigstore bundle attached as an OCI 1.1
/// referrer, as a DSSE-wrapped in-toto statement or a message signature,
/// made here by openssl and the test's own JSON (not Berth's signer), is
/// read and checked with the trusted keys; a keyless one is said to be so;
/// an OCI 1.1 artifact (an empty config and a type, what `oras push
/// --artifact-type` makes) is taken as a module.
#[test]
fn keyed_sigstore_bundles_attached_as_referrers_are_read() {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let registry = RegistryServer::start();
    let dir = test_dir();
    let (key, public) = openssl_keys(dir.path(), "team");
    let verify = |reference: &str| {
        let out = registry.policy(&["verify", reference, "--key", &public, "-o", "json"]);
        let (stdout, stderr) = texts(&out);
        (out.status.success(), stdout, stderr)
    };

    // A DSSE envelope over an in-toto statement naming the manifest.
    let pushed = registry.push(&guest("berth_naming_guest"), "berth/naming:v1");
    let digest = pushed["digest"].as_str().unwrap();
    let reference = pushed["reference"].as_str().unwrap();
    let (ok, _, stderr) = verify(reference);
    assert!(!ok && stderr.contains("it is not signed"), "{stderr}");
    let statement = json!({
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": format!("{}/berth/naming", registry.address), "digest": {"sha256": digest.trim_start_matches("sha256:")}}],
        "predicateType": "https://sigstore.dev/cosign/sign/v1",
        "predicate": {},
    });
    let payload = serde_json::to_vec(&statement).unwrap();
    let kind = "application/vnd.in-toto+json";
    let mut pae = format!("DSSEv1 {} {kind} {} ", kind.len(), payload.len()).into_bytes();
    pae.extend_from_slice(&payload);
    let dsse = json!({
        "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
        "verificationMaterial": {"publicKey": {"hint": "team"}, "tlogEntries": []},
        "dsseEnvelope": {"payload": b64.encode(&payload), "payloadType": kind, "signatures": [{"sig": openssl_sign(dir.path(), &key, &pae), "keyid": ""}]},
    });
    // A keyless bundle beside it is skipped, not fatal.
    let keyless = json!({
        "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
        "verificationMaterial": {"certificate": {"rawBytes": "MIIB"}, "tlogEntries": []},
        "dsseEnvelope": {"payload": b64.encode(&payload), "payloadType": kind, "signatures": [{"sig": "MEUC"}]},
    });
    attach_bundle(&registry, "berth/naming", digest, &[keyless.clone(), dsse]);
    let (ok, stdout, stderr) = verify(reference);
    assert!(ok, "{stderr}");
    assert!(stdout.contains(&public), "{stdout}");

    // A message signature over the manifest's bytes.
    let pushed = registry.push(&guest("berth_retry_guest"), "berth/retry:v1");
    let digest = pushed["digest"].as_str().unwrap();
    let (status, manifest, _) = registry.http("GET", &format!("/v2/berth/retry/manifests/{digest}"), b"", "");
    assert_eq!(status, 200);
    let raw = hex_bytes(digest.trim_start_matches("sha256:"));
    let message = json!({
        "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
        "verificationMaterial": {"publicKey": {"hint": "team"}},
        "messageSignature": {"messageDigest": {"algorithm": "SHA2_256", "digest": b64.encode(&raw)}, "signature": openssl_sign(dir.path(), &key, &manifest)},
    });
    attach_bundle(&registry, "berth/retry", digest, &[message]);
    let (ok, _, stderr) = verify(pushed["reference"].as_str().unwrap());
    assert!(ok, "{stderr}");

    // Only a keyless bundle: refused, saying what was found.
    let pushed = registry.push(&guest("berth_placement_guest"), "berth/placement:v1");
    let digest = pushed["digest"].as_str().unwrap();
    attach_bundle(&registry, "berth/placement", digest, &[keyless]);
    let (ok, _, stderr) = verify(pushed["reference"].as_str().unwrap());
    assert!(!ok && stderr.contains("keyless"), "{stderr}");

    // An OCI 1.1 artifact: an empty config, a type, one layer that is a component.
    let module = std::fs::read(guest("berth_naming_guest")).unwrap();
    let empty = registry.upload("berth/artifact", b"{}");
    let layer = registry.upload("berth/artifact", &module);
    let artifact = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "artifactType": "application/vnd.example.berth.policy",
        "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": empty, "size": 2},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer, "size": module.len()}],
    });
    registry.put_manifest("berth/artifact", "v1", &artifact);
    let to = dir.path().join("artifact.wasm");
    let pulled = registry.policy_json(&[
        "pull",
        &format!("oci://{}/berth/artifact:v1", registry.address),
        "--to",
        &to.display().to_string(),
    ]);
    assert_eq!(std::fs::read(&to).unwrap(), module, "{pulled}");
}

fn hex_bytes(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

/// What a Sigstore bundle claims counts only once a trusted key is found to
/// have signed it: junk naming another digest is skipped (it used to be
/// taken as a trusted claim and refuse the module), so a good signature
/// beside it verifies.
#[test]
fn a_bundles_claim_counts_only_under_a_trusted_signature() {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let registry = RegistryServer::start();
    let dir = test_dir();
    let (key, public) = openssl_keys(dir.path(), "team");
    let verify = |reference: &str| {
        let out = registry.policy(&["verify", reference, "--key", &public]);
        let (stdout, stderr) = texts(&out);
        (out.status.success(), format!("{stdout}{stderr}"))
    };
    let pushed = registry.push(&guest("berth_retry_guest"), "berth/claims:v1");
    let digest = pushed["digest"].as_str().unwrap();
    let reference = pushed["reference"].as_str().unwrap();
    let bundle = |named: &[u8], signature: String| {
        json!({
            "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
            "verificationMaterial": {"publicKey": {"hint": "team"}},
            "messageSignature": {"messageDigest": {"algorithm": "SHA2_256", "digest": b64.encode(named)}, "signature": signature},
        })
    };
    let junk = bundle(&[7u8; 32], b64.encode(b"not a signature"));
    attach_bundle(&registry, "berth/claims", digest, std::slice::from_ref(&junk));
    let (ok, said) = verify(reference);
    assert!(!ok && !said.contains("another digest"), "{said}");

    let (status, manifest, _) =
        registry.http("GET", &format!("/v2/berth/claims/manifests/{digest}"), b"", "");
    assert_eq!(status, 200);
    let good = bundle(
        &hex_bytes(digest.trim_start_matches("sha256:")),
        openssl_sign(dir.path(), &key, &manifest),
    );
    attach_bundle(&registry, "berth/claims", digest, &[junk.clone(), good.clone()]);
    let (ok, said) = verify(reference);
    assert!(ok, "{said}");

    // Junk pushed before the signature, more of it than the bound reads,
    // listed first: the newest bundle is read first, so it cannot hide the
    // signature; nor can junk dated in the future (any pusher may write
    // that) or undated.
    let mut flood: Vec<(Value, Option<String>)> = (0..40)
        .map(|i| (junk.clone(), Some(format!("2026-11-01T00:00:{:02}Z", i % 60))))
        .collect();
    flood.push((junk.clone(), Some("2099-01-01T00:00:00Z".into())));
    flood.push((junk.clone(), None));
    let signed_at = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    flood.push((good, Some(signed_at)));
    attach_dated(&registry, "berth/claims", digest, &flood);
    let (ok, said) = verify(reference);
    assert!(ok, "the signature behind 42 junk bundles: {said}");
}

/// A registry in front of `upstream` that passes every request on (one per
/// connection) but answers the referrers API with `index`: what a hostile
/// registry, or one that anybody may push to, can serve. Counts the
/// referrers answers it gave.
fn referrers_proxy(upstream: String, index: Vec<u8>) -> (String, Arc<AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let answered = Arc::new(AtomicUsize::new(0));
    let counted = answered.clone();
    let index = Arc::new(index);
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let (upstream, index, counted) = (upstream.clone(), index.clone(), counted.clone());
            std::thread::spawn(move || {
                let _ = relay(client, &upstream, &index, &counted);
            });
        }
    });
    (address, answered)
}

/// One request of `client`: the referrers API answered with `index`,
/// anything else passed to `upstream` with the connection closed after it.
fn relay(
    mut client: std::net::TcpStream,
    upstream: &str,
    index: &[u8],
    answered: &AtomicUsize,
) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if client.read(&mut byte)? == 0 {
            return Ok(());
        }
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head).to_string();
    let path = text.split_whitespace().nth(1).unwrap_or_default().to_string();
    let length: usize = text
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().to_string())
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    client.read_exact(&mut body)?;
    if path.contains("/referrers/") {
        answered.fetch_add(1, Ordering::SeqCst);
        let reply = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.index.v1+json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            index.len()
        );
        client.write_all(reply.as_bytes())?;
        return client.write_all(index);
    }
    let closed: String = text
        .split("\r\n")
        .filter(|l| !l.to_ascii_lowercase().starts_with("connection:") && !l.is_empty())
        .map(|l| format!("{l}\r\n"))
        .collect();
    let mut server = std::net::TcpStream::connect(upstream)?;
    server.write_all(format!("{closed}Connection: close\r\n\r\n").as_bytes())?;
    server.write_all(&body)?;
    std::io::copy(&mut server, &mut client)?;
    Ok(())
}

/// A referrers index past Berth's 4 MiB bound (anyone who may push can grow
/// one) holds no bundle Berth reads: it is passed over with a warning, and a
/// bundle in the referrers tag still verifies the module. It used to be an
/// error that refused the module.
#[test]
fn an_oversized_referrers_index_reads_as_no_bundles() {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let registry = RegistryServer::start();
    let dir = test_dir();
    let (key, public) = openssl_keys(dir.path(), "team");
    let pushed = registry.push(&guest("berth_naming_guest"), "berth/crowded:v1");
    let digest = pushed["digest"].as_str().unwrap();
    let (status, manifest, _) =
        registry.http("GET", &format!("/v2/berth/crowded/manifests/{digest}"), b"", "");
    assert_eq!(status, 200);
    let good = json!({
        "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
        "verificationMaterial": {"publicKey": {"hint": "team"}},
        "messageSignature": {
            "messageDigest": {"algorithm": "SHA2_256", "digest": b64.encode(hex_bytes(digest.trim_start_matches("sha256:")))},
            "signature": openssl_sign(dir.path(), &key, &manifest),
        },
    });
    attach_bundle(&registry, "berth/crowded", digest, &[good]);

    let entry = json!({
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": format!("sha256:{}", "0".repeat(64)),
        "size": 1,
        "artifactType": "application/vnd.dev.sigstore.bundle.v0.3+json",
    });
    let entries = vec![entry; 30_000];
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": entries,
    }))
    .unwrap();
    assert!(index.len() > 4 << 20, "{} bytes", index.len());
    let (proxy, answered) = referrers_proxy(registry.address.clone(), index);

    let reference = format!("oci://{proxy}/berth/crowded@{digest}");
    let out = registry.policy(&["verify", &reference, "--key", &public, "-o", "json"]);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains(&public), "{stdout}");
    assert!(
        answered.load(Ordering::SeqCst) > 0,
        "the referrers API was not asked: {stderr}"
    );
    assert!(stderr.contains("larger than"), "{stderr}");
}
