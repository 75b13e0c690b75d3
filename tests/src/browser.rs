//! A real headless browser for the console's tests: Debian's Chromium,
//! driven over WebDriver by its ChromeDriver (installed by `cargo xtask
//! test`), spoken here as plain HTTP/1.1 on loopback.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::free_port;

/// WebDriver's key for an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A ChromeDriver process and one browser session of it; both end on drop.
pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
    _profile: tempfile::TempDir,
    /// Where screenshots are kept.
    pub shots: PathBuf,
}

/// One answer of the driver: its status and JSON body.
fn call(port: u16, method: &str, path: &str, body: Option<&Value>) -> std::io::Result<(u16, Value)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    // ChromeDriver says `Connection: close` yet keeps the socket open: the
    // answer is read by its Content-Length.
    let mut answer = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    let (head_end, length) = loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Err(std::io::Error::other("the driver closed before answering"));
        }
        answer.extend_from_slice(&buf[..n]);
        if let Some(end) = answer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&answer[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            break (end + 4, length);
        }
    };
    while answer.len() < head_end + length {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&answer[..head_end]);
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let json = serde_json::from_slice(&answer[head_end..]).unwrap_or(Value::Null);
    Ok((status, json))
}

impl Browser {
    /// Starts ChromeDriver and a headless Chromium with a new profile.
    /// `insecure`: certificates of a CA the browser does not know are taken.
    pub fn start(shots: &Path) -> Browser {
        let port = free_port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver (Debian's chromium-driver; `cargo xtask test` installs it)");
        let began = Instant::now();
        while !call(port, "GET", "/status", None).is_ok_and(|(_, v)| v["value"]["ready"] == true) {
            assert!(
                began.elapsed() < Duration::from_secs(30),
                "chromedriver not ready after 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let profile = tempfile::tempdir().unwrap();
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            // The console's certificate is from Berth's own CA, which this
            // new profile does not know; the CLI's tests check that chain.
            "acceptInsecureCerts": true,
            "goog:loggingPrefs": {"browser": "ALL"},
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    "--window-size=1280,900",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            },
        }}});
        let (status, answer) = call(port, "POST", "/session", Some(&capabilities)).unwrap();
        assert_eq!(status, 200, "no browser session: {answer}");
        let session = answer["value"]["sessionId"].as_str().unwrap().to_string();
        std::fs::create_dir_all(shots).unwrap();
        Browser {
            driver,
            port,
            session,
            _profile: profile,
            shots: shots.to_path_buf(),
        }
    }

    /// A command of the session; panics with the driver's answer if it failed.
    fn command(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let path = format!("/session/{}{path}", self.session);
        let (status, answer) = call(self.port, method, &path, body.as_ref()).unwrap();
        assert_eq!(status, 200, "{method} {path}: {answer}");
        answer["value"].clone()
    }

    pub fn go(&self, url: &str) {
        self.command("POST", "/url", Some(json!({ "url": url })));
    }

    pub fn url(&self) -> String {
        self.command("GET", "/url", None)
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// The elements `css` finds, in document order.
    pub fn all(&self, css: &str) -> Vec<String> {
        let found = self.command(
            "POST",
            "/elements",
            Some(json!({"using": "css selector", "value": css})),
        );
        found
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|e| e[ELEMENT].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The one element `css` finds first; panics if none.
    pub fn find(&self, css: &str) -> String {
        self.all(css)
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("no element {css:?} on {}", self.url()))
    }

    pub fn type_into(&self, css: &str, text: &str) {
        let e = self.find(css);
        self.command("POST", &format!("/element/{e}/clear"), Some(json!({})));
        self.command(
            "POST",
            &format!("/element/{e}/value"),
            Some(json!({ "text": text })),
        );
    }

    /// Clicks what `css` finds; found again if a live view replaced it meanwhile.
    pub fn click(&self, css: &str) {
        for _ in 0..5 {
            let e = self.find(css);
            let path = format!("/session/{}/element/{e}/click", self.session);
            let (status, answer) = call(self.port, "POST", &path, Some(&json!({}))).unwrap();
            match status {
                200 => return,
                404 if answer["value"]["error"] == "stale element reference" => continue,
                _ => panic!("clicking {css}: {answer}"),
            }
        }
        panic!("clicking {css}: replaced five times over");
    }

    /// The text of what `css` finds first, read in one step in the page
    /// (a live view may replace the element between two WebDriver calls).
    pub fn text(&self, css: &str) -> String {
        let text = self.run(
            "const e = document.querySelector(arguments[0]); return e ? e.innerText : null;",
            json!([css]),
        );
        match text.as_str() {
            Some(t) => t.to_string(),
            None => panic!("no element {css:?} on {}", self.url()),
        }
    }

    /// Runs `script` in the page (its `arguments` are `args`); its answer.
    pub fn run(&self, script: &str, args: Value) -> Value {
        self.command(
            "POST",
            "/execute/sync",
            Some(json!({ "script": script, "args": args })),
        )
    }

    /// Runs `script`, which calls its last argument with its answer.
    pub fn run_async(&self, script: &str, args: Value) -> Value {
        self.command(
            "POST",
            "/execute/async",
            Some(json!({ "script": script, "args": args })),
        )
    }

    /// Waits until `done` holds of the page (checked every 50 ms, a minute at most).
    pub fn wait_until(&self, what: &str, done: impl Fn(&Browser) -> bool) {
        let began = Instant::now();
        while !done(self) {
            if began.elapsed() > Duration::from_secs(60) {
                let shown = self.run("return document.body.innerText.slice(0, 2000);", json!([]));
                panic!(
                    "{what}: not after a minute, on {}, which shows:\n{}",
                    self.url(),
                    shown.as_str().unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// What the page wrote to its console at level SEVERE (errors, refused
    /// scripts or styles) since the last call.
    pub fn console_errors(&self) -> Vec<String> {
        let entries = self.command("POST", "/se/log", Some(json!({"type": "browser"})));
        entries
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["level"] == "SEVERE")
            .map(|e| e["message"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// The window's size in CSS pixels (a phone's is about 390 × 844).
    pub fn resize(&self, width: u32, height: u32) {
        self.command(
            "POST",
            "/window/rect",
            Some(json!({ "width": width, "height": height })),
        );
    }

    /// Keeps a screenshot of the page as `name`.png.
    pub fn screenshot(&self, name: &str) -> PathBuf {
        use base64::Engine;
        let png = self.command("GET", "/screenshot", None);
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().unwrap_or_default())
            .unwrap();
        let path = self.shots.join(format!("{name}.png"));
        std::fs::write(&path, bytes).unwrap();
        path
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = call(self.port, "DELETE", &format!("/session/{}", self.session), None);
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
