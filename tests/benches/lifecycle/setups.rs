//! The ways of running Berth the end-to-end benchmark compares.

/// One way of running Berth the benchmark compares.
pub(crate) struct Setup {
    pub(crate) label: &'static str,
    pub(crate) guests: bool,
    pub(crate) nodes: &'static [&'static str],
    pub(crate) agents: bool,
    /// The store in a three-member etcd on loopback instead of the embedded file.
    pub(crate) etcd: bool,
    /// `metrics` on, scraped every second throughout.
    pub(crate) metrics: bool,
    /// Extra `berth.toml` lines.
    pub(crate) extra: &'static str,
    /// With `guests`: decisions a second module shadows (the candidate guest).
    pub(crate) shadow: &'static [&'static str],
    /// No Berth: the plugin processes driven directly, the same calls per
    /// volume with the same requests in flight (the limit).
    pub(crate) direct: bool,
    /// Through the TLS API on loopback, with an ACL token whose policy
    /// grants the calls (checked on each), instead of the API socket.
    pub(crate) remote: bool,
    /// With `guests`: the sample admission module asked before every request.
    pub(crate) admission: bool,
}

/// Built-in policies, one in-process node, the embedded store.
const NATIVE: Setup = Setup {
    label: "native",
    guests: false,
    nodes: &["node-a"],
    agents: false,
    etcd: false,
    metrics: false,
    extra: "",
    shadow: &[],
    direct: false,
    remote: false,
    admission: false,
};

const THREE_NODES: &[&str] = &["node-a", "node-b", "node-c"];

pub(crate) const SETUPS: [Setup; 12] = [
    NATIVE,
    Setup {
        label: "tls-acl",
        remote: true,
        ..NATIVE
    },
    Setup {
        label: "wasm",
        guests: true,
        ..NATIVE
    },
    Setup {
        label: "admission",
        guests: true,
        admission: true,
        ..NATIVE
    },
    Setup {
        label: "shadow",
        guests: true,
        shadow: &["naming", "placement", "retry"],
        ..NATIVE
    },
    Setup {
        label: "3-nodes",
        nodes: THREE_NODES,
        ..NATIVE
    },
    Setup {
        label: "3-agents",
        nodes: THREE_NODES,
        agents: true,
        ..NATIVE
    },
    Setup {
        label: "etcd",
        etcd: true,
        ..NATIVE
    },
    Setup {
        label: "metrics",
        metrics: true,
        ..NATIVE
    },
    Setup {
        label: "no-events",
        extra: "events_per_volume = 0",
        ..NATIVE
    },
    Setup {
        label: "no-log",
        extra: "decision_log = 0",
        ..NATIVE
    },
    Setup {
        label: "limit",
        direct: true,
        ..NATIVE
    },
];
