// Generated from wit/ by `cargo xtask js-types`: do not edit.
// The berth:policy@0.4.0 contract in the component model's JavaScript mapping:
// records are objects with camelCase fields, enums their WIT names,
// variants { tag, val }, lists arrays, integers numbers. A function
// returning result<T, E> returns T and throws to answer the error.

// interface types

/**
 * Key/value pairs in a stable order: topology segments, labels, CSI
 * parameters, operator settings. Keys are unique within one list.
 */
export type Pairs = [string, string][];

/**
 * How a volume may be used, as in the CSI spec's `AccessMode`.
 */
export type AccessMode =
  | "single-node-writer"
  | "single-node-reader-only"
  | "multi-node-reader-only"
  | "multi-node-single-writer"
  | "multi-node-multi-writer"
  | "single-node-single-writer"
  | "single-node-multi-writer";

/**
 * Whether the volume is used as a file system or a raw block device.
 */
export type AccessType =
  | "mount"
  | "block";

/**
 * Bytes the volume must have at least and may have at most; 0 means unset.
 */
export interface CapacityRange {
  requiredBytes: number;
  limitBytes: number;
}

/**
 * What the operator declared about a volume.
 */
export interface Volume {
  /**
   * Berth's own id for the volume: unique, stable for its whole life.
   */
  id: string;
  /**
   * The operator's name for the volume, unique among live volumes:
   * `name` in the default namespace, `namespace/name` in any other.
   * Free text of at most 317 bytes; not necessarily a valid backend name.
   */
  name: string;
  /**
   * The CSI driver name that serves the volume, e.g. `hostpath.csi.k8s.io`.
   */
  driver: string;
  capacity: CapacityRange;
  accessMode: AccessMode;
  accessType: AccessType;
  /**
   * CSI `parameters` passed to CreateVolume (opaque to Berth).
   */
  parameters: Pairs;
  /**
   * The operator's labels on the volume.
   */
  labels: Pairs;
  /**
   * Topologies the volume must be reachable from (any one of them);
   * empty means no requirement.
   */
  requisiteTopology: Pairs[];
  /**
   * Topologies the operator prefers, most preferred first.
   */
  preferredTopology: Pairs[];
}

/**
 * A node's health as Berth last saw its CSI node plugin.
 */
export type Health =
  | "healthy"
  | "unhealthy"
  | "unknown";

/**
 * gRPC status codes, named as in the gRPC and CSI specs.
 */
export type Code =
  | "cancelled"
  | "unknown"
  | "invalid-argument"
  | "deadline-exceeded"
  | "not-found"
  | "already-exists"
  | "permission-denied"
  | "resource-exhausted"
  | "failed-precondition"
  | "aborted"
  | "out-of-range"
  | "unimplemented"
  | "internal"
  | "unavailable"
  | "data-loss"
  | "unauthenticated";

/**
 * The CSI call that failed.
 *
 * 0.2.0 added controller-expand-volume to delete-snapshot, 0.3.0 the
 * last three (CSI's ControllerModifyVolume and the group controller's
 * snapshots). A module is never asked about an operation its release
 * has no name for: Berth's built-in retry policy classifies those
 * failures.
 */
export type Operation =
  | "create-volume"
  | "delete-volume"
  | "controller-publish-volume"
  | "controller-unpublish-volume"
  | "node-stage-volume"
  | "node-unstage-volume"
  | "node-publish-volume"
  | "node-unpublish-volume"
  | "controller-expand-volume"
  | "node-expand-volume"
  | "create-snapshot"
  | "delete-snapshot"
  | "controller-modify-volume"
  | "create-volume-group-snapshot"
  | "delete-volume-group-snapshot";

// interface admission

/**
 * The call asked for, with what it asks.
 */
export type Call =
  | { tag: "create-volume" }
  | { tag: "publish-volume"; val: string }
  | { tag: "expand-volume"; val: number }
  | { tag: "modify-volume"; val: Pairs }
  | { tag: "create-snapshot"; val: string }
  | { tag: "delete-volume" };

