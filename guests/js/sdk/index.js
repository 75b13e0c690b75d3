// Helpers for Berth policy modules in JavaScript and TypeScript: the same
// as the Rust SDK's (berth-guest) and the Python SDK's (berth_policy), so a
// policy reads alike in each language and gives the same answers.
//
// Values follow the component model's JavaScript mapping: records are
// objects with camelCase fields, enums their WIT names ("not-found"),
// variants { tag, val }, lists arrays, u64 numbers. A module runs in
// QuickJS with no WASI at all: no clock, no randomness, no TextEncoder.

/** The value of `key` in a list of pairs (settings, labels, topology). */
export function get(pairs, key) {
  for (const [k, v] of pairs) {
    if (k === key) return v;
  }
  return undefined;
}

/** A setting as a whole number, or `fallback` when absent; throws naming the setting when it is not one. */
export function numberSetting(settings, key, fallback) {
  const value = get(settings, key);
  if (value === undefined) return fallback;
  const text = value.trim();
  if (!/^[0-9]+$/.test(text)) {
    throw new Error(`setting "${key}" must be a whole number, not ${JSON.stringify(value)}`);
  }
  return Number(text);
}

/** A setting as a list separated by `,` (blanks dropped), or `undefined` when absent. */
export function listSetting(settings, key) {
  const value = get(settings, key);
  if (value === undefined) return undefined;
  return value
    .split(",")
    .map((item) => item.trim())
    .filter((item) => item !== "");
}

/** An admission change as `volume explain` and the events show it: `label owner=team-a`... */
export function changeText(change) {
  const v = change.val;
  switch (change.tag) {
    case "parameter":
    case "label":
      return `${change.tag} ${v[0]}=${v[1]}`;
    case "requisite-topology":
      return `requisite-topology ${v.map((t) => t.map(([k, x]) => `${k}=${x}`).join(",")).join(" or ")}`;
    default:
      return `${change.tag} ${v}`;
  }
}

/** `k=v,k2=v2` as pairs; blank input gives none. Throws on a part without `=`. */
export function parsePairs(text) {
  const out = [];
  for (const raw of text.split(",")) {
    const part = raw.trim();
    if (!part) continue;
    const at = part.indexOf("=");
    if (at < 0 || !part.slice(0, at).trim()) {
      throw new Error(`${JSON.stringify(part)} is not key=value`);
    }
    out.push([part.slice(0, at).trim(), part.slice(at + 1).trim()]);
  }
  return out;
}

/** Whether every segment of `required` is in `topology` with the same value. */
export function satisfies(topology, required) {
  return required.every(([k, v]) => get(topology, k) === v);
}

/** Whether a node in `topology` reaches any of `accessible` (empty: everywhere). */
export function reachable(topology, accessible) {
  return accessible.length === 0 || accessible.some((t) => satisfies(topology, t));
}

/** Lower-case ASCII letters and digits; runs of anything else become one `-`. */
export function sanitize(text) {
  let out = "";
  for (const c of text) {
    if (/^[A-Za-z0-9]$/.test(c)) {
      out += c.toLowerCase();
    } else if (out && !out.endsWith("-")) {
      out += "-";
    }
  }
  return out.replace(/^-+|-+$/g, "");
}

/** `text` as UTF-8 bytes (a module has no TextEncoder). */
export function utf8(text) {
  const bytes = [];
  for (const c of text) {
    const p = c.codePointAt(0);
    if (p < 0x80) bytes.push(p);
    else if (p < 0x800) bytes.push(0xc0 | (p >> 6), 0x80 | (p & 63));
    else if (p < 0x10000) bytes.push(0xe0 | (p >> 12), 0x80 | ((p >> 6) & 63), 0x80 | (p & 63));
    else bytes.push(0xf0 | (p >> 18), 0x80 | ((p >> 12) & 63), 0x80 | ((p >> 6) & 63), 0x80 | (p & 63));
  }
  return bytes;
}

const FNV_OFFSET = 0xcbf29ce484222325n;
const FNV_PRIME = 0x100000001b3n;
const U64 = 0xffffffffffffffffn;

