package policy

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestNamesHashAsInEveryLanguage(t *testing.T) {
	// The Rust and JavaScript samples name this volume team-a-postgres-data-1b3f7237.
	if got := ShortHash("0b6c7d2e-volume"); got != "1b3f7237" {
		t.Fatalf("ShortHash = %s", got)
	}
	if got := StableHash(""); got != 0xcbf29ce484222325 {
		t.Fatalf("StableHash of nothing = %x", got)
	}
}

func TestShortHashIsEightHexDigitsWithLeadingZeros(t *testing.T) {
	padded := 0
	for i := 0; i < 1000; i++ {
		text := strconv.Itoa(i)
		want := fmt.Sprintf("%08x", uint32(StableHash(text)))
		if got := ShortHash(text); got != want {
			t.Fatalf("ShortHash(%q) = %s, want %s", text, got, want)
		}
		if want[0] == '0' {
			padded++
		}
	}
	if padded == 0 {
		t.Fatal("no hash with a leading zero among the inputs")
	}
}

func TestSanitize(t *testing.T) {
	for in, want := range map[string]string{
		"Postgres Data": "postgres-data",
		"--a__b--":      "a-b",
		"日本語":           "",
		"x日y":           "x-y",
	} {
		if got := Sanitize(in); got != want {
			t.Errorf("Sanitize(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSettings(t *testing.T) {
	s := Pairs{{"n", " 42 "}, {"bad", "4x"}, {"sign", "+1"}}
	if n, err := NumberSetting(s, "n", 1); err != nil || n != 42 {
		t.Fatalf("n: %d %v", n, err)
	}
	if n, err := NumberSetting(s, "absent", 7); err != nil || n != 7 {
		t.Fatalf("absent: %d %v", n, err)
	}
	for _, key := range []string{"bad", "sign"} {
		if _, err := NumberSetting(s, key, 0); err == nil || !strings.Contains(err.Error(), key) {
			t.Fatalf("%s: %v", key, err)
		}
	}
	pairs, err := ParsePairs(" disk = ssd , ,zone=a")
	if err != nil || !reflect.DeepEqual(pairs, Pairs{{"disk", "ssd"}, {"zone", "a"}}) {
		t.Fatalf("ParsePairs: %v %v", pairs, err)
	}
	if _, err := ParsePairs("disk"); err == nil {
		t.Fatal("a part without = parsed")
	}
}

func TestTopology(t *testing.T) {
	node := Pairs{{"zone", "a"}, {"rack", "1"}}
	if !Satisfies(node, Pairs{{"zone", "a"}}) || Satisfies(node, Pairs{{"zone", "b"}}) {
		t.Fatal("Satisfies")
	}
	if node.String() != "zone=a,rack=1" {
		t.Fatalf("String: %s", node)
	}
	if !Reachable(node, nil) || !Reachable(node, []Pairs{{{"zone", "b"}}, {{"rack", "1"}}}) {
		t.Fatal("Reachable")
	}
}

func TestBackoffAndJitter(t *testing.T) {
	if BackoffMs(1, 500, 60000) != 500 || BackoffMs(4, 500, 60000) != 4000 {
		t.Fatal("backoff doubles")
	}
	if BackoffMs(200, 500, 60000) != 60000 || BackoffMs(40, 1<<40, 1<<62) != 1<<62 {
		t.Fatal("backoff caps without overflowing")
	}
	a, b := Jitter(1000, 10, "seed"), Jitter(1000, 10, "seed")
	if a != b || a < 900 || a > 1100 {
		t.Fatalf("jitter %d %d", a, b)
	}
	if Jitter(5, 10, "seed") != 5 {
		t.Fatal("no spread, no jitter")
	}
}

func TestNamesOfCallsAndCodes(t *testing.T) {
	if NodePublishVolume.Name() != "NodePublishVolume" || NotFound.Name() != "NOT_FOUND" {
		t.Fatal("names")
	}
	if !DeleteVolume.IsUndo() || CreateVolume.IsUndo() {
		t.Fatal("IsUndo")
	}
	if Code(200).String() != "unknown" {
		t.Fatal("an unknown code")
	}
}

func TestColumnsAndVerdicts(t *testing.T) {
	c := Candidates{
		Strings:    []string{"zone", "a", "b", "disk", "ssd"},
		PairKeys:   []uint32{0, 0, 3},
		PairValues: []uint32{1, 2, 4},
		Topologies: []uint32{0, 1, 2},
		LabelSets:  []uint32{2, 3},
		Topology:   []uint32{0, 1, 1},
		Labels:     []uint32{0, 0, 0},
		Health:     []uint8{0, 1, 9},
	}
	if got := c.TopologySets(); !reflect.DeepEqual(got, []Pairs{{{"zone", "a"}}, {{"zone", "b"}}}) {
		t.Fatalf("topologies %v", got)
	}
	if got := c.LabelSetPairs(); !reflect.DeepEqual(got, []Pairs{{{"disk", "ssd"}}}) {
		t.Fatalf("label sets %v", got)
	}
	if c.HealthOf(1) != Unhealthy || c.HealthOf(2) != Unknown {
		t.Fatal("health")
	}
	v := NewVerdicts(c.Nodes())
	v.Refuse(1, "sick")
	v.Refuse(2, "sick")
	v.Score(0, 7)
	got := v.Finish()
	want := Verdicts{Refusals: []uint32{0, 1, 1}, Scores: []int32{7, 0, 0}, Reasons: []string{"sick"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("verdicts %+v", got)
	}
}
