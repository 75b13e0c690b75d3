//! A real OCI registry for the tests: `docker-registry` (the Debian package
//! of the CNCF distribution registry, which `cargo xtask test` and CI
//! install) on a loopback port, with its storage in a temporary directory,
//! optionally behind TLS (a CA of the test's own) and a password.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;

use crate::free_port;

pub struct RegistryServer {
    child: Child,
    /// A static file server standing in for a CDN, when blobs are redirected.
    cdn: Option<Child>,
    dir: tempfile::TempDir,
    /// `127.0.0.1:PORT`.
    pub address: String,
    /// The CA its certificate is signed by, with TLS.
    pub ca: Option<PathBuf>,
    /// A Docker config file with its credentials, with a password.
    pub docker_config: Option<PathBuf>,
}

impl Drop for RegistryServer {
    fn drop(&mut self) {
        for child in std::iter::once(&mut self.child).chain(self.cdn.as_mut()) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl RegistryServer {
    /// A registry over plain HTTP, open to anyone.
    pub fn start() -> RegistryServer {
        RegistryServer::start_with(false, None, false)
    }

    /// A registry over TLS that lets in `user` with `password` only.
    pub fn start_private(user: &str, password: &str) -> RegistryServer {
        RegistryServer::start_with(true, Some((user, password)), false)
    }

    /// A registry over plain HTTP that answers every blob read with a redirect
    /// to another server (the distribution registry's `redirect` storage
    /// middleware), as registries behind a CDN or an object store do: a static
    /// file server (Python's http.server) on another loopback port serves the
    /// registry's storage.
    pub fn start_redirecting() -> RegistryServer {
        RegistryServer::start_with(false, None, true)
    }

    fn start_with(tls: bool, login: Option<(&str, &str)>, redirect: bool) -> RegistryServer {
        let dir = tempfile::Builder::new()
            .prefix("berth-registry-")
            .tempdir()
            .unwrap();
        let port = free_port();
        let address = format!("127.0.0.1:{port}");
        let mut config = format!(
            "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {address}\n  secret: berth-test\n",
            dir.path().join("data").display()
        );
        let mut ca = None;
        if tls {
            crate::etcd::write_pki(dir.path());
            config += &format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                dir.path().join("server.pem").display(),
                dir.path().join("server.key").display()
            );
            ca = Some(dir.path().join(crate::etcd::ETCD_CA));
        }
        let mut docker_config = None;
        if let Some((user, password)) = login {
            let hash = bcrypt::hash(password, 4).unwrap();
            let htpasswd = dir.path().join("htpasswd");
            std::fs::write(&htpasswd, format!("{user}:{hash}\n")).unwrap();
            config += &format!(
                "auth:\n  htpasswd:\n    realm: berth-test\n    path: {}\n",
                htpasswd.display()
            );
            let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
            let path = dir.path().join("docker-config.json");
            std::fs::write(
                &path,
                format!(r#"{{"auths": {{"{address}": {{"auth": "{auth}"}}}}}}"#),
            )
            .unwrap();
            docker_config = Some(path);
        }
        let mut cdn = None;
        if redirect {
            let data = dir.path().join("data");
            std::fs::create_dir_all(&data).unwrap();
            let cdn_port = free_port();
            config += &format!(
                "middleware:\n  storage:\n    - name: redirect\n      options:\n        baseurl: http://127.0.0.1:{cdn_port}/\n"
            );
            let log = std::fs::File::create(dir.path().join("cdn.log")).unwrap();
            cdn = Some(
                Command::new("/usr/bin/python3")
                    .args([
                        "-m",
                        "http.server",
                        &cdn_port.to_string(),
                        "--bind",
                        "127.0.0.1",
                        "--directory",
                    ])
                    .arg(&data)
                    .stdin(Stdio::null())
                    .stdout(log.try_clone().unwrap())
                    .stderr(log)
                    .spawn()
                    .expect("/usr/bin/python3 -m http.server"),
            );
            wait_for_port(&format!("127.0.0.1:{cdn_port}"), || {
                std::fs::read_to_string(dir.path().join("cdn.log")).unwrap_or_default()
            });
        }
        let config_path = dir.path().join("config.yml");
        std::fs::write(&config_path, config).unwrap();
        let log = std::fs::File::create(dir.path().join("registry.log")).unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("starting docker-registry ({e}): install the Debian package docker-registry (cargo xtask test does)")
            });
        let registry = RegistryServer {
            child,
            cdn,
            dir,
            address,
            ca,
            docker_config,
        };
        wait_for_port(&registry.address, || registry.log());
        registry
    }

    /// What the stand-in CDN served (one line a request), with redirects.
    pub fn cdn_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("cdn.log")).unwrap_or_default()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    /// The file the registry keeps blob `digest` (`sha256:…`) in.
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.dir
            .path()
            .join("data/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    /// The `berth policy` flags that reach this registry.
    pub fn flags(&self) -> Vec<String> {
        let mut flags = Vec::new();
        match &self.ca {
            Some(ca) => flags.extend(["--ca".to_string(), ca.display().to_string()]),
            None => flags.push("--plain-http".to_string()),
        }
        if let Some(c) = &self.docker_config {
            flags.extend(["--docker-config".to_string(), c.display().to_string()]);
        }
        flags
    }
}