/** FNV-1a, 64 bits, as a BigInt: the same in every run, build and language. */
export function stableHash(text) {
  let h = FNV_OFFSET;
  for (const b of utf8(text)) {
    h = ((h ^ BigInt(b)) * FNV_PRIME) & U64;
  }
  return h;
}

/** The low 32 bits of `stableHash(text)` as 8 hex digits, as the samples name volumes. */
export function shortHash(text) {
  return (stableHash(text) & 0xffffffffn).toString(16).padStart(8, "0");
}

/** `base * 2^(attempt-1)`, capped at `max`. */
export function backoffMs(attempt, base, max) {
  const exp = Math.min(Math.max(attempt - 1, 0), 63);
  const delay = BigInt(base) << BigInt(exp);
  return delay > BigInt(max) ? max : Number(delay);
}

/** `ms` moved by up to `percent` percent either way, by the hash of `seed`: different failures spread, one failure is stable. */
export function jitter(ms, percent, seed) {
  const spread = Math.floor((ms * Math.min(percent, 100)) / 100);
  if (spread === 0) return ms;
  return ms - spread + Number(stableHash(seed) % BigInt(2 * spread + 1));
}

const UNDO = new Set([
  "delete-volume",
  "controller-unpublish-volume",
  "node-unstage-volume",
  "node-unpublish-volume",
  "delete-snapshot",
  "delete-volume-group-snapshot",
]);

/** Whether an operation undoes something, so that NOT_FOUND means done. */
export function isUndo(operation) {
  return UNDO.has(operation);
}

/** The CSI method name of an operation: `CreateVolume`, `NodePublishVolume`... */
export function operationName(operation) {
  return operation
    .split("-")
    .map((w) => w.charAt(0).toUpperCase() + w.slice(1))
    .join("");
}

/** The gRPC name of a code, as the CSI spec writes it: `NOT_FOUND`... */
export function codeName(code) {
  return code.toUpperCase().replace(/-/g, "_");
}

function ranges(candidates, offsets) {
  const { strings, pairKeys, pairValues } = candidates;
  const out = [];
  for (let i = 0; i + 1 < offsets.length; i++) {
    const pairs = [];
    for (let p = offsets[i]; p < offsets[i + 1]; p++) {
      pairs.push([strings[pairKeys[p]], strings[pairValues[p]]]);
    }
    out.push(pairs);
  }
  return out;
}

/** Placement's distinct topologies as pairs, in the order the per-node `topology` column indexes them. */
export function topologies(candidates) {
  return ranges(candidates, candidates.topologies);
}

/** Placement's distinct label sets as pairs, in the order the per-node `labels` column indexes them. */
export function labelSets(candidates) {
  return ranges(candidates, candidates.labelSets);
}

const HEALTH = ["healthy", "unhealthy", "unknown"];

/** Node `i`'s health: "healthy", "unhealthy" or "unknown". */
export function healthOf(candidates, i) {
  return HEALTH[candidates.health[i]] ?? "unknown";
}

/**
 * A placement answer: every node starts eligible with score 0; each
 * distinct reason is sent once, however many nodes it refuses.
 */
export class VerdictsBuilder {
  constructor(nodes) {
    this.refusals = new Array(nodes).fill(0);
    this.scores = new Array(nodes).fill(0);
    this.reasons = [];
    this.seen = new Map();
  }

  /** Among eligible nodes, higher is better. */
  score(node, score) {
    this.scores[node] = score;
  }

  /** Adds a reason to refuse any number of nodes for, with `refuseFor`. */
  reason(text) {
    this.reasons.push(text);
    return this.reasons.length;
  }

  refuseFor(node, reason) {
    this.refusals[node] = reason;
  }

  /** Refuses `node` because of `text`, shared with every node refused for the same. */
  refuse(node, text) {
    let reason = this.seen.get(text);
    if (reason === undefined) {
      reason = this.reason(text);
      this.seen.set(text, reason);
    }
    this.refusals[node] = reason;
  }

  /** The `verdicts` record `place` returns. */
  finish() {
    return { refusals: this.refusals, scores: this.scores, reasons: this.reasons };
  }
}
