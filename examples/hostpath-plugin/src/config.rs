//! Command-line flags of the sample plugin.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Parser, ValueEnum};

/// A directory-backed CSI plugin: every volume is a directory under --state-dir.
///
/// It serves Identity, Controller and Node on one unix socket, keeps its state
/// on disk so it survives restarts, and can inject faults (errors, latency,
/// hangs) for reliability tests. Run one process as the controller (`--mode
/// controller`, or `--node false`) and one per node (`--mode node`, or
/// `--controller false`), all sharing the same --state-dir.
#[derive(Debug, Parser)]
#[command(name = "hostpath-plugin", version, args_override_self = true)]
pub struct Config {
    /// Socket to listen on: unix:///path/to/csi.sock or a plain path.
    #[arg(long)]
    pub endpoint: String,

    /// Directory holding the volumes and their metadata (created if missing).
    #[arg(long)]
    pub state_dir: PathBuf,

    /// The socket's mode, in octal: 0600 lets only this process's user in;
    /// 0660 with --socket-group lets that group's members (a CO running as
    /// another user) dial it. Never writable by others.
    #[arg(long, default_value = "0600", value_parser = parse_socket_mode)]
    pub socket_mode: u32,

    /// The group the socket belongs to, by name or number (e.g. `berth`, the
    /// user the packaged `berth serve` runs as).
    #[arg(long)]
    pub socket_group: Option<String>,

    /// Driver name reported by GetPluginInfo.
    #[arg(long, default_value = "hostpath.csi.berth.dev")]
    pub name: String,

    /// Vendor version reported by GetPluginInfo.
    #[arg(long, default_value = env!("CARGO_PKG_VERSION"))]
    pub vendor_version: String,

    /// Node id reported by NodeGetInfo.
    #[arg(long, default_value = "node1")]
    pub node_id: String,

    /// A topology segment of this node, KEY=VALUE; repeat for several. Any
    /// segment makes the plugin report VOLUME_ACCESSIBILITY_CONSTRAINTS.
    #[arg(long = "topology", value_parser = parse_segment)]
    pub topology: Vec<(String, String)>,

    /// Most volumes this node can take (0: no limit).
    #[arg(long, default_value_t = 0)]
    pub max_volumes: u64,

    /// Serve the Controller service; `false` is another spelling of `--mode node`.
    #[arg(long, default_value_t = true, action = ArgAction::Set)]
    pub controller: bool,

    /// Serve the Node service; `false` is another spelling of `--mode controller`.
    #[arg(long, default_value_t = true, action = ArgAction::Set)]
    pub node: bool,

    /// Which of the driver's services this process serves, as drivers are
    /// commonly deployed: `controller` (one process) and `node` (one per
    /// node), each still reporting the driver's capabilities, CONTROLLER_SERVICE
    /// included, and answering UNIMPLEMENTED to the other service; or `all`.
    #[arg(long, value_enum, default_value_t = Mode::All)]
    pub mode: Mode,

    /// Offer PUBLISH_UNPUBLISH_VOLUME (ControllerPublish/Unpublish).
    #[arg(long, default_value_t = true, action = ArgAction::Set)]
    pub publish_unpublish: bool,

    /// Offer STAGE_UNSTAGE_VOLUME (NodeStage/Unstage).
    #[arg(long, default_value_t = true, action = ArgAction::Set)]
    pub stage_unstage: bool,

    /// Total capacity in bytes shared by all volumes.
    #[arg(long, default_value_t = 1 << 40)]
    pub capacity: i64,

    /// How NodeStage/NodePublish make a volume visible at a path.
    #[arg(long, value_enum, default_value_t = MountMode::Auto)]
    pub mount_mode: MountMode,

    /// Sync metadata writes to disk (off trades crash safety for speed).
    #[arg(long, default_value_t = true, action = ArgAction::Set)]
    pub fsync: bool,

    /// Fail a share of calls with a gRPC code, CODE=RATE (e.g. UNAVAILABLE=0.3); repeatable.
    #[arg(long = "fault", value_parser = parse_fault)]
    pub faults: Vec<(tonic::Code, f64)>,

    /// Share of calls that hang until the caller's deadline.
    #[arg(long, default_value_t = 0.0)]
    pub hang_rate: f64,

    /// Latency added to every affected call (e.g. 20ms).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub latency: Option<Duration>,

    /// Delay before answering CreateVolume, CreateSnapshot,
    /// ControllerExpandVolume and ControllerGetVolume, after their work is
    /// done and committed: the window in which a caller that crashes has made
    /// the change (or asked the question) without hearing back. Applies to the
    /// affected calls (--fault-calls).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub reply_delay: Option<Duration>,

