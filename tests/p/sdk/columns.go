package policy

// Nodes is the number of candidate nodes.
func (c *Candidates) Nodes() int { return len(c.Topology) }

func (c *Candidates) ranges(offsets []uint32) []Pairs {
	var out []Pairs
	for i := 0; i+1 < len(offsets); i++ {
		var pairs Pairs
		for p := offsets[i]; p < offsets[i+1] && int(p) < len(c.PairKeys); p++ {
			pairs = append(pairs, Pair{c.text(c.PairKeys[p]), c.text(c.PairValues[p])})
		}
		out = append(out, pairs)
	}
	return out
}

func (c *Candidates) text(i uint32) string {
	if int(i) < len(c.Strings) {
		return c.Strings[i]
	}
	return ""
}

// TopologySets are the distinct topologies as pairs, in the order the
// per-node Topology column indexes them.
func (c *Candidates) TopologySets() []Pairs { return c.ranges(c.Topologies) }

// LabelSetPairs are the distinct label sets as pairs, in the order the
// per-node Labels column indexes them.
func (c *Candidates) LabelSetPairs() []Pairs { return c.ranges(c.LabelSets) }

// HealthOf is node i's health.
func (c *Candidates) HealthOf(i int) Health {
	if i < len(c.Health) && c.Health[i] <= uint8(Unknown) {
		return Health(c.Health[i])
	}
	return Unknown
}

// Reason is a refusal's reason, shared by every node refused for it.
type Reason uint32

// VerdictsBuilder builds a placement answer: every node starts eligible
// with score 0; each distinct reason is sent once, however many nodes it
// refuses.
type VerdictsBuilder struct {
	v    Verdicts
	seen map[string]Reason
}

// NewVerdicts starts an answer for nodes nodes.
func NewVerdicts(nodes int) *VerdictsBuilder {
	return &VerdictsBuilder{
		v:    Verdicts{Refusals: make([]uint32, nodes), Scores: make([]int32, nodes)},
		seen: map[string]Reason{},
	}
}

// Score sets node's score; among eligible nodes, higher is better.
func (b *VerdictsBuilder) Score(node int, score int32) { b.v.Scores[node] = score }

// Reason adds a reason to refuse any number of nodes for, with RefuseFor.
func (b *VerdictsBuilder) Reason(text string) Reason {
	b.v.Reasons = append(b.v.Reasons, text)
	return Reason(len(b.v.Reasons))
}

// RefuseFor refuses node for a reason made by Reason.
func (b *VerdictsBuilder) RefuseFor(node int, reason Reason) { b.v.Refusals[node] = uint32(reason) }

// Refuse refuses node because of text, shared with every node refused for
// the same text.
func (b *VerdictsBuilder) Refuse(node int, text string) {
	reason, ok := b.seen[text]
	if !ok {
		reason = b.Reason(text)
		b.seen[text] = reason
	}
	b.RefuseFor(node, reason)
}

// Finish is the Verdicts place returns.
func (b *VerdictsBuilder) Finish() Verdicts { return b.v }
