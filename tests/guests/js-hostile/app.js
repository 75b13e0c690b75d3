// A JavaScript policy module that misbehaves in the way its `behaviour`
// setting names, for the engine's containment tests:
//
// - `loop`: never returns;
// - `memory-bomb`: allocates until something stops it;
// - `clock`: reads the wall clock (WASI's clocks: a trapping stub);
// - `random`: draws a random number (seeded when the module was built);
// - `throw`: throws, which is a refusal the module meant;
// - anything else: a well-formed answer.

import { VerdictsBuilder, get } from "berth-policy";

function misbehave(settings) {
  const behaviour = get(settings, "behaviour") ?? "";
  if (behaviour === "loop") {
    let n = 0;
    for (;;) n += 1;
  }
  if (behaviour === "memory-bomb") {
    const hoard = [];
    for (;;) hoard.push(new ArrayBuffer(4 << 20));
  }
  if (behaviour === "clock") return `clock-${Date.now()}`;
  if (behaviour === "random") return `random-${Math.random()}`;
  if (behaviour === "throw") throw new Error("hostile JavaScript guest threw on purpose");
  return behaviour;
}

export const naming = {
  volumeName(request) {
    const answer = misbehave(request.settings);
    return answer ? `${answer}-${request.volume.name}` : `ok-${request.volume.name}`;
  },
};

export const placement = {
  place(request, candidates) {
    misbehave(request.settings);
    return new VerdictsBuilder(candidates.topology.length).finish();
  },
};

export const retry = {
  classify(failure) {
    misbehave(failure.settings);
    return { tag: "retry-after", val: 1000 };
  },
};
