package main

import (
	policy "berth.dev/policy"
	"berth.dev/policy/placement"
)

// place lets a node take a volume when its plugin is healthy, it is in the
// volume's topology and below its volume limit; the emptiest first.
func place(request policy.PlacementRequest, c *policy.Candidates) policy.Verdicts {
	v := policy.NewVerdicts(c.Nodes())
	required := request.AccessibleTopology
	if request.Purpose == policy.Create {
		required = request.Volume.RequisiteTopology
	}
	// Judged once per distinct topology, not once per node.
	var outside []policy.Reason
	for _, t := range c.TopologySets() {
		var reason policy.Reason
		if !policy.Reachable(t, required) {
			reason = v.Reason("topology " + t.String() + " is outside the volume's")
		}
		outside = append(outside, reason)
	}
	for i := range c.Nodes() {
		if c.HealthOf(i) != policy.Healthy {
			v.Refuse(i, "node plugin is not healthy")
			continue
		}
		if reason := outside[c.Topology[i]]; reason != 0 {
			v.RefuseFor(i, reason)
			continue
		}
		used, limit := c.PublishedVolumes[i], c.MaxVolumes[i]
		switch {
		case limit != 0 && used >= limit:
			v.Refuse(i, "full")
		case limit != 0:
			// Emptiest first: the free share of the limit...
			v.Score(i, int32((limit-used)*100/limit))
		default:
			// ...or fewer volumes.
			v.Score(i, int32(100-min(used, 100)))
		}
	}
	return v.Finish()
}

func init() { placement.Export(place) }
