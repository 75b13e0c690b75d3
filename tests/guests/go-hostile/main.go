// A Go policy module that misbehaves in the way its behaviour setting
// names, for the engine's containment tests:
//
//   - loop: never returns;
//   - memory-bomb: allocates until something stops it;
//   - clock: reads the wall clock (the sealed WASI's counter, not the time);
//   - random: draws from crypto/rand (the sealed WASI's fixed seed);
//   - file: opens a file on the host (there are no files);
//   - sleep: sleeps (the module cannot wait);
//   - panic: panics, which traps;
//   - error: returns an error, which is a refusal the module meant;
//   - anything else: a well-formed answer.
package main

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"time"

	policy "berth.dev/policy"
	"berth.dev/policy/naming"
	"berth.dev/policy/placement"
	"berth.dev/policy/retry"
)

var hoard [][]byte

func misbehave(settings policy.Pairs) (string, error) {
	behaviour, _ := settings.Get("behaviour")
	switch behaviour {
	case "loop":
		n := 0
		for {
			n++
		}
	case "memory-bomb":
		for {
			hoard = append(hoard, make([]byte, 4<<20))
		}
	case "clock":
		return fmt.Sprintf("clock-%d", time.Now().UnixNano()), nil
	case "random":
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		return fmt.Sprintf("random-%x", b), nil
	case "file":
		if _, err := os.ReadFile("/etc/hostname"); err != nil {
			return "", fmt.Errorf("no file: %w", err)
		}
		return "read-a-file", nil
	case "sleep":
		time.Sleep(time.Millisecond)
		return "slept", nil
	case "panic":
		panic("hostile Go guest panicked on purpose")
	case "error":
		return "", errors.New("hostile Go guest refused on purpose")
	}
	return behaviour, nil
}

func init() {
	naming.Export(func(r policy.NamingRequest) (string, error) {
		answer, err := misbehave(r.Settings)
		if answer == "" {
			answer = "ok"
		}
		return answer + "-" + r.Volume.Name, err
	})
	placement.Export(func(r policy.PlacementRequest, c *policy.Candidates) policy.Verdicts {
		_, _ = misbehave(r.Settings)
		return policy.NewVerdicts(c.Nodes()).Finish()
	})
	retry.Export(func(f policy.Failure) policy.Decision {
		_, _ = misbehave(f.Settings)
		return policy.RetryAfter(1000)
	})
}

func main() {}
