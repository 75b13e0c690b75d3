// Sample retry policy in JavaScript: the same as the Rust sample
// (guests/retry), passing the same case file.
//
// NOT_FOUND while undoing is done; transient codes back off exponentially
// (with jitter); RESOURCE_EXHAUSTED waits longer; INTERNAL and UNKNOWN are
// retried a few times; anything else needs an operator. Settings: `base-ms`,
// `max-ms`, `exhausted-base-ms`, `max-attempts`, `max-internal-attempts`.

import { backoffMs, codeName, isUndo, jitter, numberSetting, operationName } from "berth-policy";

const TRANSIENT = new Set(["cancelled", "deadline-exceeded", "unavailable", "aborted"]);

export const retry = {
  classify(f) {
    const s = f.settings;
    let base, maximum, exhaustedBase, maxAttempts, maxInternal;
    try {
      base = numberSetting(s, "base-ms", 500);
      maximum = numberSetting(s, "max-ms", 60000);
      exhaustedBase = numberSetting(s, "exhausted-base-ms", 5000);
      maxAttempts = numberSetting(s, "max-attempts", 8);
      maxInternal = numberSetting(s, "max-internal-attempts", 3);
    } catch (e) {
      return { tag: "give-up", val: `bad setting: ${e.message}` };
    }
    const what = `${operationName(f.operation)} ${codeName(f.code)}: ${f.message}`;
    if (f.code === "not-found" && isUndo(f.operation)) {
      return { tag: "done" };
    }
    if (f.attempt >= maxAttempts) {
      return { tag: "give-up", val: `gave up after ${f.attempt} attempts: ${what}` };
    }
    let delay;
    if (TRANSIENT.has(f.code)) {
      delay = backoffMs(f.attempt, base, maximum);
    } else if (f.code === "resource-exhausted") {
      delay = backoffMs(f.attempt, exhaustedBase, Math.max(maximum, exhaustedBase));
    } else if (f.code === "internal" || f.code === "unknown") {
      if (f.attempt >= maxInternal) {
        return { tag: "give-up", val: `plugin error persisted for ${f.attempt} attempts: ${what}` };
      }
      delay = backoffMs(f.attempt, base, maximum);
    } else {
      return { tag: "give-up", val: `needs an operator: ${what}` };
    }
    const seed = `${f.driver}/${what}/${f.attempt}/${f.elapsedMs}`;
    return { tag: "retry-after", val: jitter(delay, 10, seed) };
  },
};
