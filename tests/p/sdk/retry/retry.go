// Package retry exports the retry classification: import it and call
// Export in init with the function that classifies failed calls.
package retry

import policy "berth.dev/policy"

// Func decides what to do after a failed CSI call.
type Func func(policy.Failure) policy.Decision

var decide Func = func(policy.Failure) policy.Decision {
	return policy.GiveUp("the module exports retry but registered no function (retry.Export)")
}

// Export makes f the module's retry classification.
func Export(f Func) { decide = f }
