// Sample placement policy in JavaScript: the same as the Rust sample
// (guests/placement), passing the same case file.
//
// A node is eligible when it is healthy, inside the volume's topology, below
// its volume limit, and carries every label the volume asks for (the
// `node-selector` setting, `k=v,k2=v2`, and volume labels named
// `node-selector/<key>`). The emptiest scores highest; the volume's first
// preferred topology adds `preferred-bonus` (default 50).

import { VerdictsBuilder, get, labelSets, numberSetting, parsePairs, reachable, satisfies, topologies } from "berth-policy";

const SELECTOR_LABEL = "node-selector/";
// By the health column's bytes: 1 unhealthy, 2 unknown (0 is healthy).
const SICK = ["", "node plugin is unhealthy", "node plugin health is unknown"];

const show = (pairs) => pairs.map(([k, v]) => `${k}=${v}`).join(",");

export const placement = {
  place(request, candidates) {
    const n = candidates.topology.length;
    const v = new VerdictsBuilder(n);
    const settings = request.settings;
    let selector, bonus;
    try {
      selector = parsePairs(get(settings, "node-selector") ?? "");
      bonus = Math.min(numberSetting(settings, "preferred-bonus", 50), 1000);
    } catch (e) {
      const bad = v.reason(`bad setting: ${e.message}`);
      for (let i = 0; i < n; i++) v.refuseFor(i, bad);
      return v.finish();
    }
    for (const [k, value] of request.volume.labels) {
      if (k.startsWith(SELECTOR_LABEL)) selector.push([k.slice(SELECTOR_LABEL.length), value]);
    }
    const required =
      request.purpose === "create" ? request.volume.requisiteTopology : request.accessibleTopology;
    const preferred = request.volume.preferredTopology[0];
    const wanted = required.map(show).join(" or ");
    // Judged once per distinct topology and label set.
    const topology = topologies(candidates).map((t) => ({
      prefer: preferred !== undefined && satisfies(t, preferred),
      outside: reachable(t, required) ? 0 : v.reason(`topology ${show(t)} is outside ${wanted}`),
    }));
    const missing = labelSets(candidates).map((labels) => {
      const lacking = selector.find(([k, value]) => get(labels, k) !== value);
      return lacking === undefined ? 0 : v.reason(`label ${lacking[0]}=${lacking[1]} missing`);
    });
    const { health, publishedVolumes: published, maxVolumes: limits } = candidates;
    for (let i = 0; i < n; i++) {
      if (health[i]) {
        v.refuse(i, SICK[health[i]] ?? SICK[2]);
        continue;
      }
      const { prefer, outside } = topology[candidates.topology[i]];
      if (outside) {
        v.refuseFor(i, outside);
        continue;
      }
      const used = Number(published[i]);
      const limit = Number(limits[i]);
      if (limit && used >= limit) {
        v.refuse(i, `full: ${used} of ${limit} volumes`);
        continue;
      }
      const lacking = missing[candidates.labels[i]];
      if (lacking) {
        v.refuseFor(i, lacking);
        continue;
      }
      const score = limit ? Math.floor(((limit - used) * 100) / limit) : 100 - Math.min(used, 100);
      v.score(i, prefer ? score + bonus : score);
    }
    return v.finish();
  },
};
