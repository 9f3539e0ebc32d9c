package gateway

import (
	"math"
	"strings"
	"testing"
)

// Two processes on one host are two replicas, to River (whose client IDs
// take at most 100 bytes) and in the attempts they record.
func TestReplicaNamesTellProcessesApart(t *testing.T) {
	if a, b := replicaNameOf("vm", 100), replicaNameOf("vm", 101); a == b || a != "vm/100" {
		t.Errorf("two processes on vm: %q and %q", a, b)
	}
	if n := replicaNameOf(strings.Repeat("h", 253), math.MaxInt32); len(n) > 100 {
		t.Errorf("replica name of a 253-byte host: %d bytes, River takes 100", len(n))
	}
}
