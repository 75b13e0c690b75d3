//! The nemesis's network: one network namespace per host, joined by veth
//! pairs to a bridge in a namespace of its own, on addresses that exist only
//! inside those namespaces (the machine's own namespace gets no interface).
//! Faults are iptables rules in a chain of each host's own: partitions
//! (DROP by peer address, both ways) and packet loss (`statistic`). Dropped,
//! everything is removed, after a failure too.

use std::process::Command;

/// Every name this harness gives starts so; a run removes what an earlier
/// one left.
pub const PREFIX: &str = "bnem-";
const HUB: &str = "bnem-hub";
const SUBNET: &str = "10.213.77";
/// The chains of each host's faults: packets in, packets out.
const IN: &str = "NEMESIS-IN";
const OUT: &str = "NEMESIS-OUT";

/// One host: its namespace and address.
#[derive(Clone, Debug)]
pub struct Host {
    pub name: String,
    pub ns: String,
    pub ip: String,
}

pub struct Net {
    pub hosts: Vec<Host>,
    /// Held until the namespaces are gone.
    _lock: std::fs::File,
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    sh("ip", args)
}

fn sh(program: &str, args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new(program).args(args).output()?;
    anyhow::ensure!(
        out.status.success(),
        "{program} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

fn iptables(ns: &str, args: &[&str]) -> anyhow::Result<()> {
    let mut all = vec!["netns", "exec", ns, "iptables", "-w"];
    all.extend_from_slice(args);
    ip(&all)
}

/// Namespaces an earlier run left (killed before its clean-up).
fn leftovers() -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output();
    let text = out
        .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
        .unwrap_or_default();
    text.lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(PREFIX))
        .map(str::to_string)
        .collect()
}

/// One run at a time on a machine: the namespaces and the subnet are
/// fixed, and a run removes what an earlier one left. Held while the run lasts.
fn one_run_at_a_time() -> anyhow::Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    let path = std::env::temp_dir().join("berth-nemesis.lock");
    let file = std::fs::File::create(&path)?;
    // SAFETY: flock(2) on a file this process holds open.
    let taken = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
    anyhow::ensure!(
        taken,
        "another nemesis run holds {} on this machine: one at a time (they share the namespaces)",
        path.display()
    );
    Ok(file)
}

impl Net {
    /// The hub and one namespace per name, host `i` at `10.213.77.(10 + i)`.
    pub fn new(names: &[&str]) -> anyhow::Result<Net> {
        let lock = one_run_at_a_time()?;
        for ns in leftovers() {
            let _ = ip(&["netns", "del", &ns]);
        }
        let taken = Command::new("ip").args(["-4", "addr"]).output()?;
        anyhow::ensure!(
            !String::from_utf8_lossy(&taken.stdout).contains(SUBNET),
            "{SUBNET}.0/24 is one of this machine's own networks: the nemesis needs it free"
        );
        let mut net = Net {
            hosts: Vec::new(),
            _lock: lock,
        };
        ip(&["netns", "add", HUB])?;
        ip(&["-n", HUB, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", HUB, "link", "set", "br0", "up"])?;
        for (i, name) in names.iter().enumerate() {
            let host = Host {
                name: name.to_string(),
                ns: format!("{PREFIX}{name}"),
                ip: format!("{SUBNET}.{}", 10 + i),
            };
            ip(&["netns", "add", &host.ns])?;
            net.hosts.push(host.clone());
            let port = format!("v{i}");
            ip(&[
                "-n", HUB, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", &host.ns,
            ])?;
            ip(&["-n", HUB, "link", "set", &port, "master", "br0", "up"])?;
            ip(&[
                "-n",
                &host.ns,
                "addr",
                "add",
                &format!("{}/24", host.ip),
                "dev",
                "eth0",
            ])?;
            ip(&["-n", &host.ns, "link", "set", "eth0", "up"])?;
            ip(&["-n", &host.ns, "link", "set", "lo", "up"])?;
            for (chain, hook) in [(IN, "INPUT"), (OUT, "OUTPUT")] {
                iptables(&host.ns, &["-N", chain])?;
                iptables(&host.ns, &["-I", hook, "-j", chain])?;
            }
        }
        Ok(net)
    }

    pub fn host(&self, name: &str) -> &Host {
        self.hosts
            .iter()
            .find(|h| h.name == name)
            .unwrap_or_else(|| panic!("no host {name}"))
    }

    /// Nothing between any of `a` and any of `b`, either way.
    pub fn partition(&self, a: &[&str], b: &[&str]) -> anyhow::Result<()> {
        for x in a {
            let from = self.host(x);
            for y in b {
                let to = &self.host(y).ip;
                iptables(&from.ns, &["-A", IN, "-s", to, "-j", "DROP"])?;
                iptables(&from.ns, &["-A", OUT, "-d", to, "-j", "DROP"])?;
            }
        }
        Ok(())
    }

    /// `host` loses each packet, in and out, with `probability`.
    pub fn lose(&self, host: &str, probability: f64) -> anyhow::Result<()> {
        let p = format!("{probability}");
        let ns = &self.host(host).ns;
        for (chain, way) in [(IN, "-i"), (OUT, "-o")] {
            iptables(
                ns,
                &[
                    "-A",
                    chain,
                    way,
                    "eth0",
                    "-m",
                    "statistic",
                    "--mode",
                    "random",
                    "--probability",
                    &p,
                    "-j",
                    "DROP",
                ],
            )?;
        }
        Ok(())
    }

    /// Every partition and loss lifted.
    pub fn heal(&self) -> anyhow::Result<()> {
        for h in &self.hosts {
            iptables(&h.ns, &["-F", IN])?;
            iptables(&h.ns, &["-F", OUT])?;
        }
        Ok(())
    }
}

/// `GET path` of `addr` (plain HTTP/1.0) from inside namespace `ns`, on a
/// thread of its own that enters the namespace; the answer's text.
pub fn http_get(ns: &str, addr: &str, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;
    let (ns, addr, path) = (ns.to_string(), addr.to_string(), path.to_string());
    std::thread::spawn(move || -> Option<String> {
        let file = std::fs::File::open(format!("/var/run/netns/{ns}")).ok()?;
        // SAFETY: setns(2) on this thread alone, with a namespace file we hold open.
        if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return None;
        }
        let addr: std::net::SocketAddr = addr.parse().ok()?;
        let mut s = std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(2)).ok()?;
        s.set_read_timeout(Some(std::time::Duration::from_secs(2))).ok()?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        Some(out)
    })
    .join()
    .ok()
    .flatten()
}

impl Drop for Net {
    fn drop(&mut self) {
        for h in &self.hosts {
            let _ = ip(&["netns", "del", &h.ns]);
        }
        let _ = ip(&["netns", "del", HUB]);
    }
}
