// Sample placement policy in Go: the same as the Rust sample
// (guests/placement), passing the same case file.
//
// A node is eligible when it is healthy, inside the volume's topology, below
// its volume limit, and carries every label the volume asks for (the
// node-selector setting, "k=v,k2=v2", and volume labels named
// "node-selector/<key>"). The emptiest scores highest; the volume's first
// preferred topology adds preferred-bonus (default 50).
package main

import (
	"fmt"
	"strings"

	policy "berth.dev/policy"
	"berth.dev/policy/placement"
)

const selectorLabel = "node-selector/"

func place(request policy.PlacementRequest, c *policy.Candidates) policy.Verdicts {
	n := c.Nodes()
	v := policy.NewVerdicts(n)
	settings := request.Settings
	text, _ := settings.Get("node-selector")
	selector, err := policy.ParsePairs(text)
	var bonus uint64
	if err == nil {
		bonus, err = policy.NumberSetting(settings, "preferred-bonus", 50)
	}
	if err != nil {
		bad := v.Reason("bad setting: " + err.Error())
		for i := range n {
			v.RefuseFor(i, bad)
		}
		return v.Finish()
	}
	bonus = min(bonus, 1000)
	for _, label := range request.Volume.Labels {
		if key, ok := strings.CutPrefix(label.Key, selectorLabel); ok {
			selector = append(selector, policy.Pair{Key: key, Value: label.Value})
		}
	}
	required := request.AccessibleTopology
	if request.Purpose == policy.Create {
		required = request.Volume.RequisiteTopology
	}
	var preferred policy.Pairs
	if len(request.Volume.PreferredTopology) > 0 {
		preferred = request.Volume.PreferredTopology[0]
	}
	wanted := make([]string, len(required))
	for i, t := range required {
		wanted[i] = t.String()
	}
	// Judged once per distinct topology and label set.
	type judged struct {
		prefer  bool
		outside policy.Reason
	}
	var topologies []judged
	for _, t := range c.TopologySets() {
		j := judged{prefer: preferred != nil && policy.Satisfies(t, preferred)}
		if !policy.Reachable(t, required) {
			j.outside = v.Reason(fmt.Sprintf("topology %s is outside %s", t.String(), strings.Join(wanted, " or ")))
		}
		topologies = append(topologies, j)
	}
	var missing []policy.Reason
	for _, labels := range c.LabelSetPairs() {
		var lacking policy.Reason
		for _, want := range selector {
			if got, ok := labels.Get(want.Key); !ok || got != want.Value {
				lacking = v.Reason(fmt.Sprintf("label %s=%s missing", want.Key, want.Value))
				break
			}
		}
		missing = append(missing, lacking)
	}
	for i := range n {
		switch c.HealthOf(i) {
		case policy.Unhealthy:
			v.Refuse(i, "node plugin is unhealthy")
			continue
		case policy.Unknown:
			v.Refuse(i, "node plugin health is unknown")
			continue
		}
		topology := topologies[c.Topology[i]]
		if topology.outside != 0 {
			v.RefuseFor(i, topology.outside)
			continue
		}
		used, limit := c.PublishedVolumes[i], c.MaxVolumes[i]
		if limit != 0 && used >= limit {
			v.Refuse(i, fmt.Sprintf("full: %d of %d volumes", used, limit))
			continue
		}
		if lacking := missing[c.Labels[i]]; lacking != 0 {
			v.RefuseFor(i, lacking)
			continue
		}
		score := int32(100 - min(used, 100))
		if limit != 0 {
			score = int32((limit - used) * 100 / limit)
		}
		if topology.prefer {
			score += int32(bonus)
		}
		v.Score(i, score)
	}
	return v.Finish()
}

func init() { placement.Export(place) }

func main() {}
