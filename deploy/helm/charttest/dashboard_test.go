package charttest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// dashboardExprs returns every PromQL query of the dashboard.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy/grafana/hookstamp-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	var exprs []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && k == "expr" {
					exprs = append(exprs, s)
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	return exprs
}

// Every metric the dashboard queries is one SPEC names, and a duplicate
// rate divides by every first delivery, an async route's accepted ones
// too (SPEC §7): a panel on a renamed metric, or a rate of 100% on async
// routes, is a dashboard that lies.
func TestDashboardQueriesWhatTheSpecNames(t *testing.T) {
	spec, err := os.ReadFile(filepath.Join(repoRoot, "docs/SPEC.md"))
	if err != nil {
		t.Fatal(err)
	}
	exprs := dashboardExprs(t)
	if len(exprs) < 10 {
		t.Fatalf("%d queries in the dashboard: not read", len(exprs))
	}
	metric := regexp.MustCompile(`hookstamp_[a-z_]+`)
	for _, e := range exprs {
		for _, m := range metric.FindAllString(e, -1) {
			base := m
			for _, suffix := range []string{"_bucket", "_count", "_sum"} {
				base = strings.TrimSuffix(base, suffix)
			}
			if !strings.Contains(string(spec), "`"+base+"{") {
				t.Errorf("the dashboard queries %s, which SPEC does not name: %s", m, e)
			}
		}
		if strings.Contains(e, `outcome=~\"forwarded`) || strings.Contains(e, `outcome=~"forwarded`) {
			if !strings.Contains(e, "accepted") {
				t.Errorf("a duplicate rate without async routes' first deliveries (accepted): %s", e)
			}
		}
	}
}
