// Sample naming policy in Go: "<prefix>-<sanitised name>-<hash>".
//
// The same policy as the Rust sample (guests/naming), passing the same case
// file. Settings: prefix (default "pv") and max-length (16 to 128, default
// 128). The hash of the volume's id keeps two volumes with the same
// operator name apart on the backend. An error refuses the volume: its text
// is the reason shown to the operator.
package main

import (
	"errors"
	"fmt"
	"strings"

	policy "berth.dev/policy"
	"berth.dev/policy/naming"
)

const csiNameLimit = 128

func volumeName(request policy.NamingRequest) (string, error) {
	settings := request.Settings
	prefix := "pv"
	if p, ok := settings.Get("prefix"); ok {
		prefix = p
	}
	prefix = policy.Sanitize(prefix)
	if prefix == "" {
		return "", errors.New(`setting "prefix" has no letters or digits`)
	}
	maxLength, err := policy.NumberSetting(settings, "max-length", csiNameLimit)
	if err != nil {
		return "", err
	}
	if maxLength < 16 || maxLength > csiNameLimit {
		return "", fmt.Errorf(`setting "max-length" must be 16 to 128, not %d`, maxLength)
	}
	digest := policy.ShortHash(request.Volume.ID)
	room := int(maxLength) - len(prefix) - len(digest) - 2
	if room <= 0 {
		return "", fmt.Errorf("prefix %q leaves no room for the volume name within %d bytes", prefix, maxLength)
	}
	body := policy.Sanitize(request.Volume.Name)
	if body == "" {
		body = "vol"
	}
	body = strings.TrimRight(body[:min(room, len(body))], "-")
	return prefix + "-" + body + "-" + digest, nil
}

func init() { naming.Export(volumeName) }

func main() {}
