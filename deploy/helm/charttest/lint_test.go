package charttest

import (
	"testing"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
)

// TestLint is `helm lint --strict` on the default values and the
// production example: not even a warning.
func TestLint(t *testing.T) {
	prod, _ := productionExample(t)
	for name, vals := range map[string]map[string]any{"default": nil, "production": prod} {
		t.Run(name, func(t *testing.T) {
			lint := action.NewLint()
			lint.Strict = true
			lint.Namespace = namespace
			lint.KubeVersion = parseKubeVersion(t)
			res := lint.Run([]string{chartDir}, vals)
			if res.TotalChartsLinted != 1 {
				t.Errorf("linted %d charts, want 1", res.TotalChartsLinted)
			}
			for _, m := range res.Messages {
				if m.Severity > support.InfoSev {
					t.Errorf("lint: %s", m)
				}
			}
			for _, err := range res.Errors {
				t.Errorf("lint: %v", err)
			}
		})
	}
}
