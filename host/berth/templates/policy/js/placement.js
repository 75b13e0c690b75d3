import { VerdictsBuilder, reachable, topologies } from "berth-policy";

const show = (pairs) => pairs.map(([k, v]) => `${k}=${v}`).join(",");

/**
 * A node may take a volume when its plugin is healthy, it is in the
 * volume's topology and below its volume limit; the emptiest first.
 * @type {import("berth-policy").Placement}
 */
export const placement = {
  place(request, candidates) {
    const n = candidates.topology.length;
    const v = new VerdictsBuilder(n);
    const required =
      request.purpose === "create" ? request.volume.requisiteTopology : request.accessibleTopology;
    // Judged once per distinct topology, not once per node.
    const outside = topologies(candidates).map((t) =>
      reachable(t, required) ? 0 : v.reason(`topology ${show(t)} is outside the volume's`),
    );
    for (let i = 0; i < n; i++) {
      if (candidates.health[i] !== 0) {
        v.refuse(i, "node plugin is not healthy");
        continue;
      }
      const reason = outside[candidates.topology[i]];
      if (reason) {
        v.refuseFor(i, reason);
        continue;
      }
      const used = candidates.publishedVolumes[i];
      const limit = candidates.maxVolumes[i];
      if (limit && used >= limit) {
        v.refuse(i, "full");
      } else {
        // Emptiest first: the free share of the limit, or fewer volumes.
        v.score(i, limit ? Math.floor(((limit - used) * 100) / limit) : 100 - Math.min(used, 100));
      }
    }
    return v.finish();
  },
};
