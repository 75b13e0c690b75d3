from berth_policy import VerdictsBuilder, reachable, topologies
from wit_world.exports.placement import Candidates, PlacementRequest, Purpose


class Placement(exports.Placement):
    """A node may take a volume when its plugin is healthy, it is in the
    volume's topology and below its volume limit; the emptiest first."""

    def place(self, request: PlacementRequest, candidates: Candidates):
        n = len(candidates.topology)
        v = VerdictsBuilder(n)
        if request.purpose == Purpose.CREATE:
            required = request.volume.requisite_topology
        else:
            required = request.accessible_topology
        # Judged once per distinct topology, not once per node.
        outside = [
            None if reachable(t, required) else v.reason(f"topology {show(t)} is outside the volume's")
            for t in topologies(candidates)
        ]
        for i in range(n):
            if candidates.health[i] != 0:
                v.refuse(i, "node plugin is not healthy")
                continue
            reason = outside[candidates.topology[i]]
            if reason is not None:
                v.refuse_for(i, reason)
                continue
            used, limit = candidates.published_volumes[i], candidates.max_volumes[i]
            if limit and used >= limit:
                v.refuse(i, "full")
            else:
                # Emptiest first: the free share of the limit, or fewer volumes.
                v.score(i, (limit - used) * 100 // limit if limit else 100 - min(used, 100))
        return v.finish()


def show(pairs) -> str:
    return ",".join(f"{k}={v}" for k, v in pairs)
