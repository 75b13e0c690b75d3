package policy

import (
	"fmt"
	"strconv"
	"strings"
)

// Get is the value of key in pairs (settings, labels, topology).
func (p Pairs) Get(key string) (string, bool) {
	for _, pair := range p {
		if pair.Key == key {
			return pair.Value, true
		}
	}
	return "", false
}

// String is the pairs as "k=v,k2=v2", as operators write them.
func (p Pairs) String() string {
	parts := make([]string, len(p))
	for i, pair := range p {
		parts[i] = pair.Key + "=" + pair.Value
	}
	return strings.Join(parts, ",")
}

// NumberSetting is a setting as a whole number, or fallback when absent; an
// error naming the setting when it is not one.
func NumberSetting(settings Pairs, key string, fallback uint64) (uint64, error) {
	value, ok := settings.Get(key)
	if !ok {
		return fallback, nil
	}
	text := strings.TrimSpace(value)
	n, err := strconv.ParseUint(text, 10, 64)
	if err != nil || text == "" || text[0] == '+' {
		return 0, fmt.Errorf("setting %q must be a whole number, not %q", key, value)
	}
	return n, nil
}

// ParsePairs reads "k=v,k2=v2"; blank input gives none. A part without
// "=" is an error.
func ParsePairs(text string) (Pairs, error) {
	var out Pairs
	for _, raw := range strings.Split(text, ",") {
		part := strings.TrimSpace(raw)
		if part == "" {
			continue
		}
		key, value, ok := strings.Cut(part, "=")
		if !ok || strings.TrimSpace(key) == "" {
			return nil, fmt.Errorf("%q is not key=value", part)
		}
		out = append(out, Pair{strings.TrimSpace(key), strings.TrimSpace(value)})
	}
	return out, nil
}

// Satisfies says whether every segment of required is in topology with
// the same value.
func Satisfies(topology, required Pairs) bool {
	for _, want := range required {
		if got, ok := topology.Get(want.Key); !ok || got != want.Value {
			return false
		}
	}
	return true
}

// Reachable says whether a node in topology reaches any of accessible
// (empty: everywhere).
func Reachable(topology Pairs, accessible []Pairs) bool {
	if len(accessible) == 0 {
		return true
	}
	for _, t := range accessible {
		if Satisfies(topology, t) {
			return true
		}
	}
	return false
}

// Sanitize keeps lower-case ASCII letters and digits; runs of anything else
// become one "-", none at either end.
func Sanitize(text string) string {
	var b strings.Builder
	dash := false
	for _, c := range text {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		default:
			dash = b.Len() > 0
			continue
		}
		if dash {
			b.WriteByte('-')
			dash = false
		}
		b.WriteRune(c)
	}
	return b.String()
}

// StableHash is FNV-1a, 64 bits, of text's UTF-8 bytes: the same in every
// run, build and language.
func StableHash(text string) uint64 {
	h := uint64(0xcbf29ce484222325)
	for i := 0; i < len(text); i++ {
		h ^= uint64(text[i])
		h *= 0x100000001b3
	}
	return h
}

// ShortHash is the low 32 bits of StableHash(text) as 8 hex digits, as the
// samples name volumes.
// (Written out rather than with fmt, whose printer comes from a sync.Pool
// that a fresh instance sets up in every decision.)
func ShortHash(text string) string {
	const digits = "0123456789abcdef"
	h := uint32(StableHash(text))
	var out [8]byte
	for i := 7; i >= 0; i-- {
		out[i] = digits[h&0xf]
		h >>= 4
	}
	return string(out[:])
}

// BackoffMs is base * 2^(attempt-1), capped at max.
func BackoffMs(attempt uint32, base, max uint64) uint64 {
	exp := uint64(0)
	if attempt > 1 {
		exp = uint64(attempt - 1)
	}
	if exp > 63 || base > max>>exp {
		return max
	}
	return min(base<<exp, max)
}

// Jitter moves ms by up to percent percent either way, by the hash of seed:
// different failures spread, one failure is stable.
func Jitter(ms, percent uint64, seed string) uint64 {
	spread := ms * min(percent, 100) / 100
	if spread == 0 {
		return ms
	}
	return ms - spread + StableHash(seed)%(2*spread+1)
}
