import { backoffMs, codeName, isUndo, numberSetting, operationName } from "berth-policy";

const TRANSIENT = new Set(["unavailable", "deadline-exceeded", "aborted", "resource-exhausted"]);

/**
 * Transient failures back off exponentially from `base-ms` (500), up to
 * `max-attempts` (8); NOT_FOUND while undoing means done; anything else
 * needs an operator.
 * @type {import("berth-policy").Retry}
 */
export const retry = {
  classify(f) {
    let base, maxAttempts;
    try {
      base = numberSetting(f.settings, "base-ms", 500);
      maxAttempts = numberSetting(f.settings, "max-attempts", 8);
    } catch (e) {
      return { tag: "give-up", val: `bad setting: ${e.message}` };
    }
    const what = `${operationName(f.operation)} ${codeName(f.code)}: ${f.message}`;
    if (f.code === "not-found" && isUndo(f.operation)) return { tag: "done" };
    if (f.attempt >= maxAttempts) {
      return { tag: "give-up", val: `gave up after ${f.attempt} attempts: ${what}` };
    }
    if (TRANSIENT.has(f.code)) return { tag: "retry-after", val: backoffMs(f.attempt, base, 60000) };
    return { tag: "give-up", val: `needs an operator: ${what}` };
  },
};
