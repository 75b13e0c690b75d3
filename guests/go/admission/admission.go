package main

import (
	"fmt"
	"math"
	"slices"

	policy "berth.dev/policy"
	"berth.dev/policy/admission"
)

// admit: a namespace holds at most max-volumes; a volume asks for at most
// max-bytes, on one of plugins, carrying required-labels (each setting
// optional, lists separated by ","); a new volume without an owner label
// gets its namespace's name.
func admit(r policy.AdmissionRequest) policy.Verdict {
	maxVolumes, err := policy.NumberSetting(r.Settings, "max-volumes", math.MaxUint64)
	if err != nil {
		return policy.Deny("bad setting: " + err.Error())
	}
	maxBytes, err := policy.NumberSetting(r.Settings, "max-bytes", math.MaxUint64)
	if err != nil {
		return policy.Deny("bad setting: " + err.Error())
	}
	if r.Call.Kind == policy.CallExpandVolume && r.Call.Bytes > maxBytes {
		return policy.Deny(fmt.Sprintf("%d bytes is more than the %d a volume may have", r.Call.Bytes, maxBytes))
	}
	if r.Call.Kind != policy.CallCreateVolume {
		return policy.Allow()
	}
	if r.Usage.Volumes >= maxVolumes {
		return policy.Deny(fmt.Sprintf("namespace %s holds %d volumes, its most", r.Namespace, r.Usage.Volumes))
	}
	if asked := r.Volume.Capacity.RequiredBytes; asked > maxBytes {
		return policy.Deny(fmt.Sprintf("%d bytes is more than the %d a volume may have", asked, maxBytes))
	}
	if plugins, ok := policy.ListSetting(r.Settings, "plugins"); ok && !slices.Contains(plugins, r.Plugin) {
		return policy.Deny(fmt.Sprintf("plugin %s is not one of %q", r.Plugin, plugins))
	}
	required, _ := policy.ListSetting(r.Settings, "required-labels")
	for _, key := range required {
		if _, ok := r.Volume.Labels.Get(key); !ok {
			return policy.Deny("a volume needs the label " + key)
		}
	}
	if _, ok := r.Volume.Labels.Get("owner"); ok {
		return policy.Allow()
	}
	return policy.AllowWith(policy.FieldChange{
		Change: policy.Change{Kind: policy.ChangeLabel, Key: "owner", Value: r.Namespace},
		Reason: "every volume names its owner; the namespace, unless told",
	})
}

func init() { admission.Export(admit) }
