//go:build wasip1

package naming

import (
	policy "berth.dev/policy"
	"berth.dev/policy/internal/abi"
)

// volume-name(request: naming-request) -> result<string, string>: the
// request (20 flat values) arrives by pointer; the answer goes back through
// a return area: the case at 0, the string at 4.
//
//go:wasmexport berth:policy/naming@0.4.0#volume-name
func volumeName(args uint32) uint32 {
	request := policy.NamingRequest{
		Volume:   abi.Volume(args),
		Settings: abi.Pairs(args + abi.VolumeSize),
	}
	name, err := decide(request)
	ret := abi.Alloc(12, 4)
	if err != nil {
		abi.Put8(ret, 1)
		name = err.Error()
	}
	abi.PutStringAt(ret+4, name)
	return ret
}

//go:wasmexport cabi_post_berth:policy/naming@0.4.0#volume-name
func volumeNamePost(uint32) { abi.Reset() }
