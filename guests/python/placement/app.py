"""Sample placement policy in Python: the same as the Rust sample
(guests/placement), passing the same case file.

A node is eligible when it is healthy, inside the volume's topology, below
its volume limit, and carries every label the volume asks for (the
``node-selector`` setting, ``k=v,k2=v2``, and volume labels named
``node-selector/<key>``). The emptiest scores highest; the volume's first
preferred topology adds ``preferred-bonus`` (default 50).
"""

from berth_policy import (
    VerdictsBuilder,
    get,
    label_sets,
    number_setting,
    parse_pairs,
    reachable,
    satisfies,
    topologies,
)
from wit_world import exports
from wit_world.exports.placement import Candidates, PlacementRequest, Purpose

SELECTOR_LABEL = "node-selector/"
# By the health column's bytes: 1 unhealthy, 2 unknown (0 is healthy).
SICK = {1: "node plugin is unhealthy", 2: "node plugin health is unknown"}


def show(pairs) -> str:
    return ",".join(f"{k}={v}" for k, v in pairs)


class Placement(exports.Placement):
    def place(self, request: PlacementRequest, candidates: Candidates):
        n = len(candidates.topology)
        v = VerdictsBuilder(n)
        settings = request.settings
        try:
            selector = parse_pairs(get(settings, "node-selector") or "")
            bonus = min(number_setting(settings, "preferred-bonus", 50), 1000)
        except ValueError as e:
            bad = v.reason(f"bad setting: {e}")
            for i in range(n):
                v.refuse_for(i, bad)
            return v.finish()
        for k, value in request.volume.labels:
            if k.startswith(SELECTOR_LABEL):
                selector.append((k[len(SELECTOR_LABEL):], value))
        if request.purpose == Purpose.CREATE:
            required = request.volume.requisite_topology
        else:
            required = request.accessible_topology
        preferred = request.volume.preferred_topology[0] if request.volume.preferred_topology else None
        wanted = " or ".join(show(t) for t in required)
        # Judged once per distinct topology and label set.
        topology = [
            (
                preferred is not None and satisfies(t, preferred),
                None if reachable(t, required) else v.reason(f"topology {show(t)} is outside {wanted}"),
            )
            for t in topologies(candidates)
        ]
        missing = []
        for labels in label_sets(candidates):
            lacking = next(((k, val) for k, val in selector if get(labels, k) != val), None)
            missing.append(None if lacking is None else v.reason(f"label {lacking[0]}={lacking[1]} missing"))
        health = candidates.health
        published = candidates.published_volumes
        limits = candidates.max_volumes
        for i in range(n):
            if health[i]:
                v.refuse(i, SICK.get(health[i], SICK[2]))
                continue
            prefer, outside = topology[candidates.topology[i]]
            if outside is not None:
                v.refuse_for(i, outside)
                continue
            used, limit = published[i], limits[i]
            if limit and used >= limit:
                v.refuse(i, f"full: {used} of {limit} volumes")
                continue
            lacking = missing[candidates.labels[i]]
            if lacking is not None:
                v.refuse_for(i, lacking)
                continue
            score = (limit - used) * 100 // limit if limit else 100 - min(used, 100)
            v.score(i, score + bonus if prefer else score)
        return v.finish()
