//go:build wasip1

package admission

import (
	policy "berth.dev/policy"
	"berth.dev/policy/internal/abi"
)

// Where admission-request's fields are, from the pointer it arrives by
// (its flat values are more than 16): the call variant (case, then its
// payload at 8), the caller, namespace and plugin, the volume at 48 (8-
// aligned), the secret's option, the usage (8-aligned) and the settings.
const (
	call      = 0
	caller    = 16
	namespace = 32
	plugin    = 40
	volume    = 48
	secret    = volume + abi.VolumeSize
	usage     = secret + 16
	settings  = usage + 24
)

// A field-change in memory: the change's case at 0, its payload at 8 (a
// u64 among the payloads aligns it), the reason at 24.
const (
	fieldChangeSize = 32
	changePayload   = 8
	reasonAt        = 24
)

// admit(request: admission-request) -> verdict: the verdict goes back
// through a return area, its case at 0 and its payload at 4.
//
//go:wasmexport berth:policy/admission@0.4.0#admit
func admit(args uint32) uint32 {
	v := decide(request(args))
	ret := abi.Alloc(12, 4)
	abi.Put8(ret, uint8(v.Kind))
	switch v.Kind {
	case policy.KindDeny:
		abi.PutStringAt(ret+4, v.Reason)
	case policy.KindAllowWith:
		n := uint32(len(v.Changes))
		list := abi.Alloc(n*fieldChangeSize, 8)
		for i, c := range v.Changes {
			putChange(list+uint32(i)*fieldChangeSize, c)
		}
		abi.Put32(ret+4, list)
		abi.Put32(ret+8, n)
	}
	return ret
}

//go:wasmexport cabi_post_berth:policy/admission@0.4.0#admit
func admitPost(uint32) { abi.Reset() }

func request(args uint32) policy.AdmissionRequest {
	c := policy.Call{Kind: policy.CallKind(abi.U8(args + call))}
	payload := args + call + 8
	switch c.Kind {
	case policy.CallPublishVolume:
		c.Node = abi.StringAt(payload)
	case policy.CallExpandVolume:
		c.Bytes = abi.U64(payload)
	case policy.CallModifyVolume:
		c.Parameters = abi.Pairs(payload)
	case policy.CallCreateSnapshot:
		c.Snapshot = abi.StringAt(payload)
	}
	r := policy.AdmissionRequest{
		Call: c,
		Caller: policy.Caller{
			Identity: abi.StringAt(args + caller),
			Policies: abi.Strings(args + caller + 8),
		},
		Namespace: abi.StringAt(args + namespace),
		Plugin:    abi.StringAt(args + plugin),
		Volume:    abi.Volume(args + volume),
		HasSecret: abi.U8(args+secret) == 1,
		Usage: policy.Usage{
			Volumes:   abi.U64(args + usage),
			Bytes:     abi.U64(args + usage + 8),
			Snapshots: abi.U64(args + usage + 16),
		},
		Settings: abi.Pairs(args + settings),
	}
	if r.HasSecret {
		r.Secret = abi.StringAt(args + secret + 4)
	}
	return r
}

func putChange(at uint32, fc policy.FieldChange) {
	c := fc.Change
	abi.Put8(at, uint8(c.Kind))
	p := at + changePayload
	switch c.Kind {
	case policy.ChangeParameter, policy.ChangeLabel:
		abi.PutStringAt(p, c.Key)
		abi.PutStringAt(p+8, c.Value)
	case policy.ChangeRequiredBytes, policy.ChangeLimitBytes:
		abi.Put64(p, c.Bytes)
	case policy.ChangePlugin:
		abi.PutStringAt(p, c.Plugin)
	case policy.ChangeAccessMode:
		abi.Put8(p, uint8(c.AccessMode))
	case policy.ChangeRequisiteTopology:
		n := uint32(len(c.Topology))
		lists := abi.Alloc(n*8, 4)
		for i, t := range c.Topology {
			abi.PutPairs(lists+uint32(i)*8, t)
		}
		abi.Put32(p, lists)
		abi.Put32(p+4, n)
	}
	abi.PutStringAt(at+reasonAt, fc.Reason)
}
