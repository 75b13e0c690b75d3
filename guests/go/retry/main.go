// Sample retry policy in Go: the same as the Rust sample (guests/retry),
// passing the same case file.
//
// NOT_FOUND while undoing is done; transient codes back off exponentially
// (with jitter); RESOURCE_EXHAUSTED waits longer; INTERNAL and UNKNOWN are
// retried a few times; anything else needs an operator. Settings: base-ms,
// max-ms, exhausted-base-ms, max-attempts, max-internal-attempts.
package main

import (
	"fmt"

	policy "berth.dev/policy"
	"berth.dev/policy/retry"
)

type settings struct{ base, maximum, exhaustedBase, maxAttempts, maxInternal uint64 }

func read(s policy.Pairs) (out settings, err error) {
	for _, f := range []struct {
		key      string
		into     *uint64
		fallback uint64
	}{
		{"base-ms", &out.base, 500},
		{"max-ms", &out.maximum, 60000},
		{"exhausted-base-ms", &out.exhaustedBase, 5000},
		{"max-attempts", &out.maxAttempts, 8},
		{"max-internal-attempts", &out.maxInternal, 3},
	} {
		if *f.into, err = policy.NumberSetting(s, f.key, f.fallback); err != nil {
			return out, err
		}
	}
	return out, nil
}

func classify(f policy.Failure) policy.Decision {
	s, err := read(f.Settings)
	if err != nil {
		return policy.GiveUp("bad setting: " + err.Error())
	}
	what := fmt.Sprintf("%s %s: %s", f.Operation.Name(), f.Code.Name(), f.Message)
	if f.Code == policy.NotFound && f.Operation.IsUndo() {
		return policy.Done()
	}
	attempt := uint64(f.Attempt)
	if attempt >= s.maxAttempts {
		return policy.GiveUp(fmt.Sprintf("gave up after %d attempts: %s", f.Attempt, what))
	}
	var delay uint64
	switch f.Code {
	case policy.Cancelled, policy.DeadlineExceeded, policy.Unavailable, policy.Aborted:
		delay = policy.BackoffMs(f.Attempt, s.base, s.maximum)
	case policy.ResourceExhausted:
		delay = policy.BackoffMs(f.Attempt, s.exhaustedBase, max(s.maximum, s.exhaustedBase))
	case policy.Internal, policy.CodeUnknown:
		if attempt >= s.maxInternal {
			return policy.GiveUp(fmt.Sprintf("plugin error persisted for %d attempts: %s", f.Attempt, what))
		}
		delay = policy.BackoffMs(f.Attempt, s.base, s.maximum)
	default:
		return policy.GiveUp("needs an operator: " + what)
	}
	seed := fmt.Sprintf("%s/%s/%d/%d", f.Driver, what, f.Attempt, f.ElapsedMs)
	return policy.RetryAfter(policy.Jitter(delay, 10, seed))
}

func init() { retry.Export(classify) }

func main() {}
