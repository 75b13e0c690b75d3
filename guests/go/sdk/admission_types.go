package policy

import (
	"fmt"
	"strings"
)

// CallKind is the call an admission request is about.
type CallKind uint8

const (
	// CallCreateVolume: a new volume (the request's Volume is as Berth would store it).
	CallCreateVolume CallKind = iota
	// CallPublishVolume: publishing on Call.Node.
	CallPublishVolume
	// CallExpandVolume: growing to Call.Bytes.
	CallExpandVolume
	// CallModifyVolume: setting Call.Parameters.
	CallModifyVolume
	// CallCreateSnapshot: a snapshot named Call.Snapshot.
	CallCreateSnapshot
	CallDeleteVolume
)

// Call is the call asked for, with what it asks (only its kind's field is set).
type Call struct {
	Kind       CallKind
	Node       string
	Bytes      uint64
	Parameters Pairs
	Snapshot   string
}

// Caller is who asks: Identity is "management", "token:<accessor>",
// "cert:<subject>" or "docker:<node>"; Policies are the ACL policies its
// token or certificate holds.
type Caller struct {
	Identity string
	Policies []string
}

// Usage is what a namespace holds, as Berth counts it for quotas.
type Usage struct{ Volumes, Bytes, Snapshots uint64 }

// AdmissionRequest asks whether Berth accepts a request.
type AdmissionRequest struct {
	Call      Call
	Caller    Caller
	Namespace string
	// Plugin is the plugin's name in berth.toml.
	Plugin string
	// Volume is, for CallCreateVolume, the volume as Berth would store
	// it; for the other calls, the volume as it stands.
	Volume Volume
	// Secret names the secret the volume uses (HasSecret): never its contents.
	Secret    string
	HasSecret bool
	// Usage is what the namespace holds now, the request not counted.
	Usage    Usage
	Settings Pairs
}

// ChangeKind is the field of a new volume a change sets.
type ChangeKind uint8

const (
	ChangeParameter ChangeKind = iota
	ChangeLabel
	ChangeRequiredBytes
	ChangeLimitBytes
	ChangePlugin
	ChangeAccessMode
	ChangeRequisiteTopology
)

// Change sets one field of a new volume (only its kind's fields are set):
// a parameter or label (Key, Value), required or limit bytes (Bytes), the
// plugin (Plugin), the access mode (AccessMode), or the requisite
// topology (Topology).
type Change struct {
	Kind       ChangeKind
	Key, Value string
	Bytes      uint64
	Plugin     string
	AccessMode AccessMode
	Topology   []Pairs
}

// FieldChange is a change and why, shown in the volume's events and
// `berth volume explain`.
type FieldChange struct {
	Change Change
	Reason string
}

// String is the change as `volume explain` shows it: "label owner=team-a".
func (c Change) String() string {
	switch c.Kind {
	case ChangeParameter:
		return fmt.Sprintf("parameter %s=%s", c.Key, c.Value)
	case ChangeLabel:
		return fmt.Sprintf("label %s=%s", c.Key, c.Value)
	case ChangeRequiredBytes:
		return fmt.Sprintf("required-bytes %d", c.Bytes)
	case ChangeLimitBytes:
		return fmt.Sprintf("limit-bytes %d", c.Bytes)
	case ChangePlugin:
		return "plugin " + c.Plugin
	case ChangeAccessMode:
		return "access-mode " + c.AccessMode.String()
	}
	each := make([]string, len(c.Topology))
	for i, t := range c.Topology {
		each[i] = t.String()
	}
	return "requisite-topology " + strings.Join(each, " or ")
}

// VerdictKind is an admission answer's kind.
type VerdictKind uint8

const (
	KindAllow VerdictKind = iota
	KindDeny
	KindAllowWith
)

// Verdict is the answer: build it with Allow, Deny or AllowWith.
type Verdict struct {
	Kind    VerdictKind
	Reason  string
	Changes []FieldChange
}

// Allow accepts the request as asked.
func Allow() Verdict { return Verdict{Kind: KindAllow} }

// Deny refuses the request; the reason is the caller's answer and goes to the audit log.
func Deny(reason string) Verdict { return Verdict{Kind: KindDeny, Reason: reason} }

// AllowWith accepts a create-volume with these changes, applied in order.
func AllowWith(changes ...FieldChange) Verdict {
	return Verdict{Kind: KindAllowWith, Changes: changes}
}

// ListSetting is a setting as a list separated by "," (blanks dropped);
// false when absent.
func ListSetting(settings Pairs, key string) ([]string, bool) {
	value, ok := settings.Get(key)
	if !ok {
		return nil, false
	}
	var out []string
	for _, item := range strings.Split(value, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out, true
}

var accessModeNames = [...]string{
	"single-node-writer", "single-node-reader-only", "multi-node-reader-only",
	"multi-node-single-writer", "multi-node-multi-writer", "single-node-single-writer",
	"single-node-multi-writer",
}

// String is the access mode's WIT name: "single-node-writer".
func (m AccessMode) String() string {
	if int(m) < len(accessModeNames) {
		return accessModeNames[m]
	}
	return "unknown"
}
