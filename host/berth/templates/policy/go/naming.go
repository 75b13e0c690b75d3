package main

import (
	"fmt"
	"strings"

	policy "berth.dev/policy"
	"berth.dev/policy/naming"
)

// CSI allows names of up to 128 bytes.
const (
	maxName   = 128
	maxPrefix = 32
)

// volumeName is "<prefix>-<volume name>-<hash of its id>": the hash keeps
// two volumes with the same operator name apart on the backend. An error
// refuses the volume.
func volumeName(request policy.NamingRequest) (string, error) {
	prefix, ok := request.Settings.Get("prefix")
	if !ok {
		prefix = "pv"
	}
	prefix = policy.Sanitize(prefix)
	if prefix == "" || len(prefix) > maxPrefix {
		return "", fmt.Errorf("setting \"prefix\" needs 1 to %d letters or digits", maxPrefix)
	}
	digest := policy.ShortHash(request.Volume.ID)
	body := policy.Sanitize(request.Volume.Name)
	if body == "" {
		body = "vol"
	}
	room := maxName - len(prefix) - len(digest) - 2
	body = strings.TrimRight(body[:min(room, len(body))], "-")
	return prefix + "-" + body + "-" + digest, nil
}

func init() { naming.Export(volumeName) }
