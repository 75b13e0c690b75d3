//! Berth under a service manager, as the packaged systemd units run it:
//! `Type=notify` readiness told by the processes themselves over a real
//! datagram socket (`NOTIFY_SOCKET`), and the units' commands and packaged
//! configs as the packages install them.

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use berth_tests::scrape::{get, wait_ready};
use berth_tests::{Cluster, ClusterSpec, PluginBuilder, free_port, test_dir, texts};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// systemd's side of the protocol: a datagram socket at `path`.
fn notify_socket(path: &Path) -> UnixDatagram {
    let socket = UnixDatagram::bind(path).unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    socket
}

/// The next message, waited for (up to the socket's timeout).
fn next(socket: &UnixDatagram, what: &str) -> String {
    let mut buf = [0u8; 256];
    let n = socket
        .recv(&mut buf)
        .unwrap_or_else(|e| panic!("no {what} message: {e}"));
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// Nothing was sent so far.
fn nothing_yet(socket: &UnixDatagram) -> Option<String> {
    socket.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 256];
    let got = socket
        .recv(&mut buf)
        .ok()
        .map(|n| String::from_utf8_lossy(&buf[..n]).into_owned());
    socket.set_nonblocking(false).unwrap();
    got
}

fn sigterm(pid: u32) {
    // SAFETY: a plain kill(2) on our own child's pid.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
}

#[test]
fn the_server_tells_systemd_it_is_ready_only_once_ready_and_when_it_stops() {
    let dir = test_dir();
    let port = free_port();
    std::fs::write(
        dir.path().join("berth.toml"),
        format!(
            "state = \"state/berth.redb\"\nmetrics = \"127.0.0.1:{port}\"\nfingerprint_interval = \"200ms\"\n\n\
             [[plugin]]\nname = \"hostpath\"\ncontroller = \"plugin.sock\"\n"
        ),
    )
    .unwrap();
    let notify = notify_socket(&dir.path().join("notify"));
    let log = dir.path().join("serve.log");
    let mut serve = Command::new(berth_tests::bin("berth"))
        .args(["serve", "--config"])
        .arg(dir.path().join("berth.toml"))
        .env("NOTIFY_SOCKET", dir.path().join("notify"))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::create(dir.path().join("serve.err")).unwrap())
        .spawn()
        .unwrap();

    // Up, answering, but its plugin is not there: not ready, and not said to be.
    let body = wait_ready(port, 503, Duration::from_secs(30));
    assert!(body.contains("hostpath"), "{body}");
    assert_eq!(
        nothing_yet(&notify),
        None,
        "ready told before the server was ready"
    );

    let _plugin = PluginBuilder::new(dir.path(), "plugin").spawn();
    let ready = next(&notify, "READY=1");
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready}");
    let (status, body) = get(port, "/readyz").unwrap();
    assert_eq!(status, 200, "told ready while /readyz says {body}");

    sigterm(serve.id());
    assert_eq!(next(&notify, "STOPPING=1"), "STOPPING=1");
    assert!(serve.wait().unwrap().success());
}

#[test]
fn the_agent_tells_systemd_it_is_ready_once_its_session_is_open() {
    let mut c = Cluster::start(ClusterSpec {
        nodes: vec![("node-a", "a")],
        agents: true,
        ..ClusterSpec::default()
    });
    let path = c.dir.path().join("notify-agent");
    let notify = notify_socket(&path);
    c.agents[0].kill();
    c.kill_serve();

    // With no server the agent is up but not ready, and does not say it is.
    c.agents[0].start_with(&[("NOTIFY_SOCKET", &path)]);
    berth_tests::wait_for(
        "the agent to fail its first dial",
        Duration::from_secs(30),
        || c.agents[0].log_text().contains("no session with the server"),
        || c.agents[0].log_text(),
    );
    assert_eq!(nothing_yet(&notify), None, "ready told with no server");

    c.start_serve();
    let ready = next(&notify, "READY=1");
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready}");
    c.wait_nodes(&["node-a"], "ready", Duration::from_secs(20));

    c.agents[0].terminate();
    assert_eq!(next(&notify, "STOPPING=1"), "STOPPING=1");
}

/// A unit's value of `key` (the first line setting it).
fn unit_value(text: &str, unit: &str, key: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("{unit} has no {key}"))
        .to_string()
}

/// The packaged units run the installed binaries' real commands on the
/// packaged configs, which those commands' own checks pass, and wait for
/// the processes' own word that they are ready.
#[test]
fn the_packaged_units_check_and_run_the_packaged_configs() {
    for (unit, config) in [
        ("berth-serve.service", "berth.toml"),
        ("berth-agent.service", "agent.toml"),
    ] {
        let text = std::fs::read_to_string(format!("{ROOT}/packaging/systemd/{unit}")).unwrap();
        assert_eq!(unit_value(&text, unit, "Type"), "notify", "{unit}");
        assert_eq!(unit_value(&text, unit, "NotifyAccess"), "main", "{unit}");
        let installed = format!("/etc/berth/{config}");
        let packaged = format!("{ROOT}/packaging/config/{config}");
        for key in ["ExecStartPre", "ExecStart"] {
            let line = unit_value(&text, unit, key);
            let words: Vec<&str> = line.split_whitespace().collect();
            let program = words[0]
                .strip_prefix("/usr/bin/")
                .unwrap_or_else(|| panic!("{unit}: {line}"));
            assert_eq!(words.last(), Some(&installed.as_str()), "{unit}: {line}");
            // The same arguments on the packaged config, with the binary built here.
            let mut args: Vec<&str> = words[1..].to_vec();
            *args.last_mut().unwrap() = &packaged;
            if key == "ExecStart" {
                args.insert(args.len() - 2, "--check");
            }
            let out = Command::new(berth_tests::bin(program))
                .args(&args)
                .output()
                .unwrap();
            let (stdout, stderr) = texts(&out);
            assert!(out.status.success(), "{unit} {key}: {stdout}{stderr}");
            assert!(stdout.contains("valid"), "{unit} {key}: {stdout}");
        }
    }
}
