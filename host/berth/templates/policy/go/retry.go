package main

import (
	"fmt"

	policy "berth.dev/policy"
	"berth.dev/policy/retry"
)

// classify backs transient failures off exponentially from base-ms (500),
// up to max-attempts (8); NOT_FOUND while undoing means done; anything else
// needs an operator.
func classify(f policy.Failure) policy.Decision {
	base, err := policy.NumberSetting(f.Settings, "base-ms", 500)
	if err != nil {
		return policy.GiveUp("bad setting: " + err.Error())
	}
	maxAttempts, err := policy.NumberSetting(f.Settings, "max-attempts", 8)
	if err != nil {
		return policy.GiveUp("bad setting: " + err.Error())
	}
	what := fmt.Sprintf("%s %s: %s", f.Operation.Name(), f.Code.Name(), f.Message)
	if f.Code == policy.NotFound && f.Operation.IsUndo() {
		return policy.Done()
	}
	if uint64(f.Attempt) >= maxAttempts {
		return policy.GiveUp(fmt.Sprintf("gave up after %d attempts: %s", f.Attempt, what))
	}
	switch f.Code {
	case policy.Unavailable, policy.DeadlineExceeded, policy.Aborted, policy.ResourceExhausted:
		return policy.RetryAfter(policy.BackoffMs(f.Attempt, base, 60000))
	}
	return policy.GiveUp("needs an operator: " + what)
}

func init() { retry.Export(classify) }
