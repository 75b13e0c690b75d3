// Package naming exports the naming decision: import it and call Export
// in init with the function that names volumes.
package naming

import (
	"errors"

	policy "berth.dev/policy"
)

// Func names a volume, or refuses it with an error whose text is shown to
// the operator. It must be deterministic: the same request, the same name.
type Func func(policy.NamingRequest) (string, error)

var decide Func = func(policy.NamingRequest) (string, error) {
	return "", errors.New("the module exports naming but registered no function (naming.Export)")
}

// Export makes f the module's naming decision.
func Export(f Func) { decide = f }