/**
 * Who asks.
 */
export interface Caller {
  /**
   * `management` (the API socket's user), `token:<accessor>`,
   * `cert:<subject>`, or `docker:<node>` (a node's Docker). Never a
   * secret.
   */
  identity: string;
  /**
   * The ACL policies its token or certificate holds (none for the
   * management identity and for a node's Docker).
   */
  policies: string[];
}

/**
 * What a namespace holds, as Berth counts it for quotas.
 */
export interface Usage {
  volumes: number;
  /**
   * The bytes its volumes ask for (their required bytes).
   */
  bytes: number;
  snapshots: number;
}

export interface AdmissionRequest {
  call: Call;
  caller: Caller;
  /**
   * The namespace the volume is in.
   */
  namespace: string;
  /**
   * The plugin (its name in `berth.toml`) that serves the volume.
   */
  plugin: string;
  /**
   * For create-volume, the volume as Berth would store it; for the
   * other calls, the volume as it stands.
   */
  volume: Volume;
  /**
   * The secret the volume names, if any: its name, never its contents.
   */
  secret: string | undefined;
  /**
   * What the namespace holds now (the request not counted).
   */
  usage: Usage;
  /**
   * The operator's settings for this module (from `berth.toml`).
   */
  settings: Pairs;
}

/**
 * One field of a new volume set by the module.
 */
export type Change =
  | { tag: "parameter"; val: [string, string] }
  | { tag: "label"; val: [string, string] }
  | { tag: "required-bytes"; val: number }
  | { tag: "limit-bytes"; val: number }
  | { tag: "plugin"; val: string }
  | { tag: "access-mode"; val: AccessMode }
  | { tag: "requisite-topology"; val: Pairs[] };

/**
 * A change, and why: shown in the volume's events and `volume explain`.
 */
export interface FieldChange {
  change: Change;
  reason: string;
}

export type Verdict =
  | { tag: "allow" }
  | { tag: "deny"; val: string }
  | { tag: "allow-with"; val: FieldChange[] };

/**
 * Admission: whether Berth accepts a request, and what a new volume gets
 * that its caller left out. Asked before Berth accepts a create (a clone
 * and a restore included), publish, expand, modify, snapshot or delete,
 * whoever asks: the API's callers and each node's Docker.
 */
export interface Admission {
  /**
   * Must be deterministic and quick: Berth asks once per request, before
   * anything is written, under the module's deadline.
   */
  admit(request: AdmissionRequest): Verdict;
}

// interface naming

export interface NamingRequest {
  volume: Volume;
  /**
   * The operator's settings for this module (from `berth.toml`).
   */
  settings: Pairs;
}

/**
 * Volume naming: the name a volume gets on the storage backend.
 */
export interface Naming {
  /**
   * The name Berth sends as `CreateVolumeRequest.name`, the plugin's
   * idempotency key.
   *
   * Must be deterministic: the same request always gives the same name.
   * Berth asks once per volume, checks the answer (non-empty, at most 128
   * bytes, no control characters, unique among live volumes) and stores it
   * before the first CreateVolume, so retries and restarts reuse it.
   *
   * Return `err(reason)` to refuse a volume: it is not created and the
   * reason is shown to the operator.
   */
  volumeName(request: NamingRequest): string;
}

// interface placement

/**
 * Why Berth asks.
 */
export type Purpose =
  | "create"
  | "publish";

export interface PlacementRequest {
  volume: Volume;
  purpose: Purpose;
  /**
   * For `publish`: where the created volume is reachable from (any one
   * of these); empty means everywhere.
   */
  accessibleTopology: Pairs[];
  /**
   * The operator's settings for this module (from `berth.toml`).
   */
  settings: Pairs;
}