impl RegistryServer {
    /// `berth policy ARGS` with the flags that reach this registry.
    pub fn policy(&self, args: &[&str]) -> std::process::Output {
        self.policy_with(&[], args)
    }

    /// `berth policy ARGS` with `env` set.
    pub fn policy_with(&self, env: &[(&str, &str)], args: &[&str]) -> std::process::Output {
        let flags = self.flags();
        let mut all: Vec<&str> = vec!["policy"];
        all.extend_from_slice(args);
        all.extend(flags.iter().map(String::as_str));
        crate::berth_with(env, &all)
    }

    /// `berth policy ARGS -o json`, which must succeed.
    pub fn policy_json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        let out = self.policy(&all);
        let (stdout, stderr) = crate::texts(&out);
        assert!(
            out.status.success(),
            "berth policy {args:?}: {stderr}\n{}",
            self.log()
        );
        serde_json::from_str(&stdout).unwrap()
    }

    /// The registry's HTTP API, as a client that is not Berth's (a registry
    /// writer's): status, body and `Location`.
    pub fn http(&self, method: &str, path: &str, body: &[u8], kind: &str) -> (u16, Vec<u8>, Option<String>) {
        let agent = ureq::Agent::new_with_config(
            ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(Duration::from_secs(10)))
                .build(),
        );
        let url = if path.starts_with("http") {
            path.to_string()
        } else {
            format!("http://{}{path}", self.address)
        };
        let accept = "application/vnd.oci.image.manifest.v1+json";
        let mut response = match method {
            "GET" => agent.get(&url).header("Accept", accept).call(),
            "POST" => agent.post(&url).send(body),
            _ => agent.put(&url).header("Content-Type", kind).send(body),
        }
        .unwrap();
        let location = response
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let bytes = response.body_mut().read_to_vec().unwrap();
        (response.status().as_u16(), bytes, location)
    }

    /// Uploads `blob` to `repo` as a registry writer would: its digest.
    pub fn upload(&self, repo: &str, blob: &[u8]) -> String {
        let digest = berth::oci::Digest::of(blob).to_string();
        let (status, _, location) = self.http("POST", &format!("/v2/{repo}/blobs/uploads/"), b"", "");
        assert_eq!(status, 202);
        let location = location.unwrap();
        let sep = if location.contains('?') { '&' } else { '?' };
        let (status, body, _) = self.http(
            "PUT",
            &format!("{location}{sep}digest={digest}"),
            blob,
            "application/octet-stream",
        );
        assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
        digest
    }

    /// Puts `manifest` under `tag` in `repo`, as a registry writer would.
    pub fn put_manifest(&self, repo: &str, tag: &str, manifest: &serde_json::Value) {
        let (status, body, _) = self.http(
            "PUT",
            &format!("/v2/{repo}/manifests/{tag}"),
            &serde_json::to_vec(manifest).unwrap(),
            "application/vnd.oci.image.manifest.v1+json",
        );
        assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
    }

    /// `berth policy push MODULE oci://THIS/REPO_TAG`: its JSON answer.
    pub fn push(&self, module: &std::path::Path, repo_tag: &str) -> serde_json::Value {
        let reference = format!("oci://{}/{repo_tag}", self.address);
        self.policy_json(&["push", &module.display().to_string(), &reference])
    }
}

/// An ECDSA P-256 key pair made by openssl (an implementation that is not
/// Berth's), as PEM files: (private, public).
pub fn openssl_keys(dir: &std::path::Path, name: &str) -> (String, String) {
    let private = dir.join(format!("{name}.key"));
    let public = dir.join(format!("{name}.pub"));
    let run = |args: &[&str]| {
        let out = Command::new("openssl").args(args).output().expect("openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let (k, p) = (private.display().to_string(), public.display().to_string());
    run(&[
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-out",
        &k,
    ]);
    run(&["pkey", "-in", &k, "-pubout", "-out", &p]);
    (k, p)
}

/// cosign's encrypted key sealed or opened by Python's scrypt and PyNaCl (an
/// implementation that is not Berth's): `command` is `seal` (PKCS#8 DER to a
/// key file) or `open` (a key file to PKCS#8 DER).
pub fn cosign_key(command: &str, from: &std::path::Path, password: &str, to: &std::path::Path) {
    let out = Command::new("/usr/bin/python3")
        .args(["-c", include_str!("cosign_key.py"), command])
        .arg(from)
        .arg(password)
        .arg(to)
        .output()
        .expect("/usr/bin/python3 (with python3-nacl, which `cargo xtask test` installs)");
    assert!(
        out.status.success(),
        "cosign_key.py {command}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn wait_for_port(address: &str, log: impl Fn() -> String) {
    let started = Instant::now();
    while std::net::TcpStream::connect(address).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "nothing listens on {address}: {}",
            log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