    /// Calls that faults apply to, comma-separated (e.g. CreateVolume,Probe).
    /// Default: every Controller and Node call.
    #[arg(long, value_delimiter = ',')]
    pub fault_calls: Vec<String>,

    /// Share of the affected undo calls (DeleteVolume, NodeUnpublishVolume)
    /// that answer OK without doing their work: a plugin that lies, for the
    /// checkers. The journal marks each such answer `"lied": true`.
    #[arg(long, default_value_t = 0.0)]
    pub lie_rate: f64,

    /// Seed for the fault dice, for reproducible runs.
    #[arg(long)]
    pub seed: Option<u64>,

    /// Probe answers ready=false for this long after start.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub not_ready_for: Option<Duration>,

    /// A secret every call that carries secrets must include, KEY=VALUE.
    #[arg(long, value_parser = parse_segment)]
    pub require_secret: Option<(String, String)>,

    /// Break a rule of the CSI spec on purpose, to test how callers cope; repeatable.
    #[arg(long, value_enum)]
    pub misbehave: Vec<Misbehaviour>,

    /// Answer as the Kubernetes CSI hostpath driver does where it differs
    /// from this plugin: NodeUnpublishVolume of an unknown volume answers
    /// NOT_FOUND, ControllerGetVolume of one answers OK with an abnormal
    /// condition, NodeStageVolume of one answers OK (which the spec forbids),
    /// and a restore or clone asking for less than its source is refused
    /// (OUT_OF_RANGE) instead of grown to the source's size.
    #[arg(long)]
    pub like_reference_driver: bool,

    /// Do not offer a capability, by its CSI name (SINGLE_NODE_MULTI_WRITER, EXPAND_VOLUME,
    /// CREATE_DELETE_SNAPSHOT, LIST_SNAPSHOTS, CLONE_VOLUME, GET_CAPACITY,
    /// LIST_VOLUMES, GET_VOLUME, GET_VOLUME_STATS, VOLUME_CONDITION, MODIFY_VOLUME,
    /// GET_SNAPSHOT, CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT); repeatable.
    /// The calls it names answer UNIMPLEMENTED.
    #[arg(long = "disable", value_parser = parse_capability)]
    pub disabled: Vec<String>,

    /// Bytes available to volumes accessible from one topology segment,
    /// KEY=VALUE=BYTES (e.g. zone=b=1073741824); repeatable. GetCapacity
    /// answers it for that segment and CreateVolume enforces it.
    #[arg(long = "capacity-in", value_parser = parse_segment_capacity)]
    pub segment_capacity: Vec<(String, String, i64)>,

    /// Leave an OPTIONAL field of the CSI spec unset in every answer, as
    /// drivers in the wild do; repeatable, `all` for every one.
    #[arg(long = "omit", value_enum)]
    pub omitted: Vec<Omit>,

    /// A snapshot answers ready_to_use=false until this long after it was
    /// cut (as a driver that uploads its snapshots does), and cannot be
    /// restored until then.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub snapshot_ready_after: Option<Duration>,

    /// The CSI version the plugin speaks (1.0 to 1.12): capabilities that came
    /// later are not offered, and access modes that came later are refused as
    /// unknown (SINGLE_NODE_SINGLE_WRITER and SINGLE_NODE_MULTI_WRITER before 1.5).
    #[arg(long, value_parser = parse_csi_version, default_value = "1.12")]
    pub csi_version: u32,

    /// Append a line per answered call to FILE: the full method name and the
    /// gRPC code's number (`/csi.v1.Controller/CreateVolume 0`).
    #[arg(long)]
    pub call_log: Option<PathBuf>,
    /// Append a JSON line to FILE for every call that changed something and
    /// answered OK (what, which volume, node and path, when): what a
    /// checker of several plugin processes reads. Processes may share FILE.
    #[arg(long)]
    pub journal: Option<PathBuf>,
}

/// Capabilities `--disable` can take away.
pub const OPTIONAL_CAPABILITIES: &[&str] = &[
    "SINGLE_NODE_MULTI_WRITER",
    "EXPAND_VOLUME",
    "CREATE_DELETE_SNAPSHOT",
    "LIST_SNAPSHOTS",
    "CLONE_VOLUME",
    "GET_CAPACITY",
    "LIST_VOLUMES",
    "GET_VOLUME",
    "GET_VOLUME_STATS",
    "VOLUME_CONDITION",
    "MODIFY_VOLUME",
    "GET_SNAPSHOT",
    "CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT",
];

