// Package policy is the Go SDK for Berth policy modules: the contract's
// types (Berth's WIT package berth:policy@0.4.0) and the helpers the Rust,
// Python and JavaScript SDKs have, under Go names, so a policy reads alike
// in each language and gives the same answers.
//
// A module exports a decision by importing its package and registering a
// function in init:
//
//	func init() { naming.Export(volumeName) }
//
// (packages naming, placement, retry and admission). The module is built with
// GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared and made a component
// with `berth policy component`.
package policy

// Pair is one key and its value.
type Pair struct{ Key, Value string }

// Pairs are key/value pairs in a stable order: topology segments, labels,
// CSI parameters, operator settings. Keys are unique within one list.
type Pairs []Pair

// AccessMode is how a volume may be used, as in the CSI spec's AccessMode.
type AccessMode uint8

const (
	SingleNodeWriter AccessMode = iota
	SingleNodeReaderOnly
	MultiNodeReaderOnly
	MultiNodeSingleWriter
	MultiNodeMultiWriter
	SingleNodeSingleWriter
	SingleNodeMultiWriter
)

// AccessType says whether the volume is a file system or a block device.
type AccessType uint8

const (
	Mount AccessType = iota
	Block
)

// CapacityRange holds the bytes a volume must have at least and may have
// at most; 0 means unset.
type CapacityRange struct{ RequiredBytes, LimitBytes uint64 }

// Volume is what the operator declared about a volume.
type Volume struct {
	// ID is Berth's own id: unique, stable for the volume's whole life.
	ID string
	// Name is the operator's name, unique among live volumes.
	Name string
	// Driver is the CSI driver name, e.g. hostpath.csi.k8s.io.
	Driver            string
	Capacity          CapacityRange
	AccessMode        AccessMode
	AccessType        AccessType
	Parameters        Pairs
	Labels            Pairs
	RequisiteTopology []Pairs
	PreferredTopology []Pairs
}

// NamingRequest asks for the name a volume gets on the storage backend.
type NamingRequest struct {
	Volume Volume
	// Settings are the operator's settings for this module.
	Settings Pairs
}

// Purpose says why placement is asked.
type Purpose uint8

const (
	// Create chooses where a new volume must be reachable from.
	Create Purpose = iota
	// Publish chooses the node for a publish that names none.
	Publish
)

// PlacementRequest asks which nodes may take a volume.
type PlacementRequest struct {
	Volume  Volume
	Purpose Purpose
	// AccessibleTopology is, for Publish, where the created volume is
	// reachable from (any one of these); empty means everywhere.
	AccessibleTopology []Pairs
	Settings           Pairs
}

// Health is a node's health as Berth last saw its CSI node plugin.
type Health uint8

const (
	Healthy Health = iota
	Unhealthy
	Unknown
)

// Candidates are the nodes to judge, as columns: entry i of every per-node
// list describes node i. Strings, topologies and label sets are sent once
// each and referred to by index; see Topologies and LabelSets.
type Candidates struct {
	Strings          []string
	PairKeys         []uint32
	PairValues       []uint32
	Topologies       []uint32
	LabelSets        []uint32
	Topology         []uint32
	Labels           []uint32
	MaxVolumes       []uint64
	PublishedVolumes []uint64
	// Health is per node the position of its case in Health: 0 healthy,
	// 1 unhealthy, 2 unknown.
	Health []uint8
}

// Verdicts are the judgement on every node, as columns in candidate order.
type Verdicts struct {
	// Refusals: 0 when the node may take the volume; otherwise 1 + the
	// index in Reasons of why it may not.
	Refusals []uint32
	// Scores: among eligible nodes, higher is better.
	Scores []int32
	// Reasons: each distinct reason once, at most 256 bytes each.
	Reasons []string
}

// Failure is a failed CSI call to classify.
type Failure struct {
	Operation Operation
	Code      Code
	Message   string
	// Attempt is 1 for the first failure of this operation.
	Attempt uint32
	// ElapsedMs is the time since the operation's first attempt.
	ElapsedMs uint64
	Driver    string
	Settings  Pairs
}

// DecisionKind is which case of the retry decision.
type DecisionKind uint8

const (
	// KindRetryAfter: try again after AfterMs.
	KindRetryAfter DecisionKind = iota
	// KindGiveUp: the volume is marked failed with Reason.
	KindGiveUp
	// KindDone: the work is already done; carry on as if the call succeeded.
	KindDone
)

// Decision is what to do after a failed call.
type Decision struct {
	Kind    DecisionKind
	AfterMs uint64
	Reason  string
}

// RetryAfter tries again after ms milliseconds (at most one day).
func RetryAfter(ms uint64) Decision { return Decision{Kind: KindRetryAfter, AfterMs: ms} }

// GiveUp stops: the volume is failed with reason until an operator retries.
func GiveUp(reason string) Decision { return Decision{Kind: KindGiveUp, Reason: reason} }

// Done carries on as if the failed call had succeeded.
func Done() Decision { return Decision{Kind: KindDone} }
