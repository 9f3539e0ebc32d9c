package charttest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	specMetricRE = regexp.MustCompile("`(hookstamp_[a-z_]+)\\{([a-z_,]*)\\}")
	metricRE     = regexp.MustCompile(`hookstamp_[a-z_]+`)
)

// specMetrics are the metrics docs/SPEC.md names ("`hookstamp_x{a,b}`"),
// with their labels.
func specMetrics(t *testing.T) map[string][]string {
	t.Helper()
	spec, err := os.ReadFile(filepath.Join(repoRoot, "docs/SPEC.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, m := range specMetricRE.FindAllStringSubmatch(string(spec), -1) {
		out[m[1]] = strings.Split(m[2], ",")
	}
	if len(out) < 10 {
		t.Fatalf("%d metrics named in SPEC: not read", len(out))
	}
	return out
}

// exprMetrics are the metrics a PromQL query reads, a histogram's series
// by the histogram's name.
func exprMetrics(expr string) []string {
	var out []string
	for _, m := range metricRE.FindAllString(expr, -1) {
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			m = strings.TrimSuffix(m, suffix)
		}
		out = append(out, m)
	}
	return out
}

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
	spec := specMetrics(t)
	exprs := dashboardExprs(t)
	if len(exprs) < 10 {
		t.Fatalf("%d queries in the dashboard: not read", len(exprs))
	}
	for _, e := range exprs {
		for _, m := range exprMetrics(e) {
			if _, ok := spec[m]; !ok {
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
