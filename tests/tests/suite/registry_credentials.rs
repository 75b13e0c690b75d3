//! A registry's credentials go to that registry only: a hostile registry
//! (started here, on loopback) that asks for a password, then points an
//! upload's `Location` at another server which asks for credentials too,
//! never gets them sent there. Both servers are small HTTP servers of the
//! test's own, recording what reached them.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use berth_tests::{berth, guest, test_dir, texts};

/// One request as a server here saw it: its line and its headers.
#[derive(Clone, Debug)]
struct Seen {
    line: String,
    headers: Vec<(String, String)>,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Serves HTTP/1.1 on a loopback port until the test ends, answering each
/// request with `answer` (status line and headers, no body) and recording it.
fn server(answer: impl Fn(&Seen) -> String + Send + 'static) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(200) {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            if reader.read_line(&mut line).is_err() {
                continue;
            }
            let mut headers = Vec::new();
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).is_err() || h.trim().is_empty() {
                    break;
                }
                if let Some((k, v)) = h.trim().split_once(':') {
                    headers.push((k.trim().to_string(), v.trim().to_string()));
                }
            }
            let request = Seen {
                line: line.trim().to_string(),
                headers,
            };
            let length: usize = request
                .header("content-length")
                .and_then(|l| l.parse().ok())
                .unwrap_or(0);
            let mut body = vec![0; length.min(64 << 20)];
            let _ = reader.read_exact(&mut body);
            let head = answer(&request);
            log.lock().unwrap().push(request);
            let _ = write!(stream, "{head}Content-Length: 0\r\nConnection: close\r\n\r\n");
        }
    });
    (address, seen)
}

#[test]
fn credentials_never_follow_an_upload_location_to_another_host() {
    use base64::Engine as _;
    let password = base64::engine::general_purpose::STANDARD.encode("berth:s3cret-pw");
    let expected = format!("Basic {password}");
    // Elsewhere: asks for credentials too, as a thief would.
    let (elsewhere, stolen) =
        server(|_| "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"x\"\r\n".into());
    let upload_at = format!("http://{elsewhere}/uploads/1");
    let (registry, reached) = server(move |r| {
        if r.header("authorization") != Some(expected.as_str()) {
            return "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"registry\"\r\n".into();
        }
        if r.line.starts_with("HEAD ") {
            return "HTTP/1.1 404 Not Found\r\n".into();
        }
        if r.line.starts_with("POST ") {
            return format!("HTTP/1.1 202 Accepted\r\nLocation: {upload_at}\r\n");
        }
        "HTTP/1.1 500 Internal Server Error\r\n".into()
    });
    let dir = test_dir();
    let config = dir.path().join("docker-config.json");
    std::fs::write(
        &config,
        format!(r#"{{"auths":{{"{registry}":{{"auth":"{password}"}}}}}}"#),
    )
    .unwrap();
    let out = berth(&[
        "policy",
        "push",
        &guest("berth_naming_guest").display().to_string(),
        &format!("oci://{registry}/team/naming:v1"),
        "--plain-http",
        "--docker-config",
        &config.display().to_string(),
    ]);
    let (_, stderr) = texts(&out);
    assert!(!out.status.success(), "the other host refused the upload");
    assert!(stderr.contains("401"), "{stderr}");
    let reached = reached.lock().unwrap().clone();
    assert!(
        reached.iter().any(|r| r.header("authorization").is_some()),
        "the registry itself was given its credentials: {reached:?}"
    );
    let stolen = stolen.lock().unwrap().clone();
    assert!(!stolen.is_empty(), "the upload went to its Location");
    for r in &stolen {
        assert_eq!(r.header("authorization"), None, "{r:?}");
    }
}
