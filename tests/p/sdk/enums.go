package policy

import "strings"

// Code is a gRPC status code, named as in the gRPC and CSI specs.
type Code uint8

const (
	Cancelled Code = iota
	CodeUnknown
	InvalidArgument
	DeadlineExceeded
	NotFound
	AlreadyExists
	PermissionDenied
	ResourceExhausted
	FailedPrecondition
	Aborted
	OutOfRange
	Unimplemented
	Internal
	Unavailable
	DataLoss
	Unauthenticated
)

var codeNames = [...]string{
	"cancelled", "unknown", "invalid-argument", "deadline-exceeded", "not-found",
	"already-exists", "permission-denied", "resource-exhausted", "failed-precondition",
	"aborted", "out-of-range", "unimplemented", "internal", "unavailable", "data-loss",
	"unauthenticated",
}

// String is the code's WIT name: "not-found".
func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "unknown"
}

// Name is the code as the CSI spec writes it: "NOT_FOUND".
func (c Code) Name() string {
	return strings.ToUpper(strings.ReplaceAll(c.String(), "-", "_"))
}

// Operation is the CSI call that failed.
type Operation uint8

const (
	CreateVolume Operation = iota
	DeleteVolume
	ControllerPublishVolume
	ControllerUnpublishVolume
	NodeStageVolume
	NodeUnstageVolume
	NodePublishVolume
	NodeUnpublishVolume
	ControllerExpandVolume
	NodeExpandVolume
	CreateSnapshot
	DeleteSnapshot
	ControllerModifyVolume
	CreateVolumeGroupSnapshot
	DeleteVolumeGroupSnapshot
)

var operationNames = [...]string{
	"create-volume", "delete-volume", "controller-publish-volume",
	"controller-unpublish-volume", "node-stage-volume", "node-unstage-volume",
	"node-publish-volume", "node-unpublish-volume", "controller-expand-volume",
	"node-expand-volume", "create-snapshot", "delete-snapshot",
	"controller-modify-volume", "create-volume-group-snapshot",
	"delete-volume-group-snapshot",
}

// String is the operation's WIT name: "node-publish-volume".
func (o Operation) String() string {
	if int(o) < len(operationNames) {
		return operationNames[o]
	}
	return "unknown"
}

// Name is the CSI method name: "NodePublishVolume".
func (o Operation) Name() string {
	var b strings.Builder
	for _, word := range strings.Split(o.String(), "-") {
		if word != "" {
			b.WriteString(strings.ToUpper(word[:1]))
			b.WriteString(word[1:])
		}
	}
	return b.String()
}

// IsUndo says whether the operation undoes something, so that NOT_FOUND
// means done.
func (o Operation) IsUndo() bool {
	switch o {
	case DeleteVolume, ControllerUnpublishVolume, NodeUnstageVolume,
		NodeUnpublishVolume, DeleteSnapshot, DeleteVolumeGroupSnapshot:
		return true
	}
	return false
}

var healthNames = [...]string{"healthy", "unhealthy", "unknown"}

// String is the health's WIT name.
func (h Health) String() string {
	if int(h) < len(healthNames) {
		return healthNames[h]
	}
	return "unknown"
}