/**
 * The nodes to judge, as columns: entry `i` of every per-node list
 * describes node `i`. Apart from `strings`, every list holds numbers,
 * and a list of numbers crosses into the guest as one copy: a thousand
 * nodes cost little more than ten.
 *
 * A cluster has far fewer distinct topologies and label sets than nodes,
 * and far fewer distinct keys and values than segments. So each string
 * is sent once, each topology and label set once as a range of
 * key/value pairs, and nodes refer to them by index: a policy can judge
 * each topology once rather than once per node. Node names are not sent:
 * a policy judges a node by its topology, labels, load and health (an
 * operator who wants a rule about particular nodes labels them).
 */
export interface Candidates {
  /**
   * Every key and value the topologies and label sets use, each once.
   */
  strings: string[];
  /**
   * Key/value pairs as indexes into `strings`: pair `p` is
   * `strings[pair-keys[p]]` = `strings[pair-values[p]]`.
   */
  pairKeys: number[];
  pairValues: number[];
  /**
   * The distinct topologies (segments the nodes' CSI plugins reported,
   * e.g. `zone=z1`), as ranges of pairs: topology `t` is the pairs
   * from `topologies[t]` up to, not including, `topologies[t + 1]`.
   * One entry more than there are topologies; the first is 0. Keys
   * are unique within a range.
   */
  topologies: number[];
  /**
   * The distinct sets of the operator's labels on nodes, as ranges of
   * pairs like `topologies`, starting where the topologies' pairs end.
   */
  labelSets: number[];
  /**
   * Per node: index of its topology (0 for the first range).
   */
  topology: number[];
  /**
   * Per node: index of its label set.
   */
  labels: number[];
  /**
   * Per node: most volumes it may take from this driver; 0 means no
   * limit (as in CSI's `max_volumes_per_node`).
   */
  maxVolumes: number[];
  /**
   * Per node: volumes of this driver already published to it.
   */
  publishedVolumes: number[];
  /**
   * Per node: its health as the position of the case in `health`:
   * 0 healthy, 1 unhealthy, 2 unknown. Bytes rather than the enum,
   * because a list of enums crosses one entry at a time.
   */
  health: number[];
}

/**
 * The judgement on every node, as columns in candidate order; each list
 * has one entry per node.
 */
export interface Verdicts {
  /**
   * Per node: 0 when the node may take the volume; otherwise 1 + the
   * index in `reasons` of why it may not.
   */
  refusals: number[];
  /**
   * Per node: among eligible nodes, higher is better; ties keep
   * candidate order. Ignored for refused nodes.
   */
  scores: number[];
  /**
   * Why nodes were refused, in a few words for operators, each distinct
   * reason once. At most 256 bytes each.
   */
  reasons: string[];
}

/**
 * Placement: which nodes may take a volume, and which are best.
 */
export interface Placement {
  /**
   * The verdicts on `candidates`, one entry per node in each column.
   */
  place(request: PlacementRequest, candidates: Candidates): Verdicts;
}

// interface retry

export interface Failure {
  operation: Operation;
  /**
   * The gRPC code the plugin answered with. Berth reports a call that
   * got no answer in time as `deadline-exceeded` and an unreachable
   * plugin as `unavailable`.
   */
  code: Code;
  /**
   * The plugin's message (or Berth's, for the two cases above).
   */
  message: string;
  /**
   * 1 for the first failure of this operation, 2 for the second...
   */
  attempt: number;
  /**
   * Milliseconds since the operation's first attempt.
   */
  elapsedMs: number;
  /**
   * The CSI driver name.
   */
  driver: string;
  /**
   * The operator's settings for this module (from `berth.toml`).
   */
  settings: Pairs;
}

export type Decision =
  | { tag: "retry-after"; val: number }
  | { tag: "give-up"; val: string }
  | { tag: "done" };

/**
 * Retry classification: what to do after a CSI call failed.
 */
export interface Retry {
  classify(failure: Failure): Decision;
}