/// The CSI minor version each optional capability came with.
const CAPABILITY_SINCE: &[(&str, u32)] = &[
    ("EXPAND_VOLUME", 1),
    ("GET_VOLUME_STATS", 1),
    ("GET_VOLUME", 3),
    ("VOLUME_CONDITION", 3),
    ("SINGLE_NODE_MULTI_WRITER", 5),
    ("MODIFY_VOLUME", 9),
    ("GET_SNAPSHOT", 12),
    ("CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT", 8),
];

fn parse_socket_mode(text: &str) -> Result<u32, String> {
    let mode = u32::from_str_radix(text.trim_start_matches("0o"), 8)
        .ok()
        .filter(|m| *m <= 0o777)
        .ok_or_else(|| format!("{text:?} is not an octal mode like 0600"))?;
    if mode & 0o002 != 0 {
        return Err(format!(
            "{text}: a socket others may write to lets anyone on the machine create, publish and delete volumes; \
             use 0600, or 0660 with --socket-group"
        ));
    }
    Ok(mode)
}

fn parse_csi_version(text: &str) -> Result<u32, String> {
    match text.strip_prefix("1.").map(str::parse::<u32>) {
        Some(Ok(minor)) if minor <= 12 => Ok(minor),
        _ => Err(format!("{text:?} is not a CSI version from 1.0 to 1.12")),
    }
}

fn parse_capability(text: &str) -> Result<String, String> {
    let name = text.to_ascii_uppercase();
    if OPTIONAL_CAPABILITIES.contains(&name.as_str()) {
        Ok(name)
    } else {
        Err(format!("{text:?} is not one of {OPTIONAL_CAPABILITIES:?}"))
    }
}

fn parse_segment_capacity(text: &str) -> Result<(String, String, i64), String> {
    let bad = || format!("{text:?} is not KEY=VALUE=BYTES");
    let (segment, bytes) = text.rsplit_once('=').ok_or_else(bad)?;
    let (k, v) = parse_segment(segment).map_err(|_| bad())?;
    let bytes: i64 = bytes.parse().map_err(|_| bad())?;
    Ok((k, v, bytes))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum MountMode {
    /// Bind mounts where the process may mount, symlinks otherwise.
    Auto,
    Bind,
    Symlink,
}

/// OPTIONAL answer fields `--omit` leaves unset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Omit {
    /// Volume.capacity_bytes (0: the capacity is unknown).
    Capacity,
    /// Volume.accessible_topology, while offering VOLUME_ACCESSIBILITY_CONSTRAINTS.
    VolumeTopology,
    /// Volume.volume_context.
    VolumeContext,
    /// ControllerPublishVolumeResponse.publish_context.
    PublishContext,
    /// ProbeResponse.ready (unset: ready).
    ProbeReady,
    /// Snapshot.size_bytes (0: the size is unknown).
    SnapshotSize,
    /// GetCapacityResponse's maximum and minimum volume sizes.
    VolumeSizeBounds,
    All,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Misbehaviour {
    /// GetPluginInfo returns an empty name.
    EmptyName,
    /// GetPluginInfo returns a name that is not in domain-name form.
    BadName,
    /// GetPluginInfo returns an empty vendor_version.
    EmptyVersion,
    /// NodeGetInfo returns an empty node_id.
    EmptyNodeId,
    /// NodeGetInfo returns a negative max_volumes_per_node.
    NegativeMaxVolumes,
    /// DeleteVolume answers NOT_FOUND for a volume that does not exist
    /// (the spec: OK, deleting is idempotent).
    NotFoundOnDelete,
    /// CreateVolume of a known name with an incompatible capacity returns
    /// the existing volume (the spec: ALREADY_EXISTS).
    IgnoresSizeConflict,
    /// CreateVolume without a name creates a volume (the spec: INVALID_ARGUMENT).
    AcceptsMissingName,
    /// NodePublishVolume of a SINGLE_NODE_SINGLE_WRITER volume at a second
    /// target path succeeds (the spec: FAILED_PRECONDITION).
    SecondWriter,
    /// ControllerPublishVolume and ControllerModifyVolume of a volume that
    /// does not exist answer INTERNAL (the spec: NOT_FOUND).
    InternalForNotFound,
    /// ControllerPublishVolume to a node it does not know answers OK (the
    /// spec: NOT_FOUND).
    AcceptsUnknownNode,
    /// NodeStageVolume without volume_capability stages the volume (the
    /// spec: INVALID_ARGUMENT).
    StagesWithoutCapability,
    /// NodeGetVolumeStats of a volume that does not exist answers OK with no
    /// usage (the spec: NOT_FOUND).
    StatsForUnknownVolume,
    /// NodeUnpublishVolume leaves the target path behind (the spec: the
    /// plugin removes it).
    KeepsTargetPath,
    /// ValidateVolumeCapabilities of a volume that does not exist confirms
    /// the capabilities (the spec: NOT_FOUND).
    ConfirmsUnknownVolume,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    Controller,
    Node,
    All,
}

impl Config {
    /// The flags of this process, with `--controller false` and `--node
    /// false` settled into `--mode` (a combination that serves nothing
    /// exits with a message naming it).
    pub fn from_args() -> Self {
        let mut config = Config::parse();
        if let Err(why) = config.settle_mode() {
            use clap::CommandFactory;
            Config::command()
                .error(clap::error::ErrorKind::ArgumentConflict, why)
                .exit();
        }
        config
    }

    /// `--controller false` is `--mode node` and `--node false` is `--mode
    /// controller`: one process shape, whichever spelling, so that every
    /// process reports the driver's capabilities (CONTROLLER_SERVICE
    /// included) as the spec asks of all instances of a driver.
    pub fn settle_mode(&mut self) -> Result<(), String> {
        self.mode = match (self.controller, self.node, self.mode) {
            (true, true, mode) => mode,
            (false, false, _) => {
                return Err(
                    "--controller false with --node false leaves this process nothing to serve".into(),
                );
            }
            (false, true, Mode::All | Mode::Node) => Mode::Node,
            (true, false, Mode::All | Mode::Controller) => Mode::Controller,
            (false, true, Mode::Controller) => {
                return Err(
                    "--mode controller with --controller false leaves this process nothing to serve".into(),
                );
            }
            (true, false, Mode::Node) => {
                return Err("--mode node with --node false leaves this process nothing to serve".into());
            }
        };
        self.controller = true;
        self.node = true;
        Ok(())
    }

    /// Whether this process serves the Controller service.
    pub fn serves_controller(&self) -> bool {
        self.mode != Mode::Node
    }

    /// Whether this process serves the Node service.
    pub fn serves_node(&self) -> bool {
        self.mode != Mode::Controller
    }

    /// Whether the plugin offers an optional capability (see `--disable`
    /// and `--csi-version`).
    pub fn offers(&self, capability: &str) -> bool {
        let since = CAPABILITY_SINCE
            .iter()
            .find(|(c, _)| *c == capability)
            .map_or(0, |(_, minor)| *minor);
        since <= self.csi_version && !self.disabled.iter().any(|d| d == capability)
    }

    pub fn misbehaves(&self, m: Misbehaviour) -> bool {
        self.misbehave.contains(&m)
    }

    /// Whether answers leave `field` unset (see `--omit`).
    pub fn omits(&self, field: Omit) -> bool {
        self.omitted.iter().any(|o| *o == field || *o == Omit::All)
    }

    pub fn topology_map(&self) -> BTreeMap<String, String> {
        self.topology.iter().cloned().collect()
    }
}

fn parse_segment(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("{text:?} is not KEY=VALUE")),
    }
}

