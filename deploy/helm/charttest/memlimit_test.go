package charttest

import (
	"slices"
	"strings"
	"testing"
)

// The gateway's GC aims under the container's memory limit (GOMEMLIMIT,
// in bytes, which the Go runtime of `gateway check` parses at start)
// rather than at twice the live heap, past it; a GOMEMLIMIT of extraEnv
// wins, and without a limit there is none.
func TestGoMemLimit(t *testing.T) {
	tests := []struct {
		name, vals string
		want       []string // the GOMEMLIMIT= of the pod's environment
	}{
		{"default limit", ``, []string{"GOMEMLIMIT=268435456"}},
		{"larger limit", `resources: {limits: {memory: 1Gi}}`, []string{"GOMEMLIMIT=1073741824"}},
		{"set in extraEnv", `extraEnv: [{name: GOMEMLIMIT, value: 200MiB}]`, []string{"GOMEMLIMIT=200MiB"}},
		{"no memory limit", `resources: {limits: null}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var vals map[string]any
			if err := yamlUnmarshal(tt.vals, &vals); err != nil {
				t.Fatal(err)
			}
			r := mustRender(t, vals)
			c := gatewayContainer(t, r.deployment(t))
			var got []string
			for _, kv := range podEnviron(t, c, secretValues(r, nil)) {
				if strings.HasPrefix(kv, "GOMEMLIMIT=") {
					got = append(got, kv)
				}
			}
			var set int
			for _, e := range c.Env {
				if e.Name == "GOMEMLIMIT" {
					set++
				}
			}
			if set > 1 {
				t.Errorf("GOMEMLIMIT set %d times in the container's env", set)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("pod environment %v, want %v", got, tt.want)
			}
			if tt.want != nil {
				checkInvariants(t, r, nil)
			}
		})
	}
}
