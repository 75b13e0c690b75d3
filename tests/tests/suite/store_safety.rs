//! The store under hostile conditions: files other users could read, a
//! full disk, a store emptied or damaged, and stored ids that would point
//! outside a node's directory. Real `berth serve`, driven through the CLI.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use berth_tests::{Cluster, ClusterSpec, texts};

#[test]
fn the_store_is_for_its_owner_and_wider_modes_are_reported() {
    let mut c = Cluster::start(ClusterSpec::builtin());
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let store = c.store_path();
    assert_eq!(mode(&store), 0o600);
    assert_eq!(mode(store.parent().unwrap()), 0o700);
    c.kill_serve();
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o644)).unwrap();
    c.start_serve();
    assert!(c.log().contains("readable by other users"), "{}", c.log());
}

/// A second `berth serve` on the same config stops at the store's lock and
/// takes nothing of the first's: its API and Docker sockets still answer.
/// (It used to replace the Docker socket before failing on the lock, and
/// remove it as it exited.)
#[test]
fn a_second_serve_on_the_same_config_leaves_the_first_ones_sockets() {
    let socket = berth_tests::docker::PluginSocket::new();
    let extra = format!(
        "[docker]\nnode = \"node-a\"\nsocket = \"{}\"\n",
        socket.path.display()
    );
    let c = Cluster::start(ClusterSpec {
        extra: &extra,
        ..ClusterSpec::builtin()
    });
    berth_tests::wait_for(
        "the Docker plugin socket",
        Duration::from_secs(10),
        || socket.path.exists(),
        || c.log(),
    );
    let config = c.config.display().to_string();
    let out = c.berth(&["serve", "--config", &config]);
    let (stdout, stderr) = texts(&out);
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert!(stderr.contains("lock") || stderr.contains("in use"), "{stderr}");
    assert!(
        std::os::unix::net::UnixStream::connect(&socket.path).is_ok(),
        "the first server's Docker socket: {stderr}"
    );
    c.ok(&["status"]);
}

