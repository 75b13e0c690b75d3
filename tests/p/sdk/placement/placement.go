// Package placement exports the placement decision: import it and call
// Export in init with the function that judges nodes.
package placement

import policy "berth.dev/policy"

// Func judges every candidate node; its Verdicts have one entry per node in
// each column (policy.NewVerdicts builds them).
type Func func(policy.PlacementRequest, *policy.Candidates) policy.Verdicts

var decide Func = func(_ policy.PlacementRequest, c *policy.Candidates) policy.Verdicts {
	v := policy.NewVerdicts(c.Nodes())
	for i := range c.Nodes() {
		v.Refuse(i, "the module exports placement but registered no function (placement.Export)")
	}
	return v.Finish()
}

// Export makes f the module's placement decision.
func Export(f Func) { decide = f }