fn parse_fault(text: &str) -> Result<(tonic::Code, f64), String> {
    let (code, rate) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not CODE=RATE (e.g. UNAVAILABLE=0.3)"))?;
    let code =
        berth_proto::code::from_name(code).ok_or_else(|| format!("{code:?} is not a gRPC code name"))?;
    let rate: f64 = rate
        .parse()
        .map_err(|_| format!("rate {rate:?} is not a number"))?;
    if !(0.0..=1.0).contains(&rate) {
        return Err(format!("rate {rate} is not between 0 and 1"));
    }
    Ok((code, rate))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settled(args: &[&str]) -> Result<Mode, String> {
        let mut c = Config::try_parse_from(
            ["hostpath-plugin", "--endpoint", "s", "--state-dir", "d"]
                .iter()
                .chain(args),
        )
        .unwrap();
        c.settle_mode()?;
        assert!(c.controller && c.node, "the spellings are settled into --mode");
        Ok(c.mode)
    }

    #[test]
    fn the_split_flags_are_spellings_of_mode() {
        assert_eq!(settled(&[]), Ok(Mode::All));
        assert_eq!(settled(&["--controller", "false"]), Ok(Mode::Node));
        assert_eq!(settled(&["--node", "false"]), Ok(Mode::Controller));
        assert_eq!(
            settled(&["--controller", "false", "--mode", "node"]),
            Ok(Mode::Node)
        );
        assert_eq!(
            settled(&["--node", "false", "--mode", "controller"]),
            Ok(Mode::Controller)
        );
        for nothing in [
            &["--controller", "false", "--node", "false"][..],
            &["--controller", "false", "--mode", "controller"],
            &["--node", "false", "--mode", "node"],
        ] {
            let why = settled(nothing).unwrap_err();
            assert!(why.contains("nothing to serve"), "{why}");
        }
    }
}