/// A small tmpfs mounted over a directory for as long as it lives (root only).
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `size` at `dir`, keeping the regular files that
    /// were there; `None` when this process may not mount.
    fn over(dir: &std::path::Path, size: &str) -> Option<Tmpfs> {
        // SAFETY: geteuid reads the process's own credentials.
        if unsafe { libc::geteuid() } != 0 {
            return None;
        }
        let kept = berth_tests::test_dir();
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_file() {
                std::fs::copy(entry.path(), kept.path().join(entry.file_name())).unwrap();
            }
        }
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700"), "tmpfs"])
            .arg(dir)
            .status()
            .unwrap();
        assert!(mounted.success(), "mounting a tmpfs at {}", dir.display());
        for entry in std::fs::read_dir(kept.path()).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
        }
        Some(Tmpfs(dir.to_path_buf()))
    }

    /// Fills the file system up; the filler file, to remove for space.
    fn fill(&self) -> std::path::PathBuf {
        use std::io::Write;
        let path = self.0.join("filler");
        let mut f = std::fs::File::create(&path).unwrap();
        let chunk = vec![0xa5u8; 64 << 10];
        while f.write_all(&chunk).is_ok() {}
        let _ = f.sync_all();
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// A full disk fails the writes that need it, visibly (`/readyz` and the
/// caller's error), and once space returns writes succeed again without a
/// restart; nothing acknowledged is lost.
#[test]
fn a_full_disk_fails_writes_visibly_until_space_returns() {
    use berth_tests::scrape::wait_ready;
    let (mut c, port) = Cluster::builtin_with_metrics();
    c.create_in("before", "zone=a");
    c.kill_serve();
    let state = c.store_path().parent().unwrap().to_path_buf();
    let Some(disk) = Tmpfs::over(&state, "16m") else {
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    };
    c.start_serve();
    wait_ready(port, 200, Duration::from_secs(20));
    let filler = disk.fill();
    // redb writes into space its file already has until it must grow it.
    let big = format!("p={}", "x".repeat(4000));
    let failed = (0..2000).find_map(|i| {
        let name = format!("full-{i}");
        let out = c.berth(&["volume", "create", &name, "--plugin", "hostpath", "--param", &big]);
        (!out.status.success()).then(|| (name, texts(&out).1))
    });
    let (full, stderr) = failed.expect("a create fails on a full disk");
    assert!(
        stderr.contains("UNAVAILABLE") || stderr.contains("INTERNAL"),
        "{stderr}"
    );
    let not_ready = wait_ready(port, 503, Duration::from_secs(20));
    assert!(
        not_ready.contains("[-]store") && not_ready.contains("cannot write"),
        "{not_ready}"
    );

    std::fs::remove_file(filler).unwrap();
    wait_ready(port, 200, Duration::from_secs(20));
    c.create_in("after", "zone=a");
    c.kill_serve();
    c.start_serve();
    let names = c.volume_names();
    assert!(
        names.contains(&"before".into()) && names.contains(&"after".into()),
        "{names:?}"
    );
    assert!(
        !names.contains(&full),
        "a create that failed is not there: {names:?}"
    );
    c.kill_serve();
    drop(disk);
}

/// A store file that is there but empty or cut short is refused with what
/// to do, never taken for a new store; one with damaged pages is an error,
/// never a panic. Neither is changed.
#[test]
fn an_emptied_or_damaged_store_is_refused_and_left_alone() {
    let mut c = Cluster::start(ClusterSpec::builtin());
    c.create_in("v", "zone=a");
    c.kill_serve();
    let store = c.store_path();
    let whole = std::fs::read(&store).unwrap();
    let serve = |c: &Cluster| {
        let out = berth_tests::berth(&["serve", "--config", &c.config.display().to_string()]);
        let (_, stderr) = texts(&out);
        assert!(!out.status.success(), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        stderr
    };

    std::fs::write(&store, b"").unwrap();
    let stderr = serve(&c);
    assert!(
        stderr.contains("cut short or emptied") && stderr.contains("backup"),
        "{stderr}"
    );
    assert_eq!(std::fs::metadata(&store).unwrap().len(), 0, "left as it was");

    std::fs::write(&store, &whole[..whole.len() / 3]).unwrap();
    serve(&c);

    let mut damaged = whole.clone();
    for b in &mut damaged[4096..] {
        *b = !*b;
    }
    std::fs::write(&store, &damaged).unwrap();
    serve(&c);
    assert_eq!(std::fs::read(&store).unwrap(), damaged, "left as it was");

    std::fs::write(&store, &whole).unwrap();
    c.start_serve();
    assert!(c.ok(&["volume", "get", "v"]).contains("v"));
}

/// A volume's id names its paths on nodes: a record whose id is not a plain
/// name (written by whoever could write the store) is refused when the
/// store is read, naming it, before any node is asked to act on it.
#[test]
fn a_stored_volume_id_that_would_leave_the_node_directory_is_refused() {
    use berth::model::{VolumeRecord, VolumeSpec};
    use berth::store::{RedbStore, Store};
    let dir = berth_tests::test_dir();
    let state = dir.path().join("state.redb");
    berth_tests::block_on(async {
        let store = RedbStore::open(&state).unwrap();
        let mut r = VolumeRecord::new("../../escape".into(), VolumeSpec::default());
        r.spec_mut().name = "escape".into();
        store.put(&r).await.unwrap();
    });
    let config = dir.path().join("berth.toml");
    std::fs::write(
        &config,
        "state = \"state.redb\"\n[[plugin]]\nname = \"p\"\ncontroller = \"unix:///nowhere.sock\"\n",
    )
    .unwrap();
    let out = berth_tests::berth(&["serve", "--config", config.to_str().unwrap()]);
    let (_, err) = texts(&out);
    assert!(!out.status.success());
    assert!(
        err.contains("../../escape") && err.contains("not starting with '.'"),
        "{err}"
    );
    assert!(!dir.path().join("escape").exists());
}
