//! Client certificates as identities on the TLS API: a certificate of the
//! server's `api_client_ca` says who calls by its subject, bound to
//! policies as a token holds them; no other CA's certificate (Berth's own
//! included) is taken, and no caller can claim a subject by metadata.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair};

use super::*;

/// A CA whose certificate and key are files in a test's directory.
pub(super) struct TestCa {
    cert: String,
    key: KeyPair,
}

impl TestCa {
    pub(super) fn new(dir: &Path, name: &str) -> TestCa {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap().pem();
        std::fs::write(dir.join(format!("{name}.pem")), &cert).unwrap();
        TestCa { cert, key }
    }

    /// Berth's own CA, from the files it keeps.
    fn read(dir: &Path) -> TestCa {
        let key = std::fs::read_to_string(dir.join("ca.key")).unwrap();
        TestCa {
            cert: std::fs::read_to_string(dir.join("ca.pem")).unwrap(),
            key: KeyPair::from_pem(&key).unwrap(),
        }
    }

    /// A client certificate for `subject` and its key (mode 0600), as
    /// files named after `file` in `dir`.
    pub(super) fn issue(&self, dir: &Path, subject: &str, file: &str) -> (PathBuf, PathBuf) {
        use std::os::unix::fs::PermissionsExt;
        let issuer = Issuer::from_ca_cert_pem(&self.cert, &self.key).unwrap();
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, subject);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params.signed_by(&key, &issuer).unwrap();
        let (cert_path, key_path) = (dir.join(format!("{file}.pem")), dir.join(format!("{file}.key")));
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();
        (cert_path, key_path)
    }
}

/// The CLI against the TLS API at `port` with a client certificate and no token.
pub(super) fn as_holder(c: &Cluster, port: u16, (cert, key): &(PathBuf, PathBuf), args: &[&str]) -> Output {
    Command::new(bin("berth"))
        .args(args)
        .env("BERTH_ADDR", format!("https://127.0.0.1:{port}"))
        .env("BERTH_CACERT", c.dir.path().join("state/api-ca.pem"))
        .env("BERTH_CLIENT_CERT", cert)
        .env("BERTH_CLIENT_KEY", key)
        .env("BERTH_API", c.dir.path().join("no.sock"))
        .env_remove("BERTH_TOKEN")
        .stdin(Stdio::null())
        .output()
        .expect("running berth")
}

/// Sends metadata a client might forge, and no token.
#[derive(Clone)]
struct Claims(&'static str);

impl tonic::service::Interceptor for Claims {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        request
            .metadata_mut()
            .insert("berth-subject", self.0.parse().unwrap());
        request
            .metadata_mut()
            .insert("berth-caller", "local".parse().unwrap());
        Ok(request)
    }
}

