//go:build wasip1

package retry

import (
	policy "berth.dev/policy"
	"berth.dev/policy/internal/abi"
)

// classify(failure) -> decision: the failure's ten flat values arrive as
// arguments; the decision goes back through a return area: the case at 0,
// its payload at 8.
//
//go:wasmexport berth:policy/retry@0.4.0#classify
func classify(operation, code, message, messageLen, attempt uint32, elapsed uint64,
	driver, driverLen, settings, settingsLen uint32) uint32 {
	pairs := abi.Alloc(8, 4)
	abi.Put32(pairs, settings)
	abi.Put32(pairs+4, settingsLen)
	d := decide(policy.Failure{
		Operation: policy.Operation(operation),
		Code:      policy.Code(code),
		Message:   abi.String(message, messageLen),
		Attempt:   attempt,
		ElapsedMs: elapsed,
		Driver:    abi.String(driver, driverLen),
		Settings:  abi.Pairs(pairs),
	})
	ret := abi.Alloc(16, 8)
	abi.Put8(ret, uint8(d.Kind))
	switch d.Kind {
	case policy.KindRetryAfter:
		abi.Put64(ret+8, d.AfterMs)
	case policy.KindGiveUp:
		abi.PutStringAt(ret+8, d.Reason)
	}
	return ret
}

//go:wasmexport cabi_post_berth:policy/retry@0.4.0#classify
func classifyPost(uint32) { abi.Reset() }
