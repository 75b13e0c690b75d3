// Declarations of the helpers in index.js, and the contract's types
// (contract.d.ts, generated from Berth's WIT package).

import type { Candidates, Change, Code, Operation, Pairs, Verdicts } from "./contract.js";

export * from "./contract.js";

/** The value of `key` in a list of pairs (settings, labels, topology). */
export function get(pairs: Pairs, key: string): string | undefined;
/** A setting as a whole number, or `fallback` when absent; throws naming the setting when it is not one. */
export function numberSetting(settings: Pairs, key: string, fallback: number): number;
/** A setting as a list separated by `,` (blanks dropped), or `undefined` when absent. */
export function listSetting(settings: Pairs, key: string): string[] | undefined;
/** An admission change as `volume explain` and the events show it: `label owner=team-a`... */
export function changeText(change: Change): string;
/** `k=v,k2=v2` as pairs; blank input gives none. Throws on a part without `=`. */
export function parsePairs(text: string): Pairs;
/** Whether every segment of `required` is in `topology` with the same value. */
export function satisfies(topology: Pairs, required: Pairs): boolean;
/** Whether a node in `topology` reaches any of `accessible` (empty: everywhere). */
export function reachable(topology: Pairs, accessible: Pairs[]): boolean;
/** Lower-case ASCII letters and digits; runs of anything else become one `-`. */
export function sanitize(text: string): string;
/** `text` as UTF-8 bytes (a module has no TextEncoder). */
export function utf8(text: string): number[];
/** FNV-1a, 64 bits: the same in every run, build and language. */
export function stableHash(text: string): bigint;
/** The low 32 bits of `stableHash(text)` as 8 hex digits. */
export function shortHash(text: string): string;
/** `base * 2^(attempt-1)`, capped at `max`. */
export function backoffMs(attempt: number, base: number, max: number): number;
/** `ms` moved by up to `percent` percent either way, by the hash of `seed`. */
export function jitter(ms: number, percent: number, seed: string): number;
/** Whether an operation undoes something, so that NOT_FOUND means done. */
export function isUndo(operation: Operation): boolean;
/** The CSI method name of an operation: `CreateVolume`, `NodePublishVolume`... */
export function operationName(operation: Operation): string;
/** The gRPC name of a code, as the CSI spec writes it: `NOT_FOUND`... */
export function codeName(code: Code): string;
/** Placement's distinct topologies as pairs, in the order the per-node `topology` column indexes them. */
export function topologies(candidates: Candidates): Pairs[];
/** Placement's distinct label sets as pairs, in the order the per-node `labels` column indexes them. */
export function labelSets(candidates: Candidates): Pairs[];
/** Node `i`'s health. */
export function healthOf(candidates: Candidates, i: number): "healthy" | "unhealthy" | "unknown";

/** A placement answer: every node starts eligible with score 0; each distinct reason is sent once. */
export class VerdictsBuilder {
  constructor(nodes: number);
  /** Among eligible nodes, higher is better. */
  score(node: number, score: number): void;
  /** Adds a reason to refuse any number of nodes for, with `refuseFor`; its number. */
  reason(text: string): number;
  refuseFor(node: number, reason: number): void;
  /** Refuses `node` because of `text`, shared with every node refused for the same. */
  refuse(node: number, text: string): void;
  /** The `verdicts` record `place` returns. */
  finish(): Verdicts;
}