/// A bound subject reaches what its policies grant and nothing else; an
/// unbound one, a certificate of another CA or of Berth's own, and a
/// subject claimed by metadata are refused; unbinding holds at once; the
/// audit log names the subject; `api_client_ca` may not be Berth's own CA.
#[test]
fn a_client_certificate_is_its_subject_bound_to_policies() {
    let dir = tempfile::tempdir().unwrap();
    let clients = TestCa::new(dir.path(), "clients-ca");
    let stranger = TestCa::new(dir.path(), "stranger-ca");
    let alice = clients.issue(dir.path(), "alice", "alice");
    let mallory = clients.issue(dir.path(), "mallory", "mallory");
    let port = free_port();
    let extra = format!(
        "api_address = \"127.0.0.1:{port}\"\napi_client_ca = \"{}\"\n",
        dir.path().join("clients-ca.pem").display()
    );
    let mut c = Cluster::start(ClusterSpec {
        extra: &extra,
        ..ClusterSpec::default()
    });
    apply(
        &c,
        "team-a",
        "[namespace.team-a]\ncapabilities = [\"list\", \"read\", \"write\", \"mount\"]\n",
    );
    let bound = c.ok(&["acl", "certificate", "bind", "alice", "--policy", "team-a"]);
    assert!(bound.contains("alice") && bound.contains("team-a"), "{bound}");
    let out = c.berth(&["acl", "certificate", "bind", "bob", "--policy", "nope"]);
    assert!(
        texts(&out).1.contains("no ACL policy named \"nope\""),
        "{}",
        texts(&out).1
    );

    let create = [
        "volume",
        "-n",
        "team-a",
        "create",
        "data",
        "--plugin",
        "hostpath",
        "--requisite",
        "zone=a",
        "--wait",
    ];
    let out = as_holder(&c, port, &alice, &create);
    assert!(out.status.success(), "{}{}", texts(&out).1, c.log());
    let out = as_holder(&c, port, &alice, &["volume", "-n", "team-b", "list"]);
    let stderr = texts(&out).1;
    assert!(
        !out.status.success()
            && stderr.contains("PERMISSION_DENIED")
            && stderr.contains("certificate subject \"alice\"")
            && stderr.contains("\"team-b\""),
        "{stderr}"
    );
    let me = as_holder(&c, port, &alice, &["acl", "token", "self"]);
    assert!(
        texts(&me).1.contains("certificate subject \"alice\""),
        "{}",
        texts(&me).1
    );

    // A subject bound to nothing is no one.
    let out = as_holder(&c, port, &mallory, &["volume", "-n", "team-a", "list"]);
    let stderr = texts(&out).1;
    assert!(
        stderr.contains("UNAUTHENTICATED") && stderr.contains("\"mallory\""),
        "{stderr}"
    );

    // Another CA's certificate, or one Berth's own CA issued with a bound
    // subject, ends at the handshake.
    let strange = stranger.issue(dir.path(), "alice", "strange-alice");
    let own = TestCa::read(&c.dir.path().join("state/api-ca")).issue(dir.path(), "alice", "own-alice");
    for holder in [&strange, &own] {
        let out = as_holder(&c, port, holder, &["volume", "-n", "team-a", "list"]);
        let stderr = texts(&out).1;
        assert!(
            !out.status.success() && stderr.contains("api_client_ca names"),
            "{stderr}"
        );
    }

    // Metadata naming a subject (or the socket's caller) counts for nothing.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let code = rt.block_on(async {
        use tonic::transport::{Certificate, ClientTlsConfig};
        let ca = std::fs::read(c.dir.path().join("state/api-ca.pem")).unwrap();
        let tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(ca))
            .domain_name("localhost");
        let channel = tonic::transport::Channel::from_shared(format!("https://127.0.0.1:{port}"))
            .unwrap()
            .tls_config(tls)
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut client =
            berth_proto::berth::v1::berth_client::BerthClient::with_interceptor(channel, Claims("alice"));
        client
            .list_volumes(berth_proto::berth::v1::ListVolumesRequest::default())
            .await
            .unwrap_err()
            .code()
    });
    assert_eq!(code, tonic::Code::Unauthenticated);

    // Unbound: refused from the next call on.
    let listed = c.ok(&["acl", "certificate", "list", "-o", "json"]);
    assert!(listed.contains("\"alice\""), "{listed}");
    c.ok(&["acl", "certificate", "unbind", "alice"]);
    let out = as_holder(&c, port, &alice, &["volume", "-n", "team-a", "get", "data"]);
    assert!(texts(&out).1.contains("UNAUTHENTICATED"), "{}", texts(&out).1);

    let audit = std::fs::read_to_string(c.dir.path().join("state/audit.log")).unwrap();
    let lines: Vec<Value> = audit.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let by = |identity: &str, call: &str, code: &str| {
        lines
            .iter()
            .any(|l| l["identity"] == identity && l["call"] == call && l["code"] == code)
    };
    assert!(by("cert:alice", "CreateVolume", "OK"), "{audit}");
    assert!(by("cert:alice", "ListVolumes", "PERMISSION_DENIED"), "{audit}");
    assert!(by("management", "UnbindAclCertificate", "OK"), "{audit}");

    // Berth's own CA may not stand for the API's callers.
    c.kill_server(0);
    let config = c.dir.path().join("berth.toml");
    let text = std::fs::read_to_string(&config).unwrap().replace(
        &dir.path().join("clients-ca.pem").display().to_string(),
        &c.dir.path().join("state/api-ca/ca.pem").display().to_string(),
    );
    std::fs::write(&config, text).unwrap();
    let out = Command::new(bin("berth"))
        .args(["serve", "--config", config.to_str().unwrap()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = texts(&out).1;
    assert!(
        !out.status.success() && stderr.contains("api_client_ca") && stderr.contains("CA of Berth's own"),
        "{stderr}"
    );
}
