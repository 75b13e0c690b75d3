// Package admission exports the admission decision: import it and call
// Export in init with the function that judges requests.
package admission

import policy "berth.dev/policy"

// Func judges a request: allow, deny, or allow a new volume with changes.
type Func func(policy.AdmissionRequest) policy.Verdict

var decide Func = func(policy.AdmissionRequest) policy.Verdict {
	return policy.Deny("the module exports admission but registered no function (admission.Export)")
}

// Export makes f the module's admission decision.
func Export(f Func) { decide = f }
