package charttest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var (
	specMetricRE = regexp.MustCompile("`(hookstamp_[a-z_]+)\\{([a-z_,]*)\\}")
	metricRE     = regexp.MustCompile(`hookstamp_[a-z_]+`)
	selectorRE   = regexp.MustCompile(`hookstamp_[a-z_]+(\{[^}]*\})?`)
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

// dashboardJSON is the dashboard file.
func dashboardJSON(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy/grafana/hookstamp-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// dashboardExprs returns every PromQL query of the dashboard.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	var doc any
	if err := json.Unmarshal(dashboardJSON(t), &doc); err != nil {
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

// One Grafana shows several releases (staging and production, two
// namespaces, two scrape jobs): every query is filtered by the Namespace
// and Job variables, as the Route variable's values are, and their "All"
// is the regex .*, which a series without the label matches too (a plain
// Prometheus that adds no namespace still shows data).
func TestDashboardSeparatesReleases(t *testing.T) {
	var doc struct {
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Type       string `json:"type"`
				Definition string `json:"definition"`
				IncludeAll bool   `json:"includeAll"`
				AllValue   string `json:"allValue"`
				Current    struct {
					Value []string `json:"value"`
				} `json:"current"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(dashboardJSON(t), &doc); err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, v := range doc.Templating.List {
		order = append(order, v.Name)
		if v.Type != "query" {
			continue
		}
		if !v.IncludeAll || v.AllValue != ".*" || len(v.Current.Value) != 1 || v.Current.Value[0] != "$__all" {
			t.Errorf("variable %s: includeAll %v, allValue %q, current %v: want All, as .*, by default", v.Name, v.IncludeAll, v.AllValue, v.Current.Value)
		}
	}
	if got := strings.Join(order, ","); got != "datasource,namespace,job,route" {
		t.Errorf("variables %s, want datasource,namespace,job,route (each query filtered by those before it)", got)
	}
	matchers := []string{`namespace=~"$namespace"`, `job=~"$job"`}
	for _, v := range doc.Templating.List {
		if v.Name == "job" || v.Name == "route" {
			for _, m := range matchers[:slices.Index(order, v.Name)-1] {
				if !strings.Contains(v.Definition, m) {
					t.Errorf("variable %s: %s, want it filtered by %s", v.Name, v.Definition, m)
				}
			}
		}
	}
	for _, e := range dashboardExprs(t) {
		for _, sel := range selectorRE.FindAllString(e, -1) {
			for _, m := range matchers {
				if !strings.Contains(sel, m) {
					t.Errorf("%s lacks %s: %s", sel, m, e)
				}
			}
		}
	}
}
