//go:build wasip1

package placement

import (
	policy "berth.dev/policy"
	"berth.dev/policy/internal/abi"
)

// Offsets in the arguments, tuple<placement-request, candidates>.
const (
	purpose    = abi.VolumeSize
	accessible = abi.VolumeSize + 4
	settings   = abi.VolumeSize + 12
	candidates = abi.VolumeSize + 24
)

// place(request, candidates) -> verdicts: both arguments arrive by pointer;
// the three columns go back through a return area.
//
//go:wasmexport berth:policy/placement@0.4.0#place
func place(args uint32) uint32 {
	request := policy.PlacementRequest{
		Volume:             abi.Volume(args),
		Purpose:            policy.Purpose(abi.U8(args + purpose)),
		AccessibleTopology: abi.PairsList(args + accessible),
		Settings:           abi.Pairs(args + settings),
	}
	c := args + candidates
	nodes := policy.Candidates{
		Strings:          abi.Strings(c),
		PairKeys:         abi.U32s(c + 8),
		PairValues:       abi.U32s(c + 16),
		Topologies:       abi.U32s(c + 24),
		LabelSets:        abi.U32s(c + 32),
		Topology:         abi.U32s(c + 40),
		Labels:           abi.U32s(c + 48),
		MaxVolumes:       abi.U64s(c + 56),
		PublishedVolumes: abi.U64s(c + 64),
		Health:           abi.U8s(c + 72),
	}
	v := decide(request, &nodes)
	ret := abi.Alloc(24, 4)
	abi.PutU32s(ret, v.Refusals)
	scores := make([]uint32, len(v.Scores))
	for i, s := range v.Scores {
		scores[i] = uint32(s)
	}
	abi.PutU32s(ret+8, scores)
	abi.PutStrings(ret+16, v.Reasons)
	return ret
}

//go:wasmexport cabi_post_berth:policy/placement@0.4.0#place
func placePost(uint32) { abi.Reset() }
