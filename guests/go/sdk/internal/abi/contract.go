//go:build wasip1

package abi

import policy "berth.dev/policy"

// Sizes of the contract's records in memory (wasm32).
const (
	pairSize   = 16 // tuple<string, string>
	listSize   = 8  // a list's pointer and length
	VolumeSize = 80 // types.volume, aligned to 8
)

func list(addr uint32) (uint32, uint32) { return U32(addr), U32(addr + 4) }

// Pairs reads a list<tuple<string, string>> at addr.
func Pairs(addr uint32) policy.Pairs {
	ptr, n := list(addr)
	out := make(policy.Pairs, n)
	for i := range out {
		e := ptr + uint32(i)*pairSize
		out[i] = policy.Pair{Key: StringAt(e), Value: StringAt(e + 8)}
	}
	return out
}

// PairsList reads a list<pairs> at addr.
func PairsList(addr uint32) []policy.Pairs {
	ptr, n := list(addr)
	out := make([]policy.Pairs, n)
	for i := range out {
		out[i] = Pairs(ptr + uint32(i)*listSize)
	}
	return out
}

// Volume reads a types.volume at addr.
func Volume(addr uint32) policy.Volume {
	return policy.Volume{
		ID:     StringAt(addr),
		Name:   StringAt(addr + 8),
		Driver: StringAt(addr + 16),
		Capacity: policy.CapacityRange{
			RequiredBytes: U64(addr + 24),
			LimitBytes:    U64(addr + 32),
		},
		AccessMode:        policy.AccessMode(U8(addr + 40)),
		AccessType:        policy.AccessType(U8(addr + 41)),
		Parameters:        Pairs(addr + 44),
		Labels:            Pairs(addr + 52),
		RequisiteTopology: PairsList(addr + 60),
		PreferredTopology: PairsList(addr + 68),
	}
}

// Strings reads a list<string> at addr.
func Strings(addr uint32) []string {
	ptr, n := list(addr)
	out := make([]string, n)
	for i := range out {
		out[i] = StringAt(ptr + uint32(i)*8)
	}
	return out
}

// U32s reads a list<u32> at addr.
func U32s(addr uint32) []uint32 {
	ptr, n := list(addr)
	out := make([]uint32, n)
	for i := range out {
		out[i] = U32(ptr + uint32(i)*4)
	}
	return out
}

// U64s reads a list<u64> at addr.
func U64s(addr uint32) []uint64 {
	ptr, n := list(addr)
	out := make([]uint64, n)
	for i := range out {
		out[i] = U64(ptr + uint32(i)*8)
	}
	return out
}

// U8s reads a list<u8> at addr.
func U8s(addr uint32) []uint8 {
	ptr, n := list(addr)
	return append([]uint8(nil), Bytes(ptr, n)...)
}

// PutU32s stores a list<u32> (or list<s32>, as bits) at addr.
func PutU32s(addr uint32, values []uint32) {
	n := uint32(len(values))
	ptr := Alloc(n*4, 4)
	for i, v := range values {
		Put32(ptr+uint32(i)*4, v)
	}
	Put32(addr, ptr)
	Put32(addr+4, n)
}

// PutStrings stores a list<string> at addr.
func PutStrings(addr uint32, values []string) {
	n := uint32(len(values))
	ptr := Alloc(n*8, 4)
	for i, v := range values {
		PutStringAt(ptr+uint32(i)*8, v)
	}
	Put32(addr, ptr)
	Put32(addr+4, n)
}

// PutPairs stores a list<tuple<string, string>> at addr.
func PutPairs(addr uint32, pairs policy.Pairs) {
	n := uint32(len(pairs))
	ptr := Alloc(n*pairSize, 4)
	for i, p := range pairs {
		PutStringAt(ptr+uint32(i)*pairSize, p.Key)
		PutStringAt(ptr+uint32(i)*pairSize+8, p.Value)
	}
	Put32(addr, ptr)
	Put32(addr+4, n)
}
